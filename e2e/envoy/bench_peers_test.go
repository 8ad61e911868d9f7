package envoy

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/loadgen"
	"github.com/hashlb/hashlb/lbcore"
)

// The peers of BenchmarkEnvoyPeers (bench_test.go): one Envoy bootstrap
// each, every one the same listener, route and cluster settings as
// envoy.yaml (HTTP connection manager, the route's retry policy, a STATIC
// cluster with its outlier detection; circuit breakers raised, see below),
// differing only in what picks the
// upstream: Envoy's own load balancer, or hashlb before the router with
// override_host obeying it.

// peerKind is what picks the upstream in one peer.
type peerKind int

const (
	peerRoundRobin    peerKind = iota // lb_policy ROUND_ROBIN
	peerRingHash                      // lb_policy RING_HASH, hash_policy on :path
	peerMaglev                        // lb_policy MAGLEV, hash_policy on :path
	peerHashlb                        // hashlb (Wasm) + override_host
	peerNoop                          // the no-op Wasm module + ROUND_ROBIN
	peerOverride                      // override_host on a header the client sends, no Wasm
	peerPolicy                        // hashlb as the load-balancing policy (the dynamic module), no Wasm
	peerPolicyFloor                   // the C dynamic module testdata/lbfloor: a policy's floor
	peerPolicyGoFloor                 // the policy built to choose as lbfloor does, in Go
	peerPolicyNoYield                 // the policy built without its workers' yields (goruntime.go)
)

// peerSpec is one row of the table.
type peerSpec struct {
	key, name string
	kind      peerKind
	// endpoints are the cluster's addresses ("127.0.0.1:PORT"), in order;
	// hashlb's services are the same, named s0…
	endpoints []string
	// plugin is hashlb's configuration (peerHashlb; peerPolicy: the
	// policy's, without services).
	plugin []byte
}

// bootstrap renders the peer's Envoy configuration (admin and listener on
// port 0; the module at dist/hashlb.wasm or dist/noop.wasm of the work dir).
func (p peerSpec) bootstrap(t testing.TB) []byte {
	t.Helper()
	rc := retryRoutes(routeAll("bench", "bench", "upstream"), shippedRetries())
	c := staticCluster(t, "upstream", p.endpoints...)
	c.OutlierDetection = shippedOutlier()
	// Unlike envoy.yaml: no circuit breaker trips in the benchmark. The
	// default max_connections (1024) overflows with 10⁴ endpoints (a
	// connection per endpoint and worker) for Maglev and hashlb alike;
	// every row has the same thresholds.
	million := wrapperspb.UInt32(1_000_000)
	c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
		MaxConnections: million, MaxPendingRequests: million, MaxRequests: million}}}
	var filters []*hcmv3.HttpFilter
	switch p.kind {
	case peerRoundRobin, peerNoop:
		c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
	case peerRingHash, peerMaglev:
		// The hash of the :path pseudo-header: what a user of Envoy's own
		// consistent hashing writes for URL affinity (URLHASH's input).
		rc.VirtualHosts[0].Routes[0].GetRoute().HashPolicy = hashOnPath()
		c.LbPolicy = clusterv3.Cluster_RING_HASH
		if p.kind == peerMaglev {
			c.LbPolicy = clusterv3.Cluster_MAGLEV
		}
	case peerHashlb, peerOverride:
		// As envoy.yaml: override_host on hashlb's header, round robin
		// when it names no endpoint.
		c.LoadBalancingPolicy = overrideHostPolicy()
	case peerPolicy, peerPolicyFloor, peerPolicyGoFloor, peerPolicyNoYield:
		// The module at lib<name>.so of the work dir (peerVersion links it).
		name := envoyrun.LBPolicyName
		if p.kind == peerPolicyFloor {
			name = peerFloorName
		}
		c.LoadBalancingPolicy = policyBalancing(name, string(p.plugin))
	}
	switch p.kind {
	case peerHashlb:
		filters = append(filters, wasmHTTP(wasmPlugin("", p.plugin)))
	case peerNoop:
		filters = append(filters, wasmHTTP(pluginOf("hashlb", "", "hashlb", "dist/noop.wasm", "{}")))
	}
	return bootstrap{other: []*listenerv3.Listener{listenerOn(t, "bench", loopback, hcmFilter(connManager("bench", rc, filters...)))},
		clusters: []*cluster{c}}.yaml(t)
}

// peerPlugin is envoy.yaml's plugin configuration over the endpoints
// (services s0, s1, …), with envoy.yaml's persistence on x-client-id when
// persist is set.
func peerPlugin(endpoints []string, persist bool) []byte {
	var b strings.Builder
	b.WriteString(`{"lbMethod": "URLHASH", "upstreamHeader": "x-envoy-original-dst-host", "upstreamCount": 3,`)
	if persist {
		b.WriteString(` "persistence": {"keys": ["${request.header.x-client-id}"]},`)
	}
	b.WriteString(` "services": [`)
	for i, a := range endpoints {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name": "s%d", "address": %q}`, i, a)
	}
	b.WriteString("]}")
	return []byte(b.String())
}

// peerEndpoints are n loopback addresses on one port (127.1.0.1:P,
// 127.1.0.2:P, …), all answered by one StartFastBackendAny.
func peerEndpoints(n, port int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("127.1.%d.%d:%d", i/250, i%250+1, port)
	}
	return out
}

// peerTargets are the request paths, the same for every peer: Zipf
// (s = 1.1) over 10⁵ keys, as e2e's scale benchmark draws them, so a few
// paths are frequent and many rare.
func peerTargets(count int) []string {
	rng := rand.New(rand.NewPCG(11, 12))
	z := rand.NewZipf(rng, 1.1, 1, 100_000-1)
	out := make([]string, count)
	for i := range out {
		out[i] = fmt.Sprintf("/catalog/items/%d", z.Uint64())
	}
	return out
}

// peerClientIDs is how many distinct x-client-id values the requests carry:
// few, so the persistence row's lookups are hits after the first of each.
const peerClientIDs = 64

// peerRequests renders the requests every peer is sent: the targets,
// with a browser's usual headers and one of peerClientIDs client ids, and the
// extra header of each when extra is not nil.
func peerRequests(targets []string, extra func(target string) [2]string) [][]byte {
	out := make([][]byte, len(targets))
	for i, t := range targets {
		h := [][2]string{{"User-Agent", "hashlb-bench/1"}, {"Accept", "application/json"},
			{"X-Client-Id", fmt.Sprintf("client-%d", i%peerClientIDs)}}
		if extra != nil {
			h = append(h, extra(t))
		}
		out[i] = loadgen.Render("shop.example.com", t, h...)
	}
	return out
}

// peerRankedHeader returns, for a target, the x-envoy-original-dst-host header
// hashlb writes for it under plugin (its upstreamCount addresses, best
// first, as lbcore ranks them): what the override_host row's client sends
// itself, so that Envoy's part of steering is measured without Wasm.
func peerRankedHeader(b testing.TB, plugin []byte) func(target string) [2]string {
	cfg, err := lbcore.ParseConfig(plugin)
	if err != nil {
		b.Fatalf("plugin configuration: %v", err)
	}
	bal := lbcore.NewBalancer(cfg, 0)
	return func(target string) [2]string {
		d := bal.Decide(&lbcore.Request{Target: target, Authority: "shop.example.com", Method: "GET"}, time.Unix(1767225600, 0))
		var addrs []string
		for i := range d.Len() {
			addrs = append(addrs, cfg.Services[d.At(i)].Address)
		}
		return [2]string{"x-envoy-original-dst-host", strings.Join(addrs, ",")}
	}
}

// peerNoopModule builds e2e/testdata/noop (the SDK's default contexts, no host
// call) for wasip1 into dir and returns its path.
func peerNoopModule(b testing.TB, dir string) string {
	b.Helper()
	root, err := envoyrun.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(dir, "noop.wasm")
	cmd := exec.Command("go", "build", "-trimpath", "-buildmode=c-shared", "-o", out, "./e2e/testdata/noop")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building e2e/testdata/noop: %v\n%s", err, o)
	}
	return out
}
