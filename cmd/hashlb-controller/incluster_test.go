package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hashlb/hashlb/cmd/hashlb-controller/controller"
	"github.com/hashlb/hashlb/cmd/hashlb-controller/internal/testenv"
	"github.com/hashlb/hashlb/cmd/hashlb-controller/services"
)

// saDir is where the kubelet mounts a pod's service-account token, CA and
// namespace, and where client-go's rest.InClusterConfig and
// controller-runtime's leader election read them (fixed paths).
const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// TestInClusterConfig runs the command as it runs in a pod, with no
// kubeconfig: the API server's address in KUBERNETES_SERVICE_HOST and
// KUBERNETES_SERVICE_PORT, and a real ServiceAccount token (a TokenRequest
// for configs/istio/controller's ServiceAccount, whose RBAC is applied),
// the API server's CA and the namespace as files at the kubelet's fixed
// paths. Those paths are not writable here, so the command runs in a
// private mount namespace (unshare -m) where a tmpfs over /run holds them,
// bind-mounted from a temporary directory: client-go's own
// rest.InClusterConfig reads them unchanged. The command runs with the
// Deployment's arguments (probe and metrics ports moved to free ones); it
// must authenticate with the token, trust the API server through ca.crt
// (a failed CA read leaves TLS unverifiable against this self-signed API
// server), take the leader Lease in the namespace the namespace file names,
// and keep a WasmPlugin's services.
func TestInClusterConfig(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err == nil {
		err = exec.Command(unshare, mountNSArgs("true")...).Run()
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no private mount namespace (unshare -m) for the in-cluster files: %v", err)
		}
		t.Skipf("no private mount namespace (unshare -m) for the in-cluster files: %v", err)
	}
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The ServiceAccount and its RBAC, as kubectl apply -f configs/istio/controller/ would.
	if err := testenv.ApplyRBAC(ctx, admin, manifestDir); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("hashlb-system").CreateToken(ctx, "hashlb-controller",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for hashlb-system/hashlb-controller: %v", err)
	}
	files := t.TempDir()
	for name, data := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": env.Config.CAData, "namespace": []byte("hashlb-system")} {
		if err := os.WriteFile(filepath.Join(files, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}

	// The Deployment's arguments, with free ports.
	var args []string
	for _, o := range decodeManifests(t) {
		if dep, ok := o.(*appsv1.Deployment); ok {
			args = append(args, dep.Spec.Template.Spec.Containers[0].Args...)
		}
	}
	if len(args) == 0 {
		t.Fatal("no Deployment arguments in configs/istio/controller")
	}
	probes := freeAddr(t)
	args = append(args, "-metrics-bind-address=0", "-health-probe-bind-address="+probes)
	script := fmt.Sprintf(`set -e
run=$(readlink -f %s)
mount -t tmpfs -o mode=0755 tmpfs "$run"
mkdir -p "$run/secrets/kubernetes.io/serviceaccount"
mount --bind -o ro "$HASHLB_SA_FILES" %s
exec "$@"`, filepath.Dir(filepath.Dir(filepath.Dir(saDir))), saDir)
	cmd := exec.Command(unshare, mountNSArgs("sh", "-c", script, "sh", os.Args[0], "-test.run=^TestInClusterHelper$", "--")...)
	cmd.Args = append(cmd.Args, args...)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"KUBERNETES_SERVICE_HOST=" + u.Hostname(), "KUBERNETES_SERVICE_PORT=" + u.Port(),
		"HASHLB_INCLUSTER_HELPER=1", "HASHLB_SA_FILES=" + files,
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the command after SIGTERM: %v", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("the command did not stop within 30s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("the command's output:\n%s", out.Bytes())
		}
	}()

	// It answers its readiness probe and does its work.
	ns := "incluster"
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}); err != nil {
		t.Fatal(err)
	}
	ready := true
	if err := admin.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "web-a", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-0"}}},
	}); err != nil {
		t.Fatal(err)
	}
	wp := controller.NewWasmPlugin()
	wp.SetNamespace(ns)
	wp.SetName("hashlb")
	wp.SetAnnotations(map[string]string{services.AnnotationService: "web"})
	wp.Object["spec"] = map[string]any{"pluginConfig": map[string]any{"services": []any{map[string]any{"name": "a", "address": "192.0.2.1:80"}}}}
	if err := admin.Create(ctx, wp); err != nil {
		t.Fatal(err)
	}
	want := `[{"address":"10.1.0.1:8080","enabled":true,"hashId":"web-0","name":"web-0"}]`
	deadline := time.Now().Add(45 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the command stopped: %v", err)
		default:
		}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(wp), wp); err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(wp.Object["spec"].(map[string]any)["pluginConfig"].(map[string]any)["services"])
		if strings.Contains(got, "10.1.0.1:8080") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 45s, services = %s, want %s", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err := http.Get("http://" + probes + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /readyz = %d %s", resp.StatusCode, body)
	}
	// The Lease is in the namespace the namespace file names (the
	// Deployment's arguments do not name one).
	var lease coordinationv1.Lease
	if err := admin.Get(ctx, client.ObjectKey{Namespace: "hashlb-system", Name: controller.Name}, &lease); err != nil {
		t.Fatalf("the leader-election Lease hashlb-system/%s: %v", controller.Name, err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("Lease hashlb-system/%s has no holder", controller.Name)
	}
}

// mountNSArgs is unshare's arguments for a private mount namespace running
// argv: as root, -m; otherwise also a user namespace mapping the user to root.
func mountNSArgs(argv ...string) []string {
	args := []string{"--mount", "--propagation", "private"}
	if os.Geteuid() != 0 {
		args = append(args, "--user", "--map-root-user")
	}
	return append(args, argv...)
}

// TestInClusterHelper is the command inside TestInClusterConfig's mount
// namespace (the test binary re-executed); in any other run it does nothing.
func TestInClusterHelper(t *testing.T) {
	if os.Getenv("HASHLB_INCLUSTER_HELPER") != "1" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "hashlb-controller:", err)
		os.Exit(1)
	}
}

func ptr[T any](v T) *T { return &v }
