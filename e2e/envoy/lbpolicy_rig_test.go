package envoy

// The rig of the load-balancing policy's tests: one Envoy (1.38 to 1.40)
// per test with hashlb as its clusters' load_balancing_policy (the dynamic
// module cmd/hashlb-lbpolicy, built from the tree), each cluster's
// endpoints in an EDS file the test rewrites, echo backends on loopback,
// and lbcore over the cluster's hosts as the oracle.

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

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

// policyBootstrap is the bootstrap for clusters cs: one listener (port 0)
// whose routes pick the cluster by the x-test-cluster header, and per
// cluster an EDS file, dir/<name>-eds.yaml, written here.
func policyBootstrap(t testing.TB, dir string, cs []policyCluster) bootstrap {
	t.Helper()
	vh := &routev3.VirtualHost{Name: "all", Domains: []string{"*"}}
	var clusters []*cluster
	for _, c := range cs {
		r := routeTo(c.name, headerIs("x-test-cluster", c.name))
		if c.ring {
			r.GetRoute().HashPolicy = hashOnPath()
		}
		if c.retries {
			r.GetRoute().RetryPolicy = otherHostRetries()
		}
		vh.Routes = append(vh.Routes, r)
		cl := edsCluster(c.name, policyEDSPath(dir, c))
		if c.health {
			cl.HealthChecks = []*corev3.HealthCheck{fastHealthCheck()}
		}
		if c.ring {
			cl.LbPolicy = clusterv3.Cluster_RING_HASH
		} else {
			cl.LoadBalancingPolicy = policyBalancing(envoyrun.LBPolicyName, c.config)
		}
		clusters = append(clusters, cl)
		writePolicyEDS(t, dir, c)
	}
	hcm := connManager("lbpolicy", &routev3.RouteConfiguration{VirtualHosts: []*routev3.VirtualHost{vh}})
	hcm.HttpProtocolOptions = &corev3.Http1ProtocolOptions{AllowCustomMethods: true}
	return bootstrap{other: []*listenerv3.Listener{listenerOn(t, "main", loopback, hcmFilter(hcm))}, clusters: clusters}
}

// policyYAML is policyBootstrap as Envoy reads it.
func policyYAML(t testing.TB, dir string, cs []policyCluster) []byte {
	t.Helper()
	return policyBootstrap(t, dir, cs).yaml(t)
}

// policyEDSPath is the EDS file of c.
func policyEDSPath(dir string, c policyCluster) string { return filepath.Join(dir, c.name+"-eds.yaml") }

// writePolicyEDS writes c's endpoints as its EDS file, atomically (Envoy
// watches the file's directory for a rename onto it); endpoints of one
// priority are consecutive in c.eps.
func writePolicyEDS(t testing.TB, dir string, c policyCluster) {
	t.Helper()
	var eps []hashlbEndpoint
	for _, ep := range c.eps {
		eps = append(eps, hashlbEndpoint{addr: ep.address(), prio: ep.prio, weight: ep.weight, name: ep.name, hashID: ep.hashID})
	}
	writeAtomic(t, policyEDSPath(dir, c), edsFile(t, c.name, eps))
}

// buildPolicy is envoyrun.BuildLBPolicy, a failed build failing t.
func buildPolicy(t testing.TB, ldflags string) string {
	t.Helper()
	return built(t, envoyrun.BuildLBPolicy, ldflags)
}

// built is what build(arg) built, a failed build failing t.
func built(t testing.TB, build func(string) (string, error), arg string) string {
	t.Helper()
	p, err := build(arg)
	if err != nil {
		t.Fatal(err)
	}
	return p
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

// startPolicyWith is startPolicy with the bootstrap changed by edit first
// (nil: as made).
func startPolicyWith(t testing.TB, bin envoyrun.Binary, cs []policyCluster, edit func(*bootstrap)) *policyEnvoy {
	t.Helper()
	mod := buildPolicy(t, "")
	dir := t.TempDir()
	boot := policyBootstrap(t, dir, cs)
	if edit != nil {
		edit(&boot)
	}
	e := startEnvoy(t, bin, envoyrun.Options{Bootstrap: boot.yaml(t), Dir: dir, Concurrency: 4,
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
	waitLog(t, e, mark, fmt.Sprintf("hashlb: cluster %s: %d hosts", cluster, n), 5) // 4 workers and the main thread
}

// waitMembership waits until Envoy's cluster has n hosts (its
// membership_total), for a cluster the policy does not balance.
func (e *policyEnvoy) waitMembership(t testing.TB, cluster string, n int) {
	t.Helper()
	waitStatIs(t, e.Envoy, "cluster."+cluster+".membership_total", func(v int64) bool { return v == int64(n) })
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
