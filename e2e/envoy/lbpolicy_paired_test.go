package envoy

// BenchmarkEnvoyLBPolicyPaired measures the policy against Envoy's own
// consistent hashing side by side: the Envoys of one size (ring_hash,
// maglev, the Wasm filter, the policy) all loaded at the same time, each by
// its own closed loop (then each by its own open loop at one rate), round
// after round. Run one after the other, as BenchmarkEnvoyLBPolicy runs
// them, two rows are seconds apart and this machine's speed moves by a
// tenth or more between seconds (the same Envoy measured twice in a row
// differs that much), which hides a difference of a few per cent. Run at
// the same time, every Envoy meets the same machine: the kernel shares the
// cores between their workers, and what one Envoy does with its share (the
// requests it answers per second, the CPU each request costs it) is what
// the rows compare. ./build.sh bench runs it with the other BenchmarkEnvoy*:
//
//	go test ./e2e/envoy -run '^$' -bench 'BenchmarkEnvoyLBPolicyPaired' -benchtime 1x -peers.versions 1.40.0 -peers.out dist/envoy-peers.md
//
// writes its tables to dist/envoy-peers-paired.md.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/loadgen"
)

// The keys of the floor rows: testdata/lbfloor's, and the policy built to
// choose as it does.
const (
	pFloor   = "floor"
	pGoFloor = "go-floor"
)

var pairedRounds = flag.Int("paired.rounds", 10, "BenchmarkEnvoyLBPolicyPaired: rounds; each figure is the median over them")

func BenchmarkEnvoyLBPolicyPaired(b *testing.B) {
	bins := policyBenchBinaries(b)
	anyB := envoyrun.StartFastBackendAny(b, 0)
	ten := peerEndpoints(10, anyB.Port())
	many := peerEndpoints(peerManyServices, anyB.Port())
	groups := [][]peerSpec{{
		{key: pRing, name: "ring_hash on :path, 10 endpoints", kind: peerRingHash, endpoints: ten},
		{key: pMaglev, name: "maglev on :path, 10 endpoints", kind: peerMaglev, endpoints: ten},
		{key: pHashlb, name: "hashlb Wasm URLHASH + override_host, 10 services", kind: peerHashlb, endpoints: ten, plugin: peerPlugin(ten, false)},
		{key: pFloor, name: "a dynamic module's floor (C: :path, FNV-1a, modulo), 10 hosts", kind: peerPolicyFloor, endpoints: ten},
		{key: pGoFloor, name: "the same floor in Go (the policy's module, runtime and callbacks; no lbcore), 10 hosts", kind: peerPolicyGoFloor, endpoints: ten, plugin: peerPolicyConfig},
		{key: pPolicy, name: "hashlb policy URLHASH, 10 hosts", kind: peerPolicy, endpoints: ten, plugin: peerPolicyConfig},
	}, {
		{key: pRing, name: "ring_hash on :path, 10⁴ endpoints", kind: peerRingHash, endpoints: many},
		{key: pMaglev, name: "maglev on :path, 10⁴ endpoints", kind: peerMaglev, endpoints: many},
		{key: pHashlb, name: "hashlb Wasm URLHASH + override_host, 10⁴ services", kind: peerHashlb, endpoints: many, plugin: peerPlugin(many, false)},
		{key: pFloor, name: "a dynamic module's floor (C: :path, FNV-1a, modulo), 10⁴ hosts", kind: peerPolicyFloor, endpoints: many},
		{key: pGoFloor, name: "the same floor in Go (the policy's module, runtime and callbacks; no lbcore), 10⁴ hosts", kind: peerPolicyGoFloor, endpoints: many, plugin: peerPolicyConfig},
		{key: pPolicy, name: "hashlb policy URLHASH, 10⁴ hosts", kind: peerPolicy, endpoints: many, plugin: peerPolicyConfig},
	}}
	targets := peerTargets(4096)
	reqs := peerRequests(targets, nil)
	var out strings.Builder
	fmt.Fprintf(&out, "%d rounds; in each, every Envoy of the table at once: a %v closed-loop run (%d connections each), then a %v open-loop run (each at the rate given); Envoy --concurrency %d; %d requests (Zipf s = 1.1 over 10⁵ paths).\n\n",
		*pairedRounds, *peerDur, *peerConns, *peerDur, *peerWorkers, len(targets))
	b.ResetTimer()
	for _, bin := range bins {
		for _, g := range groups {
			out.WriteString(pairedGroup(b, bin, g, targets, reqs))
		}
	}
	b.StopTimer()
	fmt.Printf("\n%s", out.String())
	if *peerOut != "" {
		file := strings.TrimSuffix(*peerOut, ".md") + "-paired.md"
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// policyBenchBinaries are the Envoys that load the policy, narrowed to
// -peers.versions when given.
func policyBenchBinaries(b *testing.B) []envoyrun.Binary {
	var bins []envoyrun.Binary
	for _, bin := range envoyrun.LBPolicyBinaries(b) {
		if *peerVersions == "" || strings.Contains(","+*peerVersions+",", ","+bin.Version+",") {
			bins = append(bins, bin)
		}
	}
	if len(bins) == 0 {
		b.Fatalf("-peers.versions %s: none of these Envoys loads the policy", *peerVersions)
	}
	return bins
}

// pairedGroup measures one table's Envoys side by side; the first is the
// reference (ring_hash).
func pairedGroup(b *testing.B, bin envoyrun.Binary, peers []peerSpec, targets []string, reqs [][]byte) string {
	start := time.Now()
	stage := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "bench: envoy %s, %s: %s (%s so far)\n", bin.Version, peers[0].name, fmt.Sprintf(format, a...), time.Since(start).Round(time.Second))
	}
	runs := make([]*peerRun, len(peers))
	for i, p := range peers {
		dir := envoyrun.WorkDir(b)
		switch p.kind {
		case peerPolicy:
			peerLinkPolicy(b, dir)
		case peerPolicyFloor:
			peerLinkFloor(b, dir)
		case peerPolicyGoFloor:
			peerLinkPolicyBuild(b, dir, "-X main.testPanic=floor")
		}
		e := envoyrun.Start(b, bin, envoyrun.Options{Bootstrap: p.bootstrap(), Dir: dir, Concurrency: *peerWorkers, LogLevel: "warning"})
		runs[i] = &peerRun{peerSpec: p, e: e, addr: e.MustListener(b, "bench"), req: reqs}
		peerCheck(b, runs[i], targets)
	}
	defer func() {
		for _, r := range runs {
			r.e.Stop()
		}
	}()
	stage("warm-up")
	warm := pairedClosed(b, runs, peerWarmUp)
	rate := *peerRate * warm[0].RPS()
	for _, r := range runs {
		r.rss = peerRSS(r.e.Pid())
	}
	goCPU := make([]time.Duration, len(runs)) // the threads other than the workers, over the closed-loop runs
	for round := range *pairedRounds {
		stage("round %d/%d", round+1, *pairedRounds)
		th0 := make([]map[int]envoyrun.Thread, len(runs))
		cpu0 := make([]time.Duration, len(runs))
		for i, r := range runs {
			th0[i] = envoyThreads(b, r.e)
			cpu0[i] = sumCPU(th0[i])
		}
		res := pairedClosed(b, runs, *peerDur)
		for i, r := range runs {
			th1 := envoyThreads(b, r.e)
			r.rps = append(r.rps, res[i].RPS())
			r.cpuUs = append(r.cpuUs, peerUs(sumCPU(th1)-cpu0[i])/float64(res[i].Requests))
			w := envoyWorkers(th1)
			for id, th := range th1 {
				if !w[id] {
					goCPU[i] += th.CPU - th0[i][id].CPU
				}
			}
		}
		for i, o := range pairedOpen(b, runs, rate, *peerDur) {
			r := runs[i]
			r.missed += o.Missed
			r.due += o.Requests + o.Errors + o.Missed
			r.p50 = append(r.p50, peerUs(o.Quantile(0.50)))
			r.p99 = append(r.p99, peerUs(o.Quantile(0.99)))
		}
	}
	return pairedTable(bin, runs, rate, goCPU)
}

// sumCPU is the CPU time of every thread of ths.
func sumCPU(ths map[int]envoyrun.Thread) time.Duration {
	var s time.Duration
	for _, th := range ths {
		s += th.CPU
	}
	return s
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

// pairedTable is one group's Markdown table; runs[0] is the reference.
func pairedTable(bin envoyrun.Binary, runs []*peerRun, rate float64, goCPU []time.Duration) string {
	var sb strings.Builder
	ref := runs[0]
	fmt.Fprintf(&sb, "#### Envoy %s, side by side with %s\n\nreq/s, CPU: the closed-loop runs, every Envoy loaded at once. p50/p99: the open-loop runs, every Envoy at %.0f req/s at once (%.0f %% of %s's req/s in the warm-up). × %s: the ratio in each round, median (min–max). Other threads: the CPU of the Envoy's threads other than its workers (for the policy: the Go runtime's), share of its CPU.\n\n",
		bin.Version, ref.name, rate, *peerRate*100, ref.key, ref.key)
	sb.WriteString("| peer | req/s | × " + ref.key + " | Envoy CPU µs/req | CPU × " + ref.key + " | other threads | p50 µs | p99 µs | p99 × " + ref.key + " | RSS MB | goal | verdict |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	rr := func(a, b []float64) string {
		m, lo, hi := peerRatios(a, b)
		return fmt.Sprintf("%.3f (%.2f–%.2f)", m, lo, hi)
	}
	for i, r := range runs {
		goal, verdict := "", ""
		if r.kind == peerPolicy {
			rps, _, _ := peerRatios(r.rps, ref.rps)
			p99, _, _ := peerRatios(r.p99, ref.p99)
			goal, verdict = fmt.Sprintf("req/s ≥ 1.0×, p99 ≤ 1.05× %s (%.3f, %.3f)", ref.key, rps, p99), "pass"
			if rps < 1.0 || p99 > 1.05 {
				verdict = "**fail**"
			}
		}
		var cpuAll float64
		for k := range r.cpuUs {
			cpuAll += r.cpuUs[k] * r.rps[k]
		}
		other := 100 * float64(goCPU[i].Microseconds()) / (cpuAll * peerDur.Seconds())
		missed := ""
		if float64(r.missed) > 0.01*float64(r.due) {
			missed = fmt.Sprintf(" (**saturated**: %.0f %% not sent in time)", 100*float64(r.missed)/float64(r.due))
		}
		fmt.Fprintf(&sb, "| %s | %.0f | %s | %.1f | %s | %.1f %% | %.0f | %.0f%s | %s | %.0f | %s | %s |\n",
			r.name, peerMedian(r.rps), rr(r.rps, ref.rps), peerMedian(r.cpuUs), rr(r.cpuUs, ref.cpuUs), other,
			peerMedian(r.p50), peerMedian(r.p99), missed, rr(r.p99, ref.p99), r.rss, goal, verdict)
	}
	sb.WriteString("\n")
	return sb.String()
}
