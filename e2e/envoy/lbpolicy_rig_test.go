package envoy

// The rig of the load-balancing policy's tests: one Envoy (1.38 to 1.40)
// per test with hashlb as its clusters' load_balancing_policy (the dynamic
// module cmd/hashlb-lbpolicy, built from the tree), each cluster's
// endpoints in an EDS file the test rewrites, echo backends on loopback,
// and lbcore over the cluster's hosts as the oracle.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/lbpolicy"
	"github.com/hashlb/hashlb/lbcore"
)

// policyEndpoint is one host of a policy cluster.
type policyEndpoint struct {
	b      *envoyrun.Backend
	weight int    // LB weight; 0 leaves it out
	name   string // metadata hashlb.name
	hashID string // metadata hashlb.hashId
	prio   int    // the endpoint's priority
	addr   string // the endpoint's address when b is nil (one backend for many addresses)
}

// address is the endpoint's address.
func (ep policyEndpoint) address() string {
	if ep.b == nil {
		return ep.addr
	}
	return ep.b.Addr
}

// policyCluster is one cluster balanced by the policy.
type policyCluster struct {
	name    string
	config  string // the policy's JSON
	eps     []policyEndpoint
	health  bool // an active HTTP health check on /healthz, 100 ms apart
	retries bool // the route retries 5xx on other hosts (previous_hosts)
	ring    bool // Envoy's ring_hash on :path instead of the policy (a benchmark's reference)
}

// policyYAML is the bootstrap for clusters cs: one listener (port 0) whose
// routes pick the cluster by the x-test-cluster header, and per cluster an
// EDS file, dir/<name>-eds.yaml.
func policyYAML(t testing.TB, dir string, cs []policyCluster) []byte {
	t.Helper()
	var routes, clusters strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&routes, `
              - match: {prefix: "/", headers: [{name: x-test-cluster, string_match: {exact: %s}}]}
                route:
                  cluster: %s`, c.name, c.name)
		if c.ring {
			routes.WriteString(`
                  hash_policy: [{header: {header_name: ":path"}}]`)
		}
		if c.retries {
			routes.WriteString(`
                  retry_policy:
                    retry_on: 5xx
                    num_retries: 3
                    host_selection_retry_max_attempts: 5
                    retry_host_predicate:
                    - name: envoy.retry_host_predicates.previous_hosts
                      typed_config: {"@type": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate}`)
		}
		fmt.Fprintf(&clusters, `
  - name: %s
    connect_timeout: 1s
    type: EDS
    eds_cluster_config:
      eds_config:
        resource_api_version: V3
        path_config_source: {path: %s}`, c.name, filepath.Join(dir, c.name+"-eds.yaml"))
		if c.health {
			clusters.WriteString(`
    health_checks:
    - timeout: 1s
      interval: 0.1s
      no_traffic_interval: 0.1s
      unhealthy_threshold: 1
      healthy_threshold: 1
      http_health_check: {path: /healthz}`)
		}
		if c.ring {
			clusters.WriteString("\n    lb_policy: RING_HASH")
		} else {
			clusters.WriteString("\n" + strings.TrimSuffix(policyBalancing(envoyrun.LBPolicyName, c.config), "\n"))
		}
		writePolicyEDS(t, dir, c)
	}
	return []byte(`node: {id: hashlb-test, cluster: hashlb-test}
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: 0}}
static_resources:
  listeners:
  - name: main
    address: {socket_address: {address: 127.0.0.1, port_value: 0}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: lbpolicy
          http_protocol_options: {allow_custom_methods: true}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:` + routes.String() + `
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:` + clusters.String() + "\n")
}

// policyBalancing is a cluster's load_balancing_policy, at a cluster's
// indentation and newline-ended: the dynamic module lib<module>.so (the
// policy's is envoyrun.LBPolicyName) with config, its JSON.
func policyBalancing(module, config string) string {
	quoted, _ := json.Marshal(config) // a string: no error
	return fmt.Sprintf(`    load_balancing_policy:
      policies:
      - typed_extension_config:
          name: hashlb
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.dynamic_modules.v3.DynamicModulesLoadBalancerConfig
            dynamic_module_config: {name: %s, do_not_close: true}
            lb_policy_name: hashlb
            lb_policy_config:
              "@type": type.googleapis.com/google.protobuf.StringValue
              value: %s
`, module, quoted)
}

// writePolicyEDS writes c's endpoints as its EDS file, atomically (Envoy
// watches the file's directory for a rename onto it); endpoints of one
// priority are consecutive in c.eps.
func writePolicyEDS(t testing.TB, dir string, c policyCluster) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, `resources:
- "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
  cluster_name: %s
  endpoints:`, c.name)
	for i, ep := range c.eps {
		if i == 0 || ep.prio != c.eps[i-1].prio {
			fmt.Fprintf(&b, "\n  - priority: %d\n    lb_endpoints:", ep.prio)
		}
		host, port, _ := net.SplitHostPort(ep.address())
		fmt.Fprintf(&b, "\n    - endpoint: {address: {socket_address: {address: %q, port_value: %s}}}", host, port)
		if ep.weight > 0 {
			fmt.Fprintf(&b, "\n      load_balancing_weight: %d", ep.weight)
		}
		var md []string
		if ep.name != "" {
			md = append(md, fmt.Sprintf("name: %q", ep.name))
		}
		if ep.hashID != "" {
			md = append(md, fmt.Sprintf("hashId: %q", ep.hashID))
		}
		if len(md) > 0 {
			fmt.Fprintf(&b, "\n      metadata: {filter_metadata: {hashlb: {%s}}}", strings.Join(md, ", "))
		}
	}
	b.WriteString("\n")
	p := filepath.Join(dir, c.name+"-eds.yaml")
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// policyEnvoy is a running Envoy with the policy.
type policyEnvoy struct {
	*envoyrun.Envoy
	addr string // the listener
	cli  *http.Client
}

// startPolicy builds the module, writes the bootstrap for cs and starts
// Envoy bin (1.38 to 1.40) with --concurrency 4, the module on its search
// path.
func startPolicy(t testing.TB, bin envoyrun.Binary, cs []policyCluster) *policyEnvoy {
	t.Helper()
	return startPolicyWith(t, bin, cs, nil)
}

// startPolicyWith is startPolicy with the bootstrap passed through edit
// first (nil: as made).
func startPolicyWith(t testing.TB, bin envoyrun.Binary, cs []policyCluster, edit func([]byte) []byte) *policyEnvoy {
	t.Helper()
	mod, err := envoyrun.BuildLBPolicy("")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	boot := policyYAML(t, dir, cs)
	if edit != nil {
		boot = edit(boot)
	}
	e := startEnvoy(t, bin, envoyrun.Options{Bootstrap: boot, Dir: dir, Concurrency: 4,
		Env: []string{"ENVOY_DYNAMIC_MODULES_SEARCH_PATH=" + mod}})
	pe := &policyEnvoy{Envoy: e, addr: e.MustListener(t, "main"),
		cli: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}}
	t.Cleanup(pe.cli.CloseIdleConnections)
	for _, c := range cs {
		if c.ring {
			pe.waitMembership(t, c.name, len(c.eps))
		} else {
			pe.waitHosts(t, c.name, len(c.eps), 0)
		}
	}
	return pe
}

// waitHosts waits until every worker and the main thread of Envoy have
// given the policy of cluster a host set of n hosts, as the module logs it
// ("hashlb: cluster NAME: N hosts"), in the log after byte mark (len of
// Log() before the change).
func (e *policyEnvoy) waitHosts(t testing.TB, cluster string, n int, mark int) {
	t.Helper()
	want := fmt.Sprintf("hashlb: cluster %s: %d hosts", cluster, n)
	deadline := time.Now().Add(15 * time.Second)
	for {
		if countLog(e.Log()[mark:], want) >= 5 { // 4 workers and the main thread
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster %s: the policy did not see %d hosts on every thread within 15 s (%d log lines %q)", cluster, n, countLog(e.Log(), want), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitMembership waits until Envoy's cluster has n hosts (its
// membership_total), for a cluster the policy does not balance.
func (e *policyEnvoy) waitMembership(t testing.TB, cluster string, n int) {
	t.Helper()
	stat := "cluster." + cluster + ".membership_total"
	deadline := time.Now().Add(3 * time.Minute)
	for e.Stat(t, stat) != int64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("cluster %s: %s is %d after 3 min, want %d", cluster, stat, e.Stat(t, stat), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func countLog(log, s string) int { return strings.Count(log, s) }

// get sends one request to cluster on a new connection (each connection may
// land on another worker) and returns the backend that answered and its
// status.
func (e *policyEnvoy) get(t testing.TB, cluster string, headers [][2]string) (backend string, status int) {
	t.Helper()
	w := wire{srcIP: "127.0.0.1", dst: e.addr, method: "GET", target: "/"}
	w.setHeaders(headers)
	if w.host == "" {
		w.host = "example.com"
	}
	w.headers = append(w.headers, [2]string{"x-test-cluster", cluster})
	a, err := send(w)
	if err != nil {
		t.Fatal(err)
	}
	return a.backend, a.status
}

// getPath is a GET of path on a kept-alive connection, for tests that send
// many requests.
func (e *policyEnvoy) getPath(t testing.TB, cluster, path string, hdr ...string) (string, int) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+e.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-test-cluster", cluster)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.cli.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, bufio.NewReader(resp.Body))
	resp.Body.Close()
	return resp.Header.Get("X-Backend"), resp.StatusCode
}

// policyOracle is lbcore deciding over c's hosts as the policy makes them
// services (hashlb.hashId, else hashlb.name, else the address), with the
// named hosts down.
func policyOracle(t testing.TB, c policyCluster, down ...string) (*lbcore.Balancer, []lbcore.Service) {
	t.Helper()
	p, err := lbpolicy.ParseConfig([]byte(c.config))
	if err != nil {
		t.Fatal(err)
	}
	var svcs []lbcore.Service
	for _, ep := range c.eps {
		s := lbcore.Service{Address: ep.address(), HashID: ep.hashID, Weight: ep.weight, Enabled: true}
		if s.HashID == "" {
			s.HashID = ep.name
		}
		s.Name = ep.name
		if s.Name == "" {
			s.Name = ep.address()
			if s.HashID != "" {
				s.Name = s.HashID
			}
		}
		svcs = append(svcs, s)
	}
	cfg, err := p.Config.WithServices(svcs)
	if err != nil {
		t.Fatal(err)
	}
	b := lbcore.NewBalancer(cfg, 0)
	for i, ep := range c.eps {
		for _, d := range down {
			if ep.b != nil && ep.b.Name == d {
				b.SetDown(i, true)
			}
		}
	}
	return b, cfg.Services
}

// backendOf is the backend name of service i of c.
func backendOf(c policyCluster, i int) string { return c.eps[i].b.Name }
