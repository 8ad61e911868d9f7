package main

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hashlb/hashlb/cmd/hashlb-controller/controller"
	"github.com/hashlb/hashlb/cmd/hashlb-controller/internal/testenv"
)

const manifestDir = "../../configs/istio/controller"

// decodeManifests reads every YAML document of configs/istio/controller
// strictly into client-go's types (an unknown field is an error).
func decodeManifests(t *testing.T) []runtime.Object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", manifestDir, err)
	}
	out, err := testenv.Manifests(files...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestManifests(t *testing.T) {
	objs := decodeManifests(t)
	var (
		dep      *appsv1.Deployment
		sa       *corev1.ServiceAccount
		cr       *rbacv1.ClusterRole
		role     *rbacv1.Role
		crb      *rbacv1.ClusterRoleBinding
		rb       *rbacv1.RoleBinding
		unwanted []string
	)
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			dep = o
		case *corev1.ServiceAccount:
			sa = o
		case *rbacv1.ClusterRole:
			cr = o
		case *rbacv1.Role:
			role = o
		case *rbacv1.ClusterRoleBinding:
			crb = o
		case *rbacv1.RoleBinding:
			rb = o
		default:
			unwanted = append(unwanted, o.GetObjectKind().GroupVersionKind().Kind)
		}
	}
	if dep == nil || sa == nil || cr == nil || role == nil || crb == nil || rb == nil || len(unwanted) > 0 {
		t.Fatalf("manifests: want one each of Deployment, ServiceAccount, ClusterRole(+Binding), Role(+Binding); extra %v", unwanted)
	}

	// The Deployment runs as the ServiceAccount both bindings name.
	pod := dep.Spec.Template.Spec
	if pod.ServiceAccountName != sa.Name {
		t.Errorf("Deployment serviceAccountName = %q, want %q", pod.ServiceAccountName, sa.Name)
	}
	for _, b := range []struct {
		kind     string
		subjects []rbacv1.Subject
		ref      rbacv1.RoleRef
		wantRef  string
	}{
		{"ClusterRoleBinding", crb.Subjects, crb.RoleRef, "ClusterRole/" + cr.Name},
		{"RoleBinding", rb.Subjects, rb.RoleRef, "Role/" + role.Name},
	} {
		if len(b.subjects) != 1 || b.subjects[0].Kind != "ServiceAccount" || b.subjects[0].Name != sa.Name || b.subjects[0].Namespace != sa.Namespace {
			t.Errorf("%s subjects = %+v, want the ServiceAccount %s/%s", b.kind, b.subjects, sa.Namespace, sa.Name)
		}
		if got := b.ref.Kind + "/" + b.ref.Name; got != b.wantRef {
			t.Errorf("%s roleRef = %s, want %s", b.kind, got, b.wantRef)
		}
	}
	if role.Namespace != dep.Namespace || rb.Namespace != dep.Namespace {
		t.Errorf("leader-election Role in %q, binding in %q, want the Deployment's namespace %q", role.Namespace, rb.Namespace, dep.Namespace)
	}

	// Exactly the least rules: nothing more, nothing missing.
	wantCluster := []string{
		"/services get,list,watch",
		"discovery.k8s.io/endpointslices get,list,watch",
		"events.k8s.io/events create,patch",
		"extensions.istio.io/trafficextensions get,list,patch,watch",
		"extensions.istio.io/wasmplugins get,list,patch,watch",
		"gateway.networking.k8s.io/httproutes get,list,watch",
		"gateway.networking.k8s.io/referencegrants get,list,watch",
	}
	if got := ruleSet(cr.Rules); !slices.Equal(got, wantCluster) {
		t.Errorf("ClusterRole rules =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantCluster, "\n"))
	}
	wantRole := []string{
		"/events create,patch",
		"coordination.k8s.io/leases create",
		"coordination.k8s.io/leases[" + controller.Name + "] get,update",
	}
	if got := ruleSet(role.Rules); !slices.Equal(got, wantRole) {
		t.Errorf("Role rules =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantRole, "\n"))
	}

	// The container's arguments are the command's own flags, with leader
	// election on (two replicas) and the probes where the Deployment probes.
	if len(pod.Containers) != 1 {
		t.Fatalf("containers = %d, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	cfg, err := parseFlags(c.Args)
	if err != nil {
		t.Fatalf("parseFlags(%q): %v", c.Args, err)
	}
	if !cfg.opts.LeaderElection || *dep.Spec.Replicas < 2 {
		t.Errorf("leader election %v with %d replicas, want on with at least 2", cfg.opts.LeaderElection, *dep.Spec.Replicas)
	}
	if cfg.opts.LeaderElectionID != controller.Name {
		t.Errorf("-leader-elect-id = %q, want %q (the Role's resourceNames)", cfg.opts.LeaderElectionID, controller.Name)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, p := range []struct {
		flag, addr, port string
	}{
		{"-health-probe-bind-address", cfg.opts.ProbeAddr, "probes"},
		{"-metrics-bind-address", cfg.opts.MetricsAddr, "metrics"},
	} {
		if !strings.HasSuffix(p.addr, ":"+strconv.Itoa(int(ports[p.port]))) {
			t.Errorf("%s = %q, but the container port %q is %d", p.flag, p.addr, p.port, ports[p.port])
		}
	}
	for _, pr := range []struct {
		name string
		p    *corev1.Probe
		path string
	}{{"livenessProbe", c.LivenessProbe, "/healthz"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}} {
		if pr.p == nil || pr.p.HTTPGet == nil || pr.p.HTTPGet.Path != pr.path || pr.p.HTTPGet.Port.String() != "probes" {
			t.Errorf("%s = %+v, want GET %s on port probes", pr.name, pr.p, pr.path)
		}
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container securityContext = %+v, want a read-only root and no privilege escalation", sc)
	}
}

// ruleSet writes each (group, resource, names) with its sorted verbs, sorted.
func ruleSet(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		verbs := slices.Sorted(slices.Values(r.Verbs))
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				s := g + "/" + res
				if len(r.ResourceNames) > 0 {
					s += "[" + strings.Join(r.ResourceNames, ",") + "]"
				}
				out = append(out, s+" "+strings.Join(verbs, ","))
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "defaults"},
		{name: "all", args: []string{"-kubeconfig", "k.yaml", "-leader-elect", "-ecds-dir", "/var/lib/hashlb/ecds", "-debounce", "500ms", "-zap-log-level", "debug"}},
		{name: "unknown flag", args: []string{"-ecds"}, wantErr: "flag provided but not defined: -ecds"},
		{name: "stray argument", args: []string{"extra"}, wantErr: `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseFlags(tt.args)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("parseFlags(%q) = %v", tt.args, err)
			}
			if tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr) {
				t.Fatalf("parseFlags(%q) error = %v, want %s", tt.args, err, tt.wantErr)
			}
		})
	}
}
