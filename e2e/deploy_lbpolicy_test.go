package e2e

// configs/envoy-lbpolicy.yaml, its fleet variant configs/envoy-lbpolicy-fleet.yaml
// and their endpoints file against go-control-plane
// (strict protojson, ValidateAll): the bootstrap loads hashlb as a
// dynamic-module load-balancing policy instead of the Wasm filter, so the
// filter's rules (checkBootstrap) do not apply; what applies is that every
// policy configuration it carries passes internal/lbpolicy, and that the
// endpoints file is a ClusterLoadAssignment for the cluster that uses the
// policy. Real Envoy 1.38, 1.39 and 1.40 run both in e2e/envoy
// (TestLBPolicyShippedBootstrap). configs/istio/lbpolicy/envoyfilter.yaml
// gets the same checks of its CLUSTER patch against istio.io/api; e2e/istio
// applies it to a real istiod (TestShippedLBPolicy).

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	dmlbv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/dynamic_modules/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/lbpolicy"
)

// checkLBPolicyBootstrap checks the policy's bootstrap and returns the names
// of the clusters that use the policy.
func checkLBPolicyBootstrap(data []byte) ([]string, error) {
	b, err := loadBootstrap(data)
	if err != nil {
		return nil, err
	}
	var users []string
	for _, c := range b.GetStaticResources().GetClusters() {
		found, err := checkClusterLBPolicy(c)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		if c.GetType() != clusterv3.Cluster_EDS {
			return nil, fmt.Errorf("cluster %s: the shipped example is an EDS cluster, got %v", c.GetName(), c.GetType())
		}
		users = append(users, c.GetName())
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("no cluster uses %s", "envoy.load_balancing_policies.dynamic_modules")
	}
	return users, nil
}

// shippedFleetMembers are the etcd members configs/envoy-lbpolicy-fleet.yaml
// names: a three-member cluster on loopback, as its comment starts one.
var shippedFleetMembers = []string{"127.0.0.1:2379", "127.0.0.1:22379", "127.0.0.1:32379"}

// checkLBPolicyFleetBootstrap checks configs/envoy-lbpolicy-fleet.yaml
// (fleet) against configs/envoy-lbpolicy.yaml (base): the policy's
// configuration is ROUNDROBIN persisting ${request.header.x-client-id}
// through persistence.fleet over shippedFleetMembers, and everything else
// (listener, route, cluster, EDS file, health check, admin) is base's, so
// that the fleet file is the shipped policy bootstrap with a fleet and
// nothing else.
func checkLBPolicyFleetBootstrap(fleet, base []byte) error {
	if _, err := checkLBPolicyBootstrap(fleet); err != nil {
		return err
	}
	f, err := loadBootstrap(fleet)
	if err != nil {
		return err
	}
	b, err := loadBootstrap(base)
	if err != nil {
		return fmt.Errorf("configs/envoy-lbpolicy.yaml: %w", err)
	}
	pol, err := takeLBPolicyConfig(f)
	if err != nil {
		return err
	}
	if _, err := takeLBPolicyConfig(b); err != nil {
		return fmt.Errorf("configs/envoy-lbpolicy.yaml: %w", err)
	}
	var c struct {
		LBMethod    string `json:"lbMethod"`
		Persistence struct {
			Keys  []string `json:"keys"`
			Fleet struct {
				Endpoints []string `json:"endpoints"`
			} `json:"fleet"`
		} `json:"persistence"`
	}
	if err := json.Unmarshal([]byte(pol), &c); err != nil {
		return err
	}
	if c.LBMethod != "ROUNDROBIN" {
		return fmt.Errorf("lbMethod %q, want ROUNDROBIN", c.LBMethod)
	}
	if !slices.Equal(c.Persistence.Keys, []string{"${request.header.x-client-id}"}) {
		return fmt.Errorf("persistence.keys %q, want the x-client-id header", c.Persistence.Keys)
	}
	if !slices.Equal(c.Persistence.Fleet.Endpoints, shippedFleetMembers) {
		return fmt.Errorf("persistence.fleet.endpoints %q, want the three members %q", c.Persistence.Fleet.Endpoints, shippedFleetMembers)
	}
	f.Node, b.Node = nil, nil
	if !proto.Equal(f, b) {
		return fmt.Errorf("differs from configs/envoy-lbpolicy.yaml beyond the policy's configuration and the node:\n%s\nwant\n%s",
			protojson.Format(f), protojson.Format(b))
	}
	return nil
}

// takeLBPolicyConfig returns the JSON of the one hashlb policy of b's
// clusters and blanks it in b.
func takeLBPolicyConfig(b *bootstrapv3.Bootstrap) (string, error) {
	var found []string
	for _, c := range b.GetStaticResources().GetClusters() {
		for _, p := range c.GetLoadBalancingPolicy().GetPolicies() {
			tc := p.GetTypedExtensionConfig().GetTypedConfig()
			m := &dmlbv3.DynamicModulesLoadBalancerConfig{}
			if !tc.MessageIs(m) {
				continue
			}
			if err := tc.UnmarshalTo(m); err != nil {
				return "", err
			}
			s := &wrapperspb.StringValue{}
			if err := m.GetLbPolicyConfig().UnmarshalTo(s); err != nil {
				return "", err
			}
			found = append(found, s.GetValue())
			m.LbPolicyConfig = nil
			a, err := anypb.New(m)
			if err != nil {
				return "", err
			}
			p.GetTypedExtensionConfig().TypedConfig = a
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("%d hashlb policies, want 1", len(found))
	}
	return found[0], nil
}

// checkClusterLBPolicy checks each of a cluster's policies that is hashlb's
// dynamic module and reports whether it has one: its configuration passes
// internal/lbpolicy, the module is named (lib<name>.so, what ./build.sh
// lbpolicy writes) and never closed.
func checkClusterLBPolicy(c *clusterv3.Cluster) (found bool, err error) {
	for _, p := range c.GetLoadBalancingPolicy().GetPolicies() {
		m := &dmlbv3.DynamicModulesLoadBalancerConfig{}
		tc := p.GetTypedExtensionConfig().GetTypedConfig()
		if !tc.MessageIs(m) {
			continue
		}
		if err := tc.UnmarshalTo(m); err != nil {
			return false, fmt.Errorf("cluster %s: %w", c.GetName(), err)
		}
		s := &wrapperspb.StringValue{}
		if err := m.GetLbPolicyConfig().UnmarshalTo(s); err != nil {
			return false, fmt.Errorf("cluster %s: lb_policy_config: want a google.protobuf.StringValue of hashlb's JSON: %w", c.GetName(), err)
		}
		if _, err := lbpolicy.ParseConfig([]byte(s.GetValue())); err != nil {
			return false, fmt.Errorf("cluster %s: %w", c.GetName(), err)
		}
		// Envoy 1.38 opens a module by name alone (lib<name>.so in
		// ENVOY_DYNAMIC_MODULES_SEARCH_PATH) and ignores module: a file
		// that names the module's file instead starts in 1.39 and 1.40
		// only.
		dm := m.GetDynamicModuleConfig()
		if dm.GetModule() != nil {
			return false, fmt.Errorf("cluster %s: dynamic_module_config.module is set: Envoy 1.38 ignores it and looks for lib.so; name the module (name: %s) instead", c.GetName(), envoyrun.LBPolicyName)
		}
		if dm.GetName() != envoyrun.LBPolicyName {
			return false, fmt.Errorf("cluster %s: dynamic_module_config.name %q, want %s (Envoy opens lib%s.so, what ./build.sh lbpolicy writes, in ENVOY_DYNAMIC_MODULES_SEARCH_PATH)", c.GetName(), dm.GetName(), envoyrun.LBPolicyName, envoyrun.LBPolicyName)
		}
		if !dm.GetDoNotClose() {
			return false, fmt.Errorf("cluster %s: dynamic_module_config.do_not_close is false: the Go runtime in the module cannot be unloaded", c.GetName())
		}
		found = true
	}
	return found, nil
}

// checkLBPolicyEndpoints checks a path_config_source EDS file: one
// ClusterLoadAssignment per resource, for one of clusters, with endpoints.
func checkLBPolicyEndpoints(data []byte, clusters []string) error {
	j, err := yamlToJSON(data)
	if err != nil {
		return err
	}
	d := &discoveryv3.DiscoveryResponse{}
	if err := strictUnmarshal(j, d); err != nil {
		return err
	}
	if len(d.GetResources()) == 0 {
		return fmt.Errorf("no resources")
	}
	for _, r := range d.GetResources() {
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := r.UnmarshalTo(cla); err != nil {
			return err
		}
		if err := cla.ValidateAll(); err != nil {
			return err
		}
		if !strings.Contains(" "+strings.Join(clusters, " ")+" ", " "+cla.GetClusterName()+" ") {
			return fmt.Errorf("endpoints for cluster %q, which uses no hashlb policy (%v)", cla.GetClusterName(), clusters)
		}
		if len(cla.GetEndpoints()) == 0 || len(cla.GetEndpoints()[0].GetLbEndpoints()) == 0 {
			return fmt.Errorf("cluster %s: no endpoints", cla.GetClusterName())
		}
	}
	return nil
}

// readIstioLBPolicy returns the load-balancing policy's Istio bundle:
// configs/istio/*.yaml with lbpolicy/envoyfilter.yaml in the place of
// envoyfilter.yaml and wasmplugin.yaml, as its comment says to apply it.
func readIstioLBPolicy(t testing.TB) map[string][]byte {
	t.Helper()
	files := readIstioDir(t)
	delete(files, "wasmplugin.yaml")
	files["envoyfilter.yaml"] = readRepoFile(t, "configs/istio/lbpolicy/envoyfilter.yaml")
	return files
}

// checkIstioLBPolicy checks the policy's Istio bundle: its EnvoyFilter's
// CLUSTER patch is a MERGE on the ServiceEntry's outbound cluster whose
// value is a valid Envoy Cluster with hashlb's dynamic module as its
// policy (checkClusterPatches, checkClusterLBPolicy), and the DestinationRule and the
// VirtualService name the ServiceEntry's host. e2e/istio
// (TestShippedLBPolicy) applies it to a real istiod.
func checkIstioLBPolicy(files map[string][]byte) error {
	b, err := loadIstio(files)
	if err != nil {
		return err
	}
	if b.wasm != nil || b.ef == nil || b.se == nil {
		return errors.New("the policy's bundle is an EnvoyFilter and a ServiceEntry, without a WasmPlugin")
	}
	host, port, err := checkServiceEntry(b.se)
	errs := []error{err, checkClusterPatches(b.ef, host, port, "envoy.load_balancing_policies.dynamic_modules", checkClusterLBPolicy)}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if b.dr != nil && b.dr.GetHost() != host {
		bad("DestinationRule host %q is not the ServiceEntry host %q", b.dr.GetHost(), host)
	}
	if b.vs != nil && !slices.Contains(b.vs.GetHosts(), host) {
		bad("VirtualService hosts %q do not include %q", b.vs.GetHosts(), host)
	}
	return errors.Join(errs...)
}

// TestIstioLBPolicyManifests checks the shipped bundle, and that a patch
// on another cluster, a policy configuration hashlb refuses and a module
// named by its file are each refused with their reason.
func TestIstioLBPolicyManifests(t *testing.T) {
	if err := checkIstioLBPolicy(readIstioLBPolicy(t)); err != nil {
		t.Fatalf("configs/istio/lbpolicy: %v", err)
	}
	for _, ch := range []struct{ old, new, want string }{
		{"service: hashlb-backends.demo.internal", "service: hashlb-backend.demo.internal", "not the ServiceEntry's"},
		{`"hashLength": 80`, `"hashLength": 0`, "hashLength"},
		{"{ name: hashlb_lbpolicy, do_not_close: true }", "{ module: { local: { filename: /var/lib/hashlb/libhashlb_lbpolicy.so } }, do_not_close: true }", "Envoy 1.38 ignores it"},
	} {
		files := readIstioLBPolicy(t)
		changed := strings.Replace(string(files["envoyfilter.yaml"]), ch.old, ch.new, 1)
		if changed == string(files["envoyfilter.yaml"]) {
			t.Fatalf("configs/istio/lbpolicy/envoyfilter.yaml has no %q", ch.old)
		}
		files["envoyfilter.yaml"] = []byte(changed)
		if err := checkIstioLBPolicy(files); err == nil || !strings.Contains(err.Error(), ch.want) {
			t.Errorf("%s -> %s: %v, want an error saying %q", ch.old, ch.new, err, ch.want)
		}
	}
}

// TestLBPolicyFleetBootstrapShape: configs/envoy-lbpolicy-fleet.yaml passes
// checkLBPolicyFleetBootstrap, and each change that would make it another
// file than the shipped policy bootstrap with a fleet is refused with its
// reason: a member left out, another key, another method, and a change
// outside the policy's configuration.
func TestLBPolicyFleetBootstrapShape(t *testing.T) {
	fleet := readRepoFile(t, "configs/envoy-lbpolicy-fleet.yaml")
	base := readRepoFile(t, "configs/envoy-lbpolicy.yaml")
	if err := checkLBPolicyFleetBootstrap(fleet, base); err != nil {
		t.Fatalf("configs/envoy-lbpolicy-fleet.yaml: %v", err)
	}
	for _, ch := range []struct{ old, new, want string }{
		{`"127.0.0.1:22379", `, ``, "the three members"},
		{`x-client-id}`, `x-user}`, "x-client-id"},
		{`"lbMethod": "ROUNDROBIN"`, `"lbMethod": "URLHASH"`, "ROUNDROBIN"},
		{`interval: 2s`, `interval: 3s`, "differs from configs/envoy-lbpolicy.yaml"},
		{`"timeout": "1s"`, `"timeout": "1s", "cluster": "etcd"`, "persistence.fleet.cluster"},
	} {
		changed := strings.Replace(string(fleet), ch.old, ch.new, 1)
		if changed == string(fleet) {
			t.Fatalf("configs/envoy-lbpolicy-fleet.yaml has no %q", ch.old)
		}
		if err := checkLBPolicyFleetBootstrap([]byte(changed), base); err == nil || !strings.Contains(err.Error(), ch.want) {
			t.Errorf("%s -> %s: %v, want an error saying %q", ch.old, ch.new, err, ch.want)
		}
	}
}
