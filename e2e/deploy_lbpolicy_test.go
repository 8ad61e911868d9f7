package e2e

// configs/envoy-lbpolicy.yaml and its endpoints file against go-control-plane
// (strict protojson, ValidateAll): the bootstrap loads hashlb as a
// dynamic-module load-balancing policy instead of the Wasm filter, so the
// filter's rules (checkBootstrap) do not apply; what applies is that every
// policy configuration it carries passes internal/lbpolicy, and that the
// endpoints file is a ClusterLoadAssignment for the cluster that uses the
// policy. Real Envoy 1.38, 1.39 and 1.40 run both in e2e/envoy
// (TestLBPolicyShippedBootstrap).

import (
	"fmt"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
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
		for _, p := range c.GetLoadBalancingPolicy().GetPolicies() {
			m := &dmlbv3.DynamicModulesLoadBalancerConfig{}
			tc := p.GetTypedExtensionConfig().GetTypedConfig()
			if !tc.MessageIs(m) {
				continue
			}
			if err := tc.UnmarshalTo(m); err != nil {
				return nil, fmt.Errorf("cluster %s: %w", c.GetName(), err)
			}
			s := &wrapperspb.StringValue{}
			if err := m.GetLbPolicyConfig().UnmarshalTo(s); err != nil {
				return nil, fmt.Errorf("cluster %s: lb_policy_config: want a google.protobuf.StringValue of hashlb's JSON: %w", c.GetName(), err)
			}
			if _, err := lbpolicy.ParseConfig([]byte(s.GetValue())); err != nil {
				return nil, fmt.Errorf("cluster %s: %w", c.GetName(), err)
			}
			// Envoy 1.38 opens a module by name alone (lib<name>.so in
			// ENVOY_DYNAMIC_MODULES_SEARCH_PATH) and ignores module: a file
			// that names the module's file instead starts in 1.39 and 1.40
			// only.
			dm := m.GetDynamicModuleConfig()
			if dm.GetModule() != nil {
				return nil, fmt.Errorf("cluster %s: dynamic_module_config.module is set: Envoy 1.38 ignores it and looks for lib.so; name the module (name: %s) instead", c.GetName(), envoyrun.LBPolicyName)
			}
			if dm.GetName() != envoyrun.LBPolicyName {
				return nil, fmt.Errorf("cluster %s: dynamic_module_config.name %q, want %s (Envoy opens lib%s.so, what ./build.sh lbpolicy writes, in ENVOY_DYNAMIC_MODULES_SEARCH_PATH)", c.GetName(), dm.GetName(), envoyrun.LBPolicyName, envoyrun.LBPolicyName)
			}
			if !dm.GetDoNotClose() {
				return nil, fmt.Errorf("cluster %s: dynamic_module_config.do_not_close is false: the Go runtime in the module cannot be unloaded", c.GetName())
			}
			if c.GetType() != clusterv3.Cluster_EDS {
				return nil, fmt.Errorf("cluster %s: the shipped example is an EDS cluster, got %v", c.GetName(), c.GetType())
			}
			users = append(users, c.GetName())
		}
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("no cluster uses %s", "envoy.load_balancing_policies.dynamic_modules")
	}
	return users, nil
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
