package envoy

// BenchmarkEnvoyPeers is the benchmark against the peers a user would
// pick instead of hashlb, in real Envoy: every peer a separate Envoy of the
// same binary, all running side by side, measured in interleaved rounds by
// the same load generator (internal/loadgen) against the same backends
// (envoyrun.FastBackend), on loopback. ./build.sh bench runs it:
//
//	go test ./e2e/envoy -run '^$' -bench 'BenchmarkEnvoy' -benchtime 1x -peers.out dist/envoy-peers.md
//
// It reports; it asserts only that every request was answered 2xx and that
// hashlb's rows went where lbcore says.

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/loadgen"
	"github.com/hashlb/hashlb/lbcore"
)

var (
	peerRounds   = flag.Int("peers.rounds", 3, "BenchmarkEnvoyPeers: interleaved rounds; each figure is the median over them")
	peerDur      = flag.Duration("peers.duration", 1500*time.Millisecond, "BenchmarkEnvoyPeers: length of each closed-loop and each open-loop run, per peer per round")
	peerConns    = flag.Int("peers.conns", 16, "BenchmarkEnvoyPeers: connections of the closed-loop runs (and at most as many in the open-loop ones)")
	peerRate     = flag.Float64("peers.rate", 0.3, "BenchmarkEnvoyPeers: the open-loop rate, as a fraction of the limit's req/s in the warm-up")
	peerWorkers  = flag.Int("peers.concurrency", 2, "BenchmarkEnvoyPeers: Envoy's --concurrency (worker threads)")
	peerVersions = flag.String("peers.versions", "", "BenchmarkEnvoyPeers: comma-separated Envoy versions to measure (default: every one found)")
	peerProfile  = flag.Bool("peers.profile", true, "BenchmarkEnvoyPeers: after the rounds, sample each peer's Envoy with perf (cpu-clock) to say where its CPU goes")
	peerOut      = flag.String("peers.out", "", "BenchmarkEnvoyPeers: also write the tables (Markdown) to this file")
)

// peerManyServices is the size of the large pool (hashlb's 10⁴ services, and
// Maglev's 10⁴ endpoints beside it).
const peerManyServices = 10000

// peerRun is one peer's Envoy during the benchmark and what was measured.
type peerRun struct {
	peerSpec
	e    *envoyrun.Envoy
	addr string
	req  [][]byte // the requests it is sent
	rss  float64  // MB after the warm-up
	// per round
	rps, cpuUs, p50, p99 []float64
	errors, missed, due  int64
	upstreamCx           int64              // upstream connections opened during the rounds
	prof                 map[string]float64 // share of samples per category
}

// The peers' keys; the table's rows in this order.
const (
	pLimit     = "limit"
	pNoop      = "noop"
	pOverride  = "override_host"
	pRing      = "ring_hash"
	pMaglev    = "maglev"
	pHashlb    = "hashlb"
	pPersist   = "hashlb+persistence"
	pMaglevN   = "maglev-10k"
	pOverrideN = "override_host-10k"
	pHashlbN   = "hashlb-10k"
	peerWarmUp = time.Second
)

func BenchmarkEnvoyPeers(b *testing.B) {
	bins := envoyrun.Binaries(b)
	if *peerRounds < 1 {
		b.Fatalf("-peers.rounds %d: at least one round", *peerRounds)
	}
	if *peerVersions != "" {
		want := strings.Split(*peerVersions, ",")
		bins = slices.DeleteFunc(bins, func(x envoyrun.Binary) bool { return !slices.Contains(want, x.Version) })
		if len(bins) == 0 {
			b.Fatalf("-peers.versions %s: none of these Envoys was found", *peerVersions)
		}
	}
	bs := []*envoyrun.FastBackend{envoyrun.StartFastBackend(b, "b1"), envoyrun.StartFastBackend(b, "b2"), envoyrun.StartFastBackend(b, "b3")}
	three := []string{bs[0].Addr, bs[1].Addr, bs[2].Addr}
	anyB := envoyrun.StartFastBackendAny(b, 0)
	many := peerEndpoints(peerManyServices, anyB.Port())
	peers := []peerSpec{
		{key: pLimit, name: "limit: round_robin, no Wasm", kind: peerRoundRobin, endpoints: three},
		{key: pNoop, name: "no-op Wasm module + round_robin", kind: peerNoop, endpoints: three},
		{key: pOverride, name: "override_host, header from the client, no Wasm", kind: peerOverride, endpoints: three},
		{key: pRing, name: "ring_hash on :path", kind: peerRingHash, endpoints: three},
		{key: pMaglev, name: "maglev on :path", kind: peerMaglev, endpoints: three},
		{key: pHashlb, name: "hashlb URLHASH + override_host", kind: peerHashlb, endpoints: three, plugin: peerPlugin(three, false)},
		{key: pPersist, name: "hashlb URLHASH + persistence (x-client-id, hits)", kind: peerHashlb, endpoints: three, plugin: peerPlugin(three, true)},
		{key: pMaglevN, name: "maglev on :path, 10⁴ endpoints", kind: peerMaglev, endpoints: many},
		{key: pOverrideN, name: "override_host, header from the client, no Wasm, 10⁴ endpoints", kind: peerOverride, endpoints: many},
		{key: pHashlbN, name: "hashlb URLHASH, 10⁴ services", kind: peerHashlb, endpoints: many, plugin: peerPlugin(many, false)},
	}
	targets := peerTargets(4096)
	reqs := peerRequests(targets, nil)
	// The override_host rows' client sends the header hashlb would write.
	overrideReqs := map[int][][]byte{
		3:                peerRequests(targets, peerRankedHeader(b, peerPlugin(three, false))),
		peerManyServices: peerRequests(targets, peerRankedHeader(b, peerPlugin(many, false))),
	}
	distinct := map[string]bool{}
	for _, t := range targets {
		distinct[t] = true
	}
	head := fmt.Sprintf("%d rounds; per peer and round a %v closed-loop run (%d connections) and a %v open-loop run; Envoy --concurrency %d; %d requests (%d distinct paths, Zipf s = 1.1 over 10⁵), %d client ids\n\n",
		*peerRounds, *peerDur, *peerConns, *peerDur, *peerWorkers, len(targets), len(distinct), peerClientIDs)
	peerTables(b, bins, head, peers, targets, reqs, overrideReqs, *peerOut)
}

// peerTables measures peers in each Envoy of bins (peerVersion; the
// benchmark's timer runs only meanwhile), and prints head and the tables,
// also to file unless it is "".
func peerTables(b *testing.B, bins []envoyrun.Binary, head string, peers []peerSpec, targets []string, reqs [][]byte, overrideReqs map[int][][]byte, file string) {
	var out strings.Builder
	out.WriteString(head)
	b.ResetTimer()
	for _, bin := range bins {
		out.WriteString(peerVersion(b, bin, peers, targets, reqs, overrideReqs))
	}
	b.StopTimer()
	fmt.Printf("\n%s", out.String())
	if file != "" {
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// peerVersion measures every peer in one Envoy version and returns its
// table.
func peerVersion(b *testing.B, bin envoyrun.Binary, peers []peerSpec, targets []string, reqs [][]byte, overrideReqs map[int][][]byte) string {
	ctx := context.Background()
	start := time.Now()
	stage := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "bench: envoy %s: %s (%s so far)\n", bin.Version, fmt.Sprintf(format, a...), time.Since(start).Round(time.Second))
	}
	runs := make([]*peerRun, len(peers))
	byKey := map[string]*peerRun{}
	stage("starting %d Envoys", len(peers))
	for i, p := range peers {
		dir := envoyrun.WorkDir(b)
		if p.kind == peerNoop {
			if err := os.Symlink(peerNoopModule(b, b.TempDir()), dir+"/dist/noop.wasm"); err != nil {
				b.Fatal(err)
			}
		}
		if p.kind == peerPolicy {
			peerLinkPolicy(b, dir)
		}
		e := envoyrun.Start(b, bin, envoyrun.Options{Bootstrap: p.bootstrap(b), Dir: dir, Concurrency: *peerWorkers, LogLevel: "warning"})
		r := &peerRun{peerSpec: p, e: e, addr: e.MustListener(b, "bench"), req: reqs}
		if p.kind == peerOverride {
			r.req = overrideReqs[len(p.endpoints)]
		}
		peerCheck(b, r, targets)
		runs[i], byKey[p.key] = r, r
	}
	defer func() {
		for _, r := range runs {
			r.e.Stop()
		}
	}()

	// Warm-up: every upstream connection opened, V8's tiers settled, the
	// rank cache filled; the limit's rate sets the open-loop rate.
	stage("warm-up")
	var rate float64
	for _, r := range runs {
		res := loadgen.Closed(ctx, r.addr, r.req, *peerConns, peerWarmUp)
		peerAnswered(b, r, res)
		if r.key == pLimit {
			rate = *peerRate * res.RPS()
		}
		r.rss = peerRSS(r.e.Pid())
	}
	cx0 := map[*peerRun]int64{}
	for _, r := range runs {
		cx0[r] = r.e.Stat(b, "cluster.upstream.upstream_cx_total")
	}
	for round := 0; round < *peerRounds; round++ {
		// Each round starts at another peer, so none is always first
		// after the others' open-loop runs.
		order := append(slices.Clone(runs[round%len(runs):]), runs[:round%len(runs)]...)
		stage("round %d/%d: closed loop", round+1, *peerRounds)
		for _, r := range order {
			cpu0, err := r.e.CPUTime()
			if err != nil {
				b.Fatal(err)
			}
			res := loadgen.Closed(ctx, r.addr, r.req, *peerConns, *peerDur)
			cpu1, err := r.e.CPUTime()
			if err != nil {
				b.Fatal(err)
			}
			peerAnswered(b, r, res)
			r.rps = append(r.rps, res.RPS())
			r.cpuUs = append(r.cpuUs, float64((cpu1-cpu0).Microseconds())/float64(res.Requests))
		}
		stage("round %d/%d: open loop at %.0f req/s", round+1, *peerRounds, rate)
		for _, r := range order {
			res := loadgen.Open(ctx, r.addr, r.req, rate, *peerConns, *peerDur)
			r.errors += res.Errors
			r.missed += res.Missed
			r.due += res.Requests + res.Errors + res.Missed
			if res.Errors > 0 {
				b.Fatalf("%s: %d of %d open-loop requests failed: %v", r.name, res.Errors, res.Requests+res.Errors, res.FirstErr)
			}
			r.p50 = append(r.p50, peerUs(res.Quantile(0.50)))
			r.p99 = append(r.p99, peerUs(res.Quantile(0.99)))
		}
	}
	for _, r := range runs {
		r.upstreamCx = r.e.Stat(b, "cluster.upstream.upstream_cx_total") - cx0[r]
	}
	var profNote string
	if *peerProfile {
		stage("profiles")
		profNote = peerProfiles(b, runs)
	}
	return peerTable(bin, runs, byKey, rate) + profNote
}

func peerUs(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// peerAnswered fails the benchmark when a run had any error: a figure of a
// proxy that refuses requests would be a figure of its error path.
func peerAnswered(b *testing.B, r *peerRun, res loadgen.Result) {
	b.Helper()
	if res.Errors > 0 || res.Requests == 0 {
		b.Fatalf("%s: %d of %d requests failed: %v\n%s", r.name, res.Errors, res.Requests+res.Errors, res.FirstErr, r.e.LogTail(20))
	}
}

// peerCheck sends the benchmark's requests for 8 distinct paths through
// the peer: each must be answered 200; in hashlb's rows by the service
// lbcore ranks first, in the override_host rows by the first address of
// the client's header, in ring_hash's and maglev's by the same backend
// twice; and, but for round robin, not all by one backend (the backends
// name themselves in X-Backend: b1…b3, or the address for the 10⁴ pool).
func peerCheck(b *testing.B, r *peerRun, targets []string) {
	b.Helper()
	var want func(target string) string
	switch r.kind {
	case peerHashlb:
		cfg := pluginConfigs(b, r.bootstrap(b))[0]
		want = func(t string) string {
			d := lbcore.NewBalancer(cfg, 0).Decide(&lbcore.Request{Target: t, Authority: "shop.example.com", Method: "GET"}, time.Now())
			return cfg.Services[d.At(0)].Address
		}
	case peerOverride:
		rank := peerRankedHeader(b, peerPlugin(r.endpoints, false))
		want = func(t string) string { first, _, _ := strings.Cut(rank(t)[1], ","); return first }
	case peerPolicy:
		want = peerPolicyWant(b, r.peerSpec)
	}
	get := func(i int) string {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		c.Write(r.req[i])
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			b.Fatalf("%s: GET %s: %v", r.name, targets[i], err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%s: GET %s: status %d\n%s", r.name, targets[i], resp.StatusCode, r.e.LogTail(20))
		}
		got := resp.Header.Get("X-Backend")
		if len(r.endpoints) == 3 && len(got) == 2 {
			got = r.endpoints[got[1]-'1'] // "b2" → its address
		}
		return got
	}
	seen, paths := map[string]bool{}, map[string]bool{}
	for i, t := range targets {
		if len(paths) == 8 {
			break
		}
		if paths[t] {
			continue
		}
		paths[t] = true
		got := get(i)
		seen[got] = true
		switch {
		case want != nil:
			if w := want(t); got != w {
				b.Fatalf("%s: GET %s went to %s, want %s", r.name, t, got, w)
			}
		case r.kind == peerRingHash || r.kind == peerMaglev:
			// Hashing on :path: the same path, on another connection (maybe
			// another worker), reaches the same backend.
			if again := get(i); again != got {
				b.Fatalf("%s: GET %s went to %s, then to %s: the hash policy does not hash the path", r.name, t, got, again)
			}
		}
	}
	if r.kind != peerRoundRobin && r.kind != peerNoop && len(seen) < 2 {
		b.Fatalf("%s: 8 distinct paths all went to %v", r.name, seen)
	}
}

// peerRSS is a process's resident set (VmRSS) in MB, 0 when unreadable.
func peerRSS(pid int) float64 {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(s), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func peerMedian(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ratios divides a's figure by b's round by round (both were measured in
// the same round, one after the other) and returns the median and the
// spread.
func peerRatios(a, b []float64) (med, lo, hi float64) {
	var r []float64
	for i := range min(len(a), len(b)) {
		r = append(r, a[i]/b[i])
	}
	return peerMedian(r), slices.Min(r), slices.Max(r)
}

// peerRatioCI is the distribution-free 95 % confidence interval of the
// median of a's and b's round-by-round ratios (as peerRatios pairs them):
// the order statistics x(k) and x(n+1-k) of the n ratios, k the largest
// with P(Binomial(n, ½) ≤ k-1) ≤ 2.5 %. Below 6 rounds no such interval
// exists and ok is false.
func peerRatioCI(a, b []float64) (lo, hi float64, ok bool) {
	var r []float64
	for i := range min(len(a), len(b)) {
		r = append(r, a[i]/b[i])
	}
	slices.Sort(r)
	n := len(r)
	k, cdf, term := 0, 0.0, math.Pow(0.5, float64(n)) // term: P(Binomial = j)
	for j := 0; j < n; j++ {
		cdf += term
		if cdf > 0.025 {
			break
		}
		k = j + 1
		term *= float64(n-j) / float64(j+1)
	}
	if k == 0 {
		return 0, 0, false
	}
	return r[k-1], r[n-k], true
}

// peerTable is one version's Markdown table.
func peerTable(bin envoyrun.Binary, runs []*peerRun, by map[string]*peerRun, rate float64) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "### Envoy %s\n\nreq/s: closed loop, %d connections. p50/p99: open loop at %.0f req/s (%.0f %% of the limit's req/s in the warm-up). × ring_hash, × limit: the ratio in each round (interleaved), median (min–max). CPU: the Envoy process's user+system time over the closed-loop runs ÷ requests.\n\n",
		bin.Version, *peerConns, rate, *peerRate*100)
	sb.WriteString("| peer | req/s | × ring_hash | × limit | p50 µs | p99 µs | p99 × ring_hash | p99 × limit | Envoy CPU µs/req | CPU × ring_hash | RSS MB | upstream cx opened | goal | verdict |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	ring, limit := by[pRing], by[pLimit]
	rr := func(a, b []float64) string {
		m, lo, hi := peerRatios(a, b)
		return fmt.Sprintf("%.3f (%.2f–%.2f)", m, lo, hi)
	}
	for _, r := range runs {
		goal, verdict := peerGoal(r, by)
		// Requests still unsent at the end of a run: the peer did not keep
		// up with the rate (saturated, or starved of CPU by the machine).
		missed := ""
		if r.missed > 0 {
			missed = fmt.Sprintf(" (%d not sent in time)", r.missed)
			if float64(r.missed) > 0.01*float64(r.due) {
				missed = fmt.Sprintf(" (**saturated**: %.0f %% not sent in time)", 100*float64(r.missed)/float64(r.due))
			}
		}
		fmt.Fprintf(&sb, "| %s | %.0f | %s | %s | %.0f | %.0f%s | %s | %s | %.1f | %s | %.0f | %d | %s | %s |\n",
			r.name, peerMedian(r.rps), rr(r.rps, ring.rps), rr(r.rps, limit.rps),
			peerMedian(r.p50), peerMedian(r.p99), missed, rr(r.p99, ring.p99), rr(r.p99, limit.p99),
			peerMedian(r.cpuUs), rr(r.cpuUs, ring.cpuUs), r.rss, r.upstreamCx, goal, verdict)
	}
	sb.WriteString("\n")
	return sb.String()
}

// peerGoal is a row's goal (docs/performance.md, "Against Envoy's own load
// balancers") and whether the median meets it.
func peerGoal(r *peerRun, by map[string]*peerRun) (goal, verdict string) {
	verdictOf := func(ok bool) string {
		if ok {
			return "pass"
		}
		return "**fail**"
	}
	switch r.key {
	case pHashlb:
		rps, _, _ := peerRatios(r.rps, by[pRing].rps)
		p99, _, _ := peerRatios(r.p99, by[pRing].p99)
		return "req/s ≥ 0.95× ring_hash, p99 ≤ 1.10×", verdictOf(rps >= 0.95 && p99 <= 1.10)
	case pPersist:
		rps, _, _ := peerRatios(r.rps, by[pRing].rps)
		return "req/s ≥ 0.90× ring_hash", verdictOf(rps >= 0.90)
	case pHashlbN:
		rps, lo, hi := peerRatios(r.rps, by[pMaglevN].rps)
		return fmt.Sprintf("req/s ≥ 0.90× maglev 10⁴ (%.3f, %.2f–%.2f)", rps, lo, hi), verdictOf(rps >= 0.90)
	case pPolicy, pPolicyN:
		return peerPolicyGoal(r, by)
	}
	return "", ""
}

// TestPeerRatioCI: the median's interval is the textbook one (the sign
// test's order statistics: x(2)–x(9) of 10, x(10)–x(21) of 30), whatever
// the rounds' order, and none exists below 6 rounds.
func TestPeerRatioCI(t *testing.T) {
	for _, c := range []struct {
		n      int
		lo, hi float64
		ok     bool
	}{{5, 0, 0, false}, {6, 1, 6, true}, {10, 2, 9, true}, {30, 10, 21, true}} {
		a, b := make([]float64, c.n), make([]float64, c.n)
		for i := range a {
			a[i], b[i] = float64(2*((i*7)%c.n+1)), 2 // ratios 1..n, shuffled
		}
		if c.n%7 == 0 {
			t.Fatalf("n = %d: the shuffle needs n prime to 7", c.n)
		}
		lo, hi, ok := peerRatioCI(a, b)
		if lo != c.lo || hi != c.hi || ok != c.ok {
			t.Errorf("n = %d: interval %v–%v (ok %v), want %v–%v (ok %v)", c.n, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}
