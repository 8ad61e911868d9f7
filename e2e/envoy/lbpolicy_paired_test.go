package envoy

// BenchmarkEnvoyLBPolicyPaired measures the policy against Envoy's own
// consistent hashing side by side: each row's Envoy (a second ring_hash,
// whose ratios are the benchmark's own error, maglev, the Wasm filter, a C
// dynamic module's floor, the same floor in Go, the policy, and at 10
// hosts the policy with persistence.fleet) loaded at the
// same time as an Envoy of its own running ring_hash, each by its own
// closed loop (then each by its own open loop at one rate), round after
// round. Run one after the other, as BenchmarkEnvoyLBPolicy runs them, two
// rows are seconds apart and this machine's speed moves by a tenth or more
// between seconds (the same Envoy measured twice in a row differs that
// much), which hides a difference of a few per cent. Run at the same time,
// both Envoys meet the same machine: the kernel shares the cores between
// their workers, and what one Envoy does with its share (the requests it
// answers per second, the CPU each request costs it) is what the ratios
// compare. ./build.sh bench runs it with the other BenchmarkEnvoy*:
//
//	go test ./e2e/envoy -run '^$' -bench 'BenchmarkEnvoyLBPolicyPaired' -benchtime 1x -peers.versions 1.40.0 -peers.out dist/envoy-peers.md
//
// writes its tables to dist/envoy-peers-paired.md.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/fleettest"
	"github.com/hashlb/hashlb/internal/loadgen"
)

// The keys of the floor rows: testdata/lbfloor's, and the policy built to
// choose as it does.
const (
	pFloor   = "floor"
	pGoFloor = "go-floor"
	pNoYield = "policy-no-yield"
	pAgain   = "ring_hash-again"
	pFleet   = "policy+fleet"
)

// pairedFleetPeer is the policy with persistence.fleet on the requests'
// x-client-id, over the etcd member at ep: as the Wasm filter's
// persistence row, few ids, so that after the first request of each every
// lookup is a hit in the local table and each etcd record is written
// once; the row is what the fleet costs a request once its key is placed
// (the watch, the table, the client's goroutines beside the workers).
func pairedFleetPeer(eps []string, ep string) peerSpec {
	config := fmt.Sprintf(`{"lbMethod": "URLHASH", "persistence": {"keys": ["${request.header.x-client-id}"], "fleet": {"endpoints": [%q]}}}`, ep)
	return peerSpec{key: pFleet, name: "hashlb policy URLHASH + persistence.fleet (x-client-id, hits), 10 hosts", kind: peerPolicy,
		endpoints: eps, plugin: []byte(config)}
}

// pairedWarmUp is each pair's warm-up: every upstream connection opened,
// V8's tiers settled, and the policy's choice cache holding the requests'
// paths, as it does in a steady state.
const pairedWarmUp = 3 * time.Second

var (
	pairedRounds = flag.Int("paired.rounds", 10, "BenchmarkEnvoyLBPolicyPaired: rounds; each figure is the median over them")
	pairedRows   = flag.String("paired.rows", "", "BenchmarkEnvoyLBPolicyPaired: the rows to measure, by key, comma-separated (ring_hash always); empty: all")
	pairedHosts  = flag.String("paired.hosts", "10,10000", "BenchmarkEnvoyLBPolicyPaired: the tables to make, by their host count")
)

// pairedSelect is peers (a table of size hosts) less what -paired.rows and
// -paired.hosts leave out; nil when the table is left out.
func pairedSelect(peers []peerSpec, hosts int) []peerSpec {
	if !slices.Contains(strings.Split(*pairedHosts, ","), fmt.Sprint(hosts)) {
		return nil
	}
	if *pairedRows == "" {
		return peers
	}
	keep := strings.Split(*pairedRows, ",")
	return slices.DeleteFunc(slices.Clone(peers), func(p peerSpec) bool {
		return p.key != pRing && !slices.Contains(keep, p.key)
	})
}

// pairedPeers are the benchmark's rows over eps, n their number as the
// rows' names say it ("10", "10⁴").
func pairedPeers(eps []string, n string) []peerSpec {
	return []peerSpec{
		{key: pRing, name: "ring_hash on :path, " + n + " endpoints", kind: peerRingHash, endpoints: eps},
		{key: pAgain, name: "ring_hash again (another Envoy: the benchmark's own error), " + n + " endpoints", kind: peerRingHash, endpoints: eps},
		{key: pMaglev, name: "maglev on :path, " + n + " endpoints", kind: peerMaglev, endpoints: eps},
		{key: pHashlb, name: "hashlb Wasm URLHASH + override_host, " + n + " services", kind: peerHashlb, endpoints: eps, plugin: peerPlugin(eps, false)},
		{key: pFloor, name: "a dynamic module's floor (C: :path, FNV-1a, modulo), " + n + " hosts", kind: peerPolicyFloor, endpoints: eps},
		{key: pGoFloor, name: "the same floor in Go (the policy's module, runtime and callbacks; no lbcore), " + n + " hosts", kind: peerPolicyGoFloor, endpoints: eps, plugin: peerPolicyConfig},
		{key: pNoYield, name: "the policy without its workers' yields (goruntime.go), " + n + " hosts", kind: peerPolicyNoYield, endpoints: eps, plugin: peerPolicyConfig},
		{key: pPolicy, name: "hashlb policy URLHASH, " + n + " hosts", kind: peerPolicy, endpoints: eps, plugin: peerPolicyConfig},
	}
}

func BenchmarkEnvoyLBPolicyPaired(b *testing.B) {
	bins := policyBenchBinaries(b)
	anyB := envoyrun.StartFastBackendAny(b, 0)
	ten := peerEndpoints(10, anyB.Port())
	many := peerEndpoints(peerManyServices, anyB.Port())
	etcd := fleettest.StartCluster(b, 1)
	groups := [][]peerSpec{append(pairedPeers(ten, "10"), pairedFleetPeer(ten, etcd.Endpoints()[0])), pairedPeers(many, "10⁴")}
	groups[0], groups[1] = pairedSelect(groups[0], len(ten)), pairedSelect(groups[1], len(many))
	targets := peerTargets(4096)
	reqs := peerRequests(targets, nil)
	var out strings.Builder
	fmt.Fprintf(&out, "%d rounds per pair; in each, a row's Envoy together with its own ring_hash Envoy: a %v closed-loop run (%d connections each), then a %v open-loop run (each at the pair's rate); a %v warm-up per pair; Envoy --concurrency %d; %d requests (Zipf s = 1.1 over 10⁵ paths).\n\n",
		*pairedRounds, *peerDur, *peerConns, *peerDur, pairedWarmUp, *peerWorkers, len(targets))
	fmt.Printf("\n%s", out.String())
	b.ResetTimer()
	for _, bin := range bins {
		for _, g := range groups {
			if len(g) < 2 {
				continue
			}
			// Each table as soon as it is made: a later group's failure
			// (a request lost) does not lose it.
			t := pairedGroup(b, bin, g, targets, reqs)
			fmt.Printf("\n%s", t)
			out.WriteString(t)
		}
	}
	b.StopTimer()
	if *peerOut != "" {
		file := strings.TrimSuffix(*peerOut, ".md") + "-paired.md"
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// policyBenchBinaries are the Envoys that load the policy, narrowed to
// -peers.versions when given; by default those the other benchmarks
// measure too (1.40.0), not the ones installed for the policy's tests alone
// (1.38.3, 1.39.3), which -peers.versions can name.
func policyBenchBinaries(b *testing.B) []envoyrun.Binary {
	var bins []envoyrun.Binary
	measured := map[string]bool{}
	for _, bin := range envoyrun.Binaries(b) {
		measured[bin.Version] = true
	}
	for _, bin := range envoyrun.LBPolicyBinaries(b) {
		if *peerVersions == "" && measured[bin.Version] || strings.Contains(","+*peerVersions+",", ","+bin.Version+",") {
			bins = append(bins, bin)
		}
	}
	if len(bins) == 0 {
		b.Fatalf("-peers.versions %s: none of these Envoys loads the policy", *peerVersions)
	}
	return bins
}

// pairedGroup measures one table's Envoys, each in a pair with an Envoy of
// its own running the first (the reference, ring_hash): the two loaded at
// once, so that each gets about half of the machine, as an Envoy with the
// machine to itself would all of it. (Loading every Envoy of the table at
// once gave each a sixth of the cores and the Go runtime's own steady cost
// a sixfold weight per request.) The pairs come one after the other, each
// its warm-up and all its rounds, and only its two Envoys are running: a
// reference shared by every pair, loaded while each row's Envoy waited its
// turn, was favoured by as much as the policy's cost (the row
// ring_hash-again showed it; docs/performance.md has the figures).
func pairedGroup(b *testing.B, bin envoyrun.Binary, peers []peerSpec, targets []string, reqs [][]byte) string {
	start := time.Now()
	runs := make([]*peerRun, len(peers))
	pairs := make([]pairedRow, len(peers))
	var notes strings.Builder // below the table
	for i := 1; i < len(peers); i++ {
		p := peers[i]
		stage := func(format string, a ...any) {
			fmt.Fprintf(os.Stderr, "bench: envoy %s, %s: %s (%s so far)\n", bin.Version, p.name, fmt.Sprintf(format, a...), time.Since(start).Round(time.Second))
		}
		ref := pairedStart(b, bin, peers[0], targets, reqs)
		r := pairedStart(b, bin, p, targets, reqs)
		runs[i] = r
		if i == 1 {
			runs[0] = ref
		}
		stage("warm-up")
		// The open loop's rate: -peers.rate of the reference's req/s in
		// the warm-up, which both then sustain.
		warm := pairedClosed(b, []*peerRun{ref, r}, pairedWarmUp)
		pr := &pairs[i]
		pr.rate = *peerRate * warm[0].RPS()
		ref.rss, r.rss = peerRSS(ref.e.Pid()), peerRSS(r.e.Pid())
		for round := range *pairedRounds {
			stage("round %d/%d", round+1, *pairedRounds)
			// Which of the two has its threads read and its load started
			// first alternates round by round: neither side has it always.
			two, self := []*peerRun{ref, r}, 1
			if round%2 == 1 {
				two, self = []*peerRun{r, ref}, 0
			}
			cpu, other, res := pairedMeasure(b, two)
			pr.self.add(res[self], cpu[self], other[self])
			pr.ref.add(res[1-self], cpu[1-self], other[1-self])
			for k, o := range pairedOpen(b, two, pr.rate, *peerDur) {
				two[k].missed += o.Missed
				two[k].due += o.Requests + o.Errors + o.Missed
				f := &pr.ref
				if k == self {
					f = &pr.self
				}
				f.p50 = append(f.p50, peerUs(o.Quantile(0.50)))
				f.p99 = append(f.p99, peerUs(o.Quantile(0.99)))
			}
		}
		if r.kind == peerPolicy {
			// The cache's hits reach the counter from C every 256 and when
			// a worker next enters Go: the figure is a little low.
			cached, total := r.e.Stat(b, "dynamicmodulescustom.cached"), r.e.Stat(b, "http.bench.downstream_rq_total")
			fmt.Fprintf(&notes, "%s: %d of %d requests (%.1f %%) answered from the choice cache without entering Go.\n\n", r.name, cached, total, 100*float64(cached)/float64(max(total, 1)))
		}
		ref.e.Stop()
		r.e.Stop()
	}
	return pairedTable(bin, runs, pairs) + notes.String()
}

// pairedStart starts p's Envoy in a work directory of its own and checks
// that it routes as p should.
func pairedStart(b *testing.B, bin envoyrun.Binary, p peerSpec, targets []string, reqs [][]byte) *peerRun {
	dir := envoyrun.WorkDir(b)
	switch p.kind {
	case peerPolicy:
		peerLinkPolicy(b, dir)
	case peerPolicyFloor:
		peerLinkFloor(b, dir)
	case peerPolicyGoFloor:
		peerLinkPolicyBuild(b, dir, "-X "+envoyrun.LBPolicyTestPanic+"=floor")
	case peerPolicyNoYield:
		peerLinkPolicyBuild(b, dir, "-X "+envoyrun.LBPolicyTestYield+"=off")
	}
	e := envoyrun.Start(b, bin, envoyrun.Options{Bootstrap: p.bootstrap(b), Dir: dir, Concurrency: *peerWorkers, LogLevel: "warning"})
	r := &peerRun{peerSpec: p, e: e, addr: e.MustListener(b, "bench"), req: reqs}
	peerCheck(b, r, targets)
	return r
}

// pairedVerdict judges the policy's row f against the reference's figures
// in the same rounds: pass when both medians meet the goal (req/s ≥ 1.0×,
// p99 ≤ 1.05×), fail when a figure's whole 95 % confidence interval misses
// it, and otherwise says the run cannot tell.
func pairedVerdict(f, against pairedFigures) string {
	rps, _, _ := peerRatios(f.rps, against.rps)
	p99, _, _ := peerRatios(f.p99, against.p99)
	if rps >= 1.0 && p99 <= 1.05 {
		return "pass"
	}
	_, rpsHi, ok1 := peerRatioCI(f.rps, against.rps)
	p99Lo, _, ok2 := peerRatioCI(f.p99, against.p99)
	if (ok1 && rpsHi < 1.0) || (ok2 && p99Lo > 1.05) || !ok1 || !ok2 {
		return "**fail**"
	}
	return "**not shown** (a median misses; the interval holds the goal)"
}

// pairedFigures are one Envoy's figures over the rounds of its pair.
type pairedFigures struct {
	rps, cpuUs, p50, p99 []float64
	cpu, other           time.Duration
}

func (f *pairedFigures) add(res loadgen.Result, cpu, other time.Duration) {
	f.rps = append(f.rps, res.RPS())
	f.cpuUs = append(f.cpuUs, peerUs(cpu)/float64(res.Requests))
	f.cpu += cpu
	f.other += other
}

// pairedRow is a row and the reference in its pair, and the pair's
// open-loop rate.
type pairedRow struct {
	self, ref pairedFigures
	rate      float64
}

// medians are the row's req/s, CPU per request and p99 over its
// reference's: the medians of the rounds' ratios.
func (p pairedRow) medians() [3]float64 {
	var m [3]float64
	for k, f := range [][2][]float64{{p.self.rps, p.ref.rps}, {p.self.cpuUs, p.ref.cpuUs}, {p.self.p99, p.ref.p99}} {
		m[k], _, _ = peerRatios(f[0], f[1])
	}
	return m
}

// pairedMeasure runs a closed loop on both Envoys of a pair at once for
// -peers.duration and returns each one's CPU, the CPU of its threads other
// than the workers, and the load's result.
func pairedMeasure(b *testing.B, two []*peerRun) (cpu, other [2]time.Duration, res []loadgen.Result) {
	var th0 [2]map[int]envoyrun.Thread
	for i, r := range two {
		th0[i] = envoyThreads(b, r.e)
	}
	res = pairedClosed(b, two, *peerDur)
	for i, r := range two {
		th1 := envoyThreads(b, r.e)
		w := envoyWorkers(th1)
		for id, th := range th1 {
			d := th.CPU - th0[i][id].CPU
			cpu[i] += d
			if !w[id] {
				other[i] += d
			}
		}
	}
	return cpu, other, res
}

// pairedClosed runs a closed loop on every Envoy at once for d.
func pairedClosed(b *testing.B, runs []*peerRun, d time.Duration) []loadgen.Result {
	res := make([]loadgen.Result, len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Go(func() { res[i] = loadgen.Closed(context.Background(), r.addr, r.req, *peerConns, d) })
	}
	wg.Wait()
	for i, r := range runs {
		peerAnswered(b, r, res[i])
	}
	return res
}

// pairedOpen runs an open loop at rate on every Envoy at once for d.
func pairedOpen(b *testing.B, runs []*peerRun, rate float64, d time.Duration) []loadgen.Result {
	res := make([]loadgen.Result, len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Go(func() { res[i] = loadgen.Open(context.Background(), r.addr, r.req, rate, *peerConns, d) })
	}
	wg.Wait()
	for i, r := range runs {
		if res[i].Errors > 0 {
			b.Fatalf("%s: %d of %d open-loop requests failed: %v", r.name, res[i].Errors, res[i].Requests+res[i].Errors, res[i].FirstErr)
		}
	}
	return res
}

// pairedTable is one group's Markdown table; runs[0] is the reference,
// pairs[i] row i's pair.
func pairedTable(bin envoyrun.Binary, runs []*peerRun, pairs []pairedRow) string {
	var sb strings.Builder
	ref := runs[0]
	fmt.Fprintf(&sb, "#### Envoy %s, each row in a pair with an Envoy of its own running %s\n\nEach row's Envoy and its %s Envoy loaded at the same time, round after round, one pair after the other: req/s and CPU in a closed loop, p50/p99 in an open loop, both Envoys at the pair's open-loop rate (%.0f %% of its %s's req/s in the pair's warm-up). × %s: the row's figure ÷ its %s's in the same round, median [its 95 %% confidence interval; the range below 6 rounds]; %s's own figures are those of the first pair's. Other threads: the CPU of the Envoy's threads other than its workers (for the policy: the Go runtime's), share of its CPU.\n\n",
		bin.Version, ref.name, ref.key, *peerRate*100, ref.key, ref.key, ref.key, ref.key)
	sb.WriteString("| peer | req/s | × " + ref.key + " | Envoy CPU µs/req | CPU × " + ref.key + " | other threads | open loop req/s | p50 µs | p99 µs | p99 × " + ref.key + " | RSS MB | goal | verdict |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	rr := func(a, b []float64) string {
		m, lo, hi := peerRatios(a, b)
		if clo, chi, ok := peerRatioCI(a, b); ok {
			lo, hi = clo, chi
		}
		return fmt.Sprintf("%.3f [%.2f–%.2f]", m, lo, hi)
	}
	for i, r := range runs {
		f, against, rate := pairs[i].self, pairs[i].ref, pairs[i].rate
		if i == 0 {
			f, against, rate = pairs[1].ref, pairs[1].ref, pairs[1].rate
		}
		goal, verdict := "", ""
		if r.key == pPolicy { // the fleet's row reports its cost; the goal is the policy's
			goal = fmt.Sprintf("req/s ≥ 1.0×, p99 ≤ 1.05× %s", ref.key)
			verdict = pairedVerdict(f, against)
		}
		missed := ""
		if float64(r.missed) > 0.01*float64(r.due) {
			missed = fmt.Sprintf(" (**saturated**: %.0f %% not sent in time)", 100*float64(r.missed)/float64(r.due))
		}
		fmt.Fprintf(&sb, "| %s | %.0f | %s | %.1f | %s | %.1f %% | %.0f | %.0f | %.0f%s | %s | %.0f | %s | %s |\n",
			r.name, peerMedian(f.rps), rr(f.rps, against.rps), peerMedian(f.cpuUs), rr(f.cpuUs, against.cpuUs),
			100*float64(f.other)/float64(f.cpu), rate, peerMedian(f.p50), peerMedian(f.p99), missed, rr(f.p99, against.p99), r.rss, goal, verdict)
	}
	sb.WriteString("\n")
	// Each row's medians over the control's: what is left of a ratio once
	// the benchmark's own error in this run is taken out.
	if a := slices.IndexFunc(runs, func(r *peerRun) bool { return r.key == pAgain }); a > 0 {
		ctl := pairs[a].medians()
		for i := 1; i < len(runs); i++ {
			if i == a {
				continue
			}
			m := pairs[i].medians()
			fmt.Fprintf(&sb, "%s ÷ %s: req/s %.3f, CPU %.3f, p99 %.3f.\n", runs[i].name, pAgain, m[0]/ctl[0], m[1]/ctl[1], m[2]/ctl[2])
		}
		sb.WriteString("\n")
	}
	return sb.String()
}
