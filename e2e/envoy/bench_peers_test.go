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
	"github.com/hashlb/hashlb/internal/lbpolicy"
	"github.com/hashlb/hashlb/internal/loadgen"
	"github.com/hashlb/hashlb/lbcore"
)

// The peers of BenchmarkEnvoyPeers (bench_test.go): one Envoy bootstrap
// each, every one the same listener, route and cluster settings as
// envoy.yaml (HTTP connection manager, the route's retry policy, a STATIC
// cluster with its outlier detection; circuit breakers raised, see below),
// differing only in what picks the
// upstream: Envoy's own load balancer, or hashlb before the router with
// override_host obeying it, or hashlb as the load-balancing policy; and
// BenchmarkEnvoyLBPolicy, the policy's rows beside those peers.

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

// The policy's rows (BenchmarkEnvoyLBPolicy); the table's rows in the
// order of its peers.
const (
	pPolicy  = "lbpolicy"
	pPolicyN = "lbpolicy-10k"
	pRingN   = "ring_hash-10k"
)

// peerPolicyConfig is the policy's configuration: the Wasm rows' method.
var peerPolicyConfig = []byte(`{"lbMethod": "URLHASH"}`)

// BenchmarkEnvoyLBPolicy is BenchmarkEnvoyPeers's measurement for hashlb as
// Envoy's load-balancing policy (cmd/hashlb-lbpolicy): in each Envoy that
// loads it and the other benchmarks measure (policyBenchBinaries), one
// run, interleaved rounds, the same load generator and backends, at 10 and
// at 10⁴ hosts: the policy beside
// Envoy's ring_hash and maglev (hash_policy on :path) and the Wasm filter
// (URLHASH + override_host). ./build.sh bench runs it with the other
// BenchmarkEnvoy*:
//
//	go test ./e2e/envoy -run '^$' -bench 'BenchmarkEnvoyLBPolicy' -benchtime 1x -peers.versions 1.40.0 -peers.out dist/envoy-peers.md
//
// writes its table to dist/envoy-peers-lbpolicy.md.
//
// It reports; it asserts only that every request was answered 2xx and that
// the hashlb rows went where lbcore says.
func BenchmarkEnvoyLBPolicy(b *testing.B) {
	bins := policyBenchBinaries(b)
	anyB := envoyrun.StartFastBackendAny(b, 0)
	ten := peerEndpoints(10, anyB.Port())
	many := peerEndpoints(peerManyServices, anyB.Port())
	peers := []peerSpec{
		{key: pLimit, name: "limit: round_robin, 10 endpoints", kind: peerRoundRobin, endpoints: ten},
		{key: pRing, name: "ring_hash on :path, 10 endpoints", kind: peerRingHash, endpoints: ten},
		{key: pMaglev, name: "maglev on :path, 10 endpoints", kind: peerMaglev, endpoints: ten},
		{key: pHashlb, name: "hashlb Wasm URLHASH + override_host, 10 services", kind: peerHashlb, endpoints: ten, plugin: peerPlugin(ten, false)},
		{key: pPolicy, name: "hashlb policy URLHASH, 10 hosts", kind: peerPolicy, endpoints: ten, plugin: peerPolicyConfig},
		{key: pRingN, name: "ring_hash on :path, 10⁴ endpoints", kind: peerRingHash, endpoints: many},
		{key: pMaglevN, name: "maglev on :path, 10⁴ endpoints", kind: peerMaglev, endpoints: many},
		{key: pHashlbN, name: "hashlb Wasm URLHASH, 10⁴ services", kind: peerHashlb, endpoints: many, plugin: peerPlugin(many, false)},
		{key: pPolicyN, name: "hashlb policy URLHASH, 10⁴ hosts", kind: peerPolicy, endpoints: many, plugin: peerPolicyConfig},
	}
	targets := peerTargets(4096)
	reqs := peerRequests(targets, nil)
	head := fmt.Sprintf("%d rounds; per peer and round a %v closed-loop run (%d connections) and a %v open-loop run; Envoy --concurrency %d; %d requests (Zipf s = 1.1 over 10⁵ paths). × ring_hash is against the 10-endpoint ring_hash row; the goal column compares each policy row with ring_hash of its own size.\n\n",
		*peerRounds, *peerDur, *peerConns, *peerDur, *peerWorkers, len(targets))
	file := ""
	if *peerOut != "" {
		// Beside BenchmarkEnvoyPeers's table, which -bench 'BenchmarkEnvoy'
		// (./build.sh bench) writes to -peers.out in the same run.
		file = strings.TrimSuffix(*peerOut, ".md") + "-lbpolicy.md"
	}
	peerTables(b, bins, head, peers, targets, reqs, nil, file)
}

// peerLinkPolicy links the module, built from the tree, into an Envoy's
// work dir, where Envoy looks for it without ENVOY_DYNAMIC_MODULES_SEARCH_PATH.
func peerLinkPolicy(b testing.TB, dir string) { peerLinkPolicyBuild(b, dir, "") }

// peerLinkPolicyBuild links the module built with ldflags (BuildLBPolicy).
func peerLinkPolicyBuild(b testing.TB, dir, ldflags string) {
	b.Helper()
	mod, err := envoyrun.BuildLBPolicy(ldflags)
	if err != nil {
		b.Fatal(err)
	}
	so := "lib" + envoyrun.LBPolicyName + ".so"
	if err := os.Symlink(filepath.Join(mod, so), filepath.Join(dir, so)); err != nil {
		b.Fatal(err)
	}
}

// peerFloorName is testdata/lbfloor's module name (lib<name>.so).
const peerFloorName = "hashlb_lbfloor"

// peerLinkFloor builds testdata/lbfloor (C, no Go) into an Envoy's work
// dir as lib<peerFloorName>.so, with the C compiler the policy's cgo build
// uses.
func peerLinkFloor(b testing.TB, dir string) {
	b.Helper()
	root, err := envoyrun.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	out := filepath.Join(dir, "lib"+peerFloorName+".so")
	cmd := exec.Command(cc, "-O2", "-shared", "-fPIC", "-I", filepath.Join(root, "internal/lbpolicy/abi"),
		"-Wl,--unresolved-symbols=ignore-all", "-o", out, filepath.Join(root, "e2e/envoy/testdata/lbfloor/lbfloor.c"))
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building e2e/envoy/testdata/lbfloor: %v\n%s", err, o)
	}
}

// peerPolicyWant is where a target must go under the policy row p: lbcore's
// choice over its endpoints as services (no metadata: each named and
// identified by its address).
func peerPolicyWant(b testing.TB, p peerSpec) func(target string) string {
	pol, err := lbpolicy.ParseConfig(p.plugin)
	if err != nil {
		b.Fatal(err)
	}
	svcs := make([]lbcore.Service, len(p.endpoints))
	for i, a := range p.endpoints {
		svcs[i] = lbcore.Service{Name: a, Address: a, Enabled: true}
	}
	cfg, err := pol.Config.WithServices(svcs)
	if err != nil {
		b.Fatal(err)
	}
	bal := lbcore.NewBalancer(cfg, 0)
	return func(t string) string {
		d := bal.Decide(&lbcore.Request{Target: t, Authority: "shop.example.com", Method: "GET"}, time.Now())
		return cfg.Services[d.At(0)].Address
	}
}

// peerPolicyGoal: req/s at least ring_hash's and p99 at most 1.05× its, at
// the same number of hosts.
func peerPolicyGoal(r *peerRun, by map[string]*peerRun) (goal, verdict string) {
	ring := by[pRing]
	if r.key == pPolicyN {
		ring = by[pRingN]
	}
	rps, _, _ := peerRatios(r.rps, ring.rps)
	p99, _, _ := peerRatios(r.p99, ring.p99)
	v := "pass"
	if rps < 1.0 || p99 > 1.05 {
		v = "**fail**"
	}
	return fmt.Sprintf("req/s ≥ 1.0×, p99 ≤ 1.05× %s (%.3f, %.3f)", ring.name, rps, p99), v
}
