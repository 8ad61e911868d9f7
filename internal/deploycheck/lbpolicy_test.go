package deploycheck

import (
	"slices"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/internal/lbpolicy"
)

// policyCluster is a bootstrap with one cluster whose policy is hashlb's
// and whose load_assignment has the lb_endpoints given.
func policyCluster(endpoints string) []byte {
	return []byte(`static_resources:
  clusters:
  - name: c
    type: STRICT_DNS
    load_assignment:
      cluster_name: c
      endpoints:
      - lb_endpoints:` + endpoints + `
    load_balancing_policy:
      policies:
      - typed_extension_config:
          name: hashlb
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.dynamic_modules.v3.DynamicModulesLoadBalancerConfig
            dynamic_module_config: { name: hashlb_lbpolicy, do_not_close: true }
            lb_policy_config: { "@type": type.googleapis.com/google.protobuf.StringValue, value: '{"lbMethod":"URLHASH"}' }
`)
}

// TestPolicyHosts: the hosts are read as the policy reads them: addresses
// as Envoy writes them, LB weights (a plain number or a wrapper's value),
// the hashlb metadata's string values, the EDS health that counts as down;
// a host name Envoy resolves leaves the hosts unknown, saying why.
func TestPolicyHosts(t *testing.T) {
	src, err := Scan(policyCluster(`
        - endpoint: { address: { socket_address: { address: "2001:db8::1", port_value: 80 } } }
          load_balancing_weight: { value: 4 }
          metadata: { filter_metadata: { hashlb: { hashId: h1, name: n1 } } }
        - endpoint: { address: { socket_address: { address: 10.0.0.2, port_value: 8080 } } }
          load_balancing_weight: 2
          health_status: DEGRADED
        - endpoint: { address: { socket_address: { address: 10.0.0.3, port_value: 8080 } } }
          health_status: HEALTHY`))
	if err != nil {
		t.Fatal(err)
	}
	p := src.Configs()[0].Policy
	want := []lbpolicy.HostInfo{{Address: "[2001:db8::1]:80", Weight: 4, HashID: "h1", Name: "n1"},
		{Address: "10.0.0.2:8080", Weight: 2}, {Address: "10.0.0.3:8080", Weight: 1}}
	if p == nil || p.Unknown != "" || !slices.Equal(p.Hosts, want) || !slices.Equal(p.Down, []bool{false, true, false}) {
		t.Fatalf("Policy = %+v, want hosts %+v, the second down", p, want)
	}

	src, err = Scan(policyCluster(`
        - endpoint: { address: { socket_address: { address: backend.example.com, port_value: 80 } } }`))
	if err != nil {
		t.Fatal(err)
	}
	if p := src.Configs()[0].Policy; len(p.Hosts) != 0 || !strings.Contains(p.Unknown, "not an IP address and port") {
		t.Errorf("a host name: Policy = %+v, want the hosts unknown", p)
	}
}
