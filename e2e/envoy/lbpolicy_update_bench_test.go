package envoy

// BenchmarkEnvoyLBPolicyUpdate measures what a change of the cluster costs
// with the policy, against Envoy's own ring_hash over the same hosts: two
// Envoys (--concurrency 4), one balancing a cluster with the policy, one
// with ring_hash on :path, each cluster read from an EDS file the benchmark
// rewrites. Two figures per host count:
//
//   - a membership update's CPU: one endpoint of the file replaced by a new
//     address, the process's CPU from the write until every thread is done
//     with it (no CPU tick for a settle time), less what the idle process
//     spends in as long; each Envoy in turn, the order alternating round by
//     round, with no load. The ratio is the policy's ÷ ring_hash's, round by
//     round: both include Envoy's own work on the update (reading the file,
//     the cluster's host sets on every thread), which is the same for both.
//   - a rolling update's latency: both Envoys under an open loop at the
//     same rate at once, first with the cluster still (steady), then with
//     one endpoint replaced every -update.every in both files (rolling);
//     p99 rolling ÷ steady for each, the policy's p99 ÷ ring_hash's in
//     each phase, and the share of the policy's requests its choice cache
//     answered in each (dynamicmodulescustom.cached, every worker's hits
//     in it: cachedHits). Every request must be answered 200 in both
//     phases.
//
// ./build.sh bench runs it with the other BenchmarkEnvoy*:
//
//	go test ./e2e/envoy -run '^$' -bench 'BenchmarkEnvoyLBPolicyUpdate' -benchtime 1x -peers.out dist/envoy-peers.md
//
// writes its tables to dist/envoy-peers-update.md.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/loadgen"
)

var (
	updateHosts   = flag.String("update.hosts", "10000,100000", "BenchmarkEnvoyLBPolicyUpdate: the host counts whose membership update is measured")
	updateLatency = flag.String("update.latency", "10,10000", "BenchmarkEnvoyLBPolicyUpdate: the host counts whose latency during a rolling update is measured")
	updateRounds  = flag.Int("update.rounds", 6, "BenchmarkEnvoyLBPolicyUpdate: rounds per figure; each is the median over them")
	updatePhase   = flag.Duration("update.phase", 5*time.Second, "BenchmarkEnvoyLBPolicyUpdate: how long each phase of a round (steady, rolling) loads the Envoys")
	updateEvery   = flag.Duration("update.every", 500*time.Millisecond, "BenchmarkEnvoyLBPolicyUpdate: how often the rolling update replaces an endpoint")
)

// updateSettle is how long an Envoy's CPU must stay still for an update to
// count as done: several of the kernel's 10 ms ticks, longer than Envoy's
// own idle timers leave it still.
const updateSettle = 300 * time.Millisecond

func BenchmarkEnvoyLBPolicyUpdate(b *testing.B) {
	bins := policyBenchBinaries(b)
	bin := bins[len(bins)-1]
	be := envoyrun.StartFastBackendAny(b, 0)
	var out strings.Builder
	fmt.Fprintf(&out, "#### Envoy %s: the policy against ring_hash when the cluster changes\n\n", bin.Version)
	fmt.Fprintf(&out, "Two Envoys (--concurrency 4), one cluster each from an EDS file: hashlb's policy (URLHASH) and ring_hash on :path. %d rounds; each figure is the median over them [its range].\n\n", *updateRounds)
	sizes := func(list string) []int {
		var n []int
		for _, f := range strings.Split(list, ",") {
			if v, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && v > 0 {
				n = append(n, v)
			}
		}
		return n
	}
	cost, lat := sizes(*updateHosts), sizes(*updateLatency)
	if len(cost) > 0 {
		out.WriteString("A membership update (one endpoint replaced, no load): the process's CPU until every thread is done, less its idle CPU in as long.\n\n")
		out.WriteString("| hosts | ring_hash CPU ms | policy CPU ms | policy − ring_hash ms | policy ÷ ring_hash | policy's update per thread, ms (its log) |\n|---|---|---|---|---|---|\n")
		for _, n := range cost {
			printRow(&out, updateCost(b, bin, be.Port(), n))
		}
		out.WriteString("\n")
	}
	if len(lat) > 0 {
		fmt.Fprintf(&out, "A rolling update under load: both Envoys at once, an open loop at %.0f %% of ring_hash's closed-loop req/s beside the policy's (%d connections each), %v steady then %v with one endpoint replaced every %v, per round.\n\n",
			*peerRate*100, *peerConns, *updatePhase, *updatePhase, *updateEvery)
		out.WriteString("| hosts | ring_hash p99 µs steady / rolling | rolling ÷ steady | policy p99 µs steady / rolling | rolling ÷ steady | policy ÷ ring_hash p99, steady | policy ÷ ring_hash p99, rolling | policy's requests answered from its choice cache, % steady / rolling | updates per Envoy |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, n := range lat {
			printRow(&out, updateLatencyRow(b, bin, be.Port(), n))
		}
		out.WriteString("\n")
	}
	if *peerOut != "" {
		file := strings.TrimSuffix(*peerOut, ".md") + "-update.md"
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// updatePair starts the two Envoys over n loopback endpoints of one
// backend port.
func updatePair(b *testing.B, bin envoyrun.Binary, port, n int) (ring, pol *policyEnvoy, rc, pc *policyCluster) {
	eps := make([]policyEndpoint, n)
	for i := range eps {
		eps[i] = policyEndpoint{addr: updateAddr(i, port)}
	}
	rc = &policyCluster{name: "c", ring: true, eps: slices.Clone(eps)}
	pc = &policyCluster{name: "c", config: `{"lbMethod":"URLHASH"}`, eps: slices.Clone(eps)}
	return startPolicy(b, bin, []policyCluster{*rc}), startPolicy(b, bin, []policyCluster{*pc}), rc, pc
}

// updateAddr is endpoint i's loopback address (127.2.0.1 on), or, for
// i < 0, the address of replacement -i (127.9.0.0/16, never an endpoint's
// at the start).
func updateAddr(i, port int) string {
	if i < 0 {
		i = -i
		return fmt.Sprintf("127.9.%d.%d:%d", i/250%250, i%250+1, port)
	}
	return fmt.Sprintf("127.%d.%d.%d:%d", 2+i/62500, i/250%250, i%250+1, port)
}

// updateTookRe finds the per-thread update time in the module's log line
// for a host set (lbState.update).
var updateTookRe = regexp.MustCompile(`cluster c: \d+ hosts .*; (\d+) ms`)

// replace gives endpoint seq%len of c the next replacement address and
// rewrites c's EDS file in dir.
func (c *policyCluster) replace(b *testing.B, dir string, seq, port int) {
	c.eps[seq%len(c.eps)].addr = updateAddr(-(seq + 1), port)
	writePolicyEDS(b, dir, *c)
}

// processCPU is the CPU e's threads have used.
func processCPU(b *testing.B, e *policyEnvoy) time.Duration {
	var sum time.Duration
	for _, th := range envoyThreads(b, e.Envoy) {
		sum += th.CPU
	}
	return sum
}

// settle waits until e's CPU has not moved for updateSettle (after done
// says the update reached the threads it can see) and returns the CPU used
// since cpu0 and the time taken.
func settle(b *testing.B, e *policyEnvoy, cpu0 time.Duration, start time.Time, done func() bool) (time.Duration, time.Duration) {
	deadline := start.Add(5 * time.Minute)
	last, still := processCPU(b, e), time.Now()
	for {
		time.Sleep(20 * time.Millisecond)
		now, c := time.Now(), processCPU(b, e)
		if c != last {
			last, still = c, now
		}
		if now.Sub(still) >= updateSettle && done() {
			return last - cpu0, still.Sub(start)
		}
		if now.After(deadline) {
			b.Fatalf("an update was not done after 5 min")
		}
	}
}

// statNow is one stat, read without waiting: false while Envoy's main
// thread, busy with an update of 10⁵ hosts, does not answer its admin.
func statNow(e *policyEnvoy, name string) (int64, bool) {
	s, err := e.Stats()
	if err != nil {
		return 0, false
	}
	v, ok := s[name]
	return v, ok
}

// idleRate is e's CPU per second of wall time with nothing to do.
func idleRate(b *testing.B, e *policyEnvoy) float64 {
	c0, t0 := processCPU(b, e), time.Now()
	time.Sleep(2 * time.Second)
	return float64(processCPU(b, e)-c0) / float64(time.Since(t0))
}

// updateCost is the table row of the membership update's cost at n hosts.
func updateCost(b *testing.B, bin envoyrun.Binary, port, n int) string {
	ring, pol, rc, pc := updatePair(b, bin, port, n)
	defer ring.Stop()
	defer pol.Stop()
	idle := [2]float64{idleRate(b, ring), idleRate(b, pol)}
	var ringMs, polMs, extra, ratio []float64
	var threadMs []string
	for round := range *updateRounds {
		var got [2]float64
		for k := range 2 {
			side := (k + round) % 2 // which goes first alternates
			e, c := ring, rc
			if side == 1 {
				e, c = pol, pc
			}
			mark := len(e.Log())
			members, _ := statNow(e, "cluster.c.membership_change")
			cpu0, start := processCPU(b, e), time.Now()
			c.replace(b, e.Dir, round, port)
			done := func() bool {
				v, ok := statNow(e, "cluster.c.membership_change")
				return ok && v > members
			}
			if side == 1 {
				want := fmt.Sprintf("hashlb: cluster c: %d hosts", n)
				done = func() bool { return countLog(e.Log()[mark:], want) >= 5 }
			}
			cpu, took := settle(b, e, cpu0, start, done)
			got[side] = max(0, float64(cpu)-idle[side]*float64(took)) / 1e6
			if side == 1 {
				for _, m := range updateTookRe.FindAllStringSubmatch(e.Log()[mark:], -1) {
					threadMs = append(threadMs, m[1])
				}
			}
		}
		fmt.Fprintf(os.Stderr, "bench: update at %d hosts, round %d/%d: ring_hash %.1f ms, policy %.1f ms of CPU\n", n, round+1, *updateRounds, got[0], got[1])
		ringMs, polMs, extra = append(ringMs, got[0]), append(polMs, got[1]), append(extra, got[1]-got[0])
		if got[0] > 0 {
			ratio = append(ratio, got[1]/got[0])
		}
	}
	med := func(v []float64) string {
		if len(v) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f [%.1f–%.1f]", peerMedian(v), slices.Min(v), slices.Max(v))
	}
	rat := "– (ring_hash's update under the CPU clock's resolution)"
	if len(ratio) > 0 {
		rat = fmt.Sprintf("%.2f [%.2f–%.2f]", peerMedian(ratio), slices.Min(ratio), slices.Max(ratio))
	}
	return fmt.Sprintf("| %d | %s | %s | %s | %s | %s |\n", n, med(ringMs), med(polMs), med(extra), rat, updateThreadSummary(threadMs))
}

// updateThreadSummary is the median and range of the per-thread update
// times the module logged.
func updateThreadSummary(ms []string) string {
	var v []float64
	for _, m := range ms {
		if f, err := strconv.ParseFloat(m, 64); err == nil {
			v = append(v, f)
		}
	}
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f [%.0f–%.0f] over %d", peerMedian(v), slices.Min(v), slices.Max(v), len(v))
}

// updateLatencyRow is the table row of the latency during a rolling
// update at n hosts.
func updateLatencyRow(b *testing.B, bin envoyrun.Binary, port, n int) string {
	ring, pol, rc, pc := updatePair(b, bin, port, n)
	defer ring.Stop()
	defer pol.Stop()
	targets := peerTargets(4096)
	reqs := peerRequests(targets, func(string) [2]string { return [2]string{"x-test-cluster", "c"} })
	addrs := []string{ring.addr, pol.addr}
	// Both warmed at once, as they are then loaded: the rate is a share
	// of what ring_hash's Envoy answers beside the policy's.
	warm := make([]loadgen.Result, 2)
	var wg sync.WaitGroup
	for k, a := range addrs {
		wg.Go(func() { warm[k] = loadgen.Closed(context.Background(), a, reqs, *peerConns, pairedWarmUp) })
	}
	wg.Wait()
	rate := *peerRate * warm[0].RPS()
	var p99 [2][2][]float64 // [envoy][steady, rolling]
	var cached [2][]float64 // the policy's share answered from its choice cache [steady, rolling]
	seq := 0
	for round := range *updateRounds {
		for phase := range 2 {
			stop := make(chan struct{})
			var churn sync.WaitGroup
			if phase == 1 {
				churn.Go(func() {
					tick := time.NewTicker(*updateEvery)
					defer tick.Stop()
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
							rc.replace(b, ring.Dir, seq, port)
							pc.replace(b, pol.Dir, seq, port)
							seq++
						}
					}
				})
			}
			res := make([]loadgen.Result, 2)
			hits, hitsErr := cachedHits(pol)
			for k, a := range addrs {
				wg.Go(func() { res[k] = loadgen.Open(context.Background(), a, reqs, rate, *peerConns, *updatePhase) })
			}
			wg.Wait()
			close(stop)
			churn.Wait()
			// The share is left out of a phase whose counter the admin
			// server, behind a backlog of updates, did not answer for.
			if h, err := cachedHits(pol); err == nil && hitsErr == nil && res[1].Requests > 0 {
				cached[phase] = append(cached[phase], 100*float64(h-hits)/float64(res[1].Requests))
			}
			for k, r := range res {
				if r.Errors > 0 || r.Requests == 0 {
					b.Fatalf("%d hosts, round %d, %s: %d of %d requests failed: %v", n, round+1, []string{"ring_hash", "policy"}[k], r.Errors, r.Requests+r.Errors, r.FirstErr)
				}
				p99[k][phase] = append(p99[k][phase], peerUs(r.Quantile(0.99)))
			}
		}
		fmt.Fprintf(os.Stderr, "bench: rolling update at %d hosts, round %d/%d: p99 ring_hash %.0f/%.0f µs, policy %.0f/%.0f µs\n", n, round+1, *updateRounds,
			p99[0][0][round], p99[0][1][round], p99[1][0][round], p99[1][1][round])
	}
	r := func(a, b []float64) string {
		m, lo, hi := peerRatios(a, b)
		return fmt.Sprintf("%.2f [%.2f–%.2f]", m, lo, hi)
	}
	return fmt.Sprintf("| %d | %.0f / %.0f | %s | %.0f / %.0f | %s | %s | %s | %.1f / %.1f | %d |\n", n,
		peerMedian(p99[0][0]), peerMedian(p99[0][1]), r(p99[0][1], p99[0][0]),
		peerMedian(p99[1][0]), peerMedian(p99[1][1]), r(p99[1][1], p99[1][0]),
		r(p99[1][0], p99[0][0]), r(p99[1][1], p99[0][1]), peerMedian(cached[0]), peerMedian(cached[1]), seq)
}

// cachedHits is the policy's count of choices its cache answered, every
// worker's hits in it: each worker adds the hits it has not counted yet
// when it next enters Go (cache.h), so 64 requests of paths never sent
// before, each on a new connection, go to Go on every worker first.
func cachedHits(pol *policyEnvoy) (int64, error) {
	for range 64 {
		flushSeq++
		req, err := http.NewRequest("GET", fmt.Sprintf("http://%s/flush/%d", pol.addr, flushSeq), nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("x-test-cluster", "c")
		resp, err := flushClient.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return pol.StatValue("dynamicmodulescustom.cached")
}

// flushSeq numbers cachedHits's paths, never sent twice; flushClient
// opens a connection for each request.
var (
	flushSeq    int
	flushClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
)

// printRow prints a table's row as it is measured and adds it to out.
func printRow(out *strings.Builder, row string) {
	fmt.Print(row)
	out.WriteString(row)
}
