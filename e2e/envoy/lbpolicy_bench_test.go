package envoy

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

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/lbpolicy"
	"github.com/hashlb/hashlb/lbcore"
)

// The policy's rows (BenchmarkEnvoyLBPolicy); the table's rows in the
// order of its peers.
const (
	pPolicy  = "lbpolicy"
	pPolicyN = "lbpolicy-10k"
	pRingN   = "ring_hash-10k"
)

// peerPolicyConfig is the policy's configuration: the Wasm rows' method.
var peerPolicyConfig = []byte(`{"lbMethod": "URLHASH"}`)

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
