package envoy

// Slow start in real Envoy: a service ramps (slowStart) while the tests
// sweep a set of keys through Envoy again and again. Every sweep is judged
// by the share of the keys lbcore's ramp gives the ramping service for as
// long as the ramp can have run, at the least and at the most, in the
// worker that decided: bounds taken from the times the test measured (when
// it wrote the change, when Envoy said it had applied it, when each sweep
// began and ended), widened by the lateness this process's timers showed
// where a worker's tick stands between them (internal/lateness). The Wasm
// filter's test is here (TestFilterSlowStart), the policy's in
// lbpolicy_slowstart_test.go; both take their window from -slowstart.window.

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/lateness"
	"github.com/hashlb/hashlb/lbcore"
)

// slowStartWindow is the window of every ramp of the slow-start tests:
// short, so that a run of the package stays short; the acceptance
// window is -slowstart.window=60s.
var slowStartWindow = flag.Duration("slowstart.window", 6*time.Second,
	"TestFilterSlowStart, TestLBPolicySlowStart: the slowStart window of every ramp (the acceptance's is 60s)")

// rampWindow is -slowstart.window and the slowStart member of a hashlb
// configuration with it, from a 10 % floor.
func rampWindow(t testing.TB) (time.Duration, string) {
	t.Helper()
	w := *slowStartWindow
	s := lbcore.FormatDuration(w)
	if d, err := lbcore.ParseDuration(s); err != nil || d != w || w < 2*time.Second {
		t.Fatalf("-slowstart.window=%v: want 2s or more, a whole number of seconds, minutes or hours", w)
	}
	return w, fmt.Sprintf(`"slowStart":{"window":%q,"minWeightPercent":10}`, s)
}

// rampWatch is one ramp watched through Envoy.
type rampWatch struct {
	what string   // the ramp, for messages
	keys []string // request paths
	// get is the backend that served key; it fails the test on an error.
	get func(key string) string
	// before is each key's service before the ramp, final lbcore's without
	// slow start; name is the ramping service.
	before, final map[string]string
	name          string
	window        time.Duration
	// onNew is how many of keys lbcore gives the ramping service when its
	// ramp has run for elapsed.
	onNew func(elapsed time.Duration) int
	// bounds is how long, at the least and at the most, the ramp of the
	// worker that made a decision between ts and te has run then.
	bounds func(ts, te time.Time) (lo, hi time.Duration)
}

// rampSweep is one sweep of the keys: how long the ramp had run (bounds),
// the ramping service's keys and lbcore's for the two bounds.
type rampSweep struct {
	lo, hi time.Duration
	share  int
	want   [2]int
}

// watch sweeps the keys until the ramp is over in every worker (the least
// it can have run is past the window), then once more. In every sweep each
// key is on its old service or the ramping one, and the ramping service
// has lbcore's share for the sweep's bounds, ± 3 points; after the window
// every key is where lbcore without slow start puts it.
func (w rampWatch) watch(t *testing.T) []rampSweep {
	t.Helper()
	slack := len(w.keys) * 3 / 100
	var sweeps []rampSweep
	for {
		ts := time.Now()
		share := 0
		for _, k := range w.keys {
			switch got := w.get(k); got {
			case w.name:
				share++
			case w.before[k]:
			default:
				t.Fatalf("%s: %s went to %s during the ramp; it was on %s, and only %s may take it", w.what, k, got, w.before[k], w.name)
			}
		}
		te := time.Now()
		lo, hi := w.bounds(ts, te)
		s := rampSweep{lo: lo, hi: hi, share: share, want: [2]int{w.onNew(lo), w.onNew(hi)}}
		sweeps = append(sweeps, s)
		if share < s.want[0]-slack || share > s.want[1]+slack {
			t.Errorf("%s: a sweep when the ramp had run %v to %v found %d keys of %d on %s; its ramp gives it %d to %d (± %d)",
				w.what, lo.Round(time.Millisecond), hi.Round(time.Millisecond), share, len(w.keys), w.name, s.want[0], s.want[1], slack)
		}
		if lo > w.window {
			break
		}
	}
	full := 0
	for _, k := range w.keys {
		if w.final[k] == w.name {
			full++
		}
	}
	var seen strings.Builder
	for _, s := range sweeps {
		fmt.Fprintf(&seen, " %.1f–%.1fs:%d", s.lo.Seconds(), s.hi.Seconds(), s.share)
	}
	t.Logf("%s: %s's keys of %d per sweep (how long its ramp had run: keys):%s; without slow start %d", w.what, w.name, len(w.keys), seen.String(), full)
	w.report(t, sweeps)
	if last := sweeps[len(sweeps)-1]; last.share != full {
		t.Errorf("%s: after the window %s has %d keys, lbcore without slow start gives it %d", w.what, w.name, last.share, full)
	}
	for _, k := range w.keys {
		if got := w.get(k); got != w.final[k] {
			t.Fatalf("%s: %s on %s after the window, lbcore without slow start: %s", w.what, k, got, w.final[k])
		}
	}
	return sweeps
}

// report logs, for 25 %, 50 % and 100 % of the window, the sweep nearest
// it and what lbcore's ramp gives there.
func (w rampWatch) report(t *testing.T, sweeps []rampSweep) {
	t.Helper()
	pct := func(n int) float64 { return 100 * float64(n) / float64(len(w.keys)) }
	for _, p := range []float64{0.25, 0.5, 1} {
		at := time.Duration(p * float64(w.window))
		off := func(s rampSweep) time.Duration { return absDur((s.lo+s.hi)/2 - at) }
		best := sweeps[0]
		for _, s := range sweeps[1:] {
			if off(s) < off(best) {
				best = s
			}
		}
		t.Logf("%s at %.0f%% of the %v window: a sweep %.2f–%.2fs into the ramp found %.1f%% of the keys on %s; lbcore's ramp gives %.1f–%.1f%% for that sweep, %.1f%% at %.0f%%",
			w.what, 100*p, w.window, best.lo.Seconds(), best.hi.Seconds(), pct(best.share), w.name, pct(best.want[0]), pct(best.want[1]), pct(w.onNew(at)), 100*p)
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// TestFilterSlowStart: the Wasm filter, reconfigured through an ECDS file
// as hashlb-controller does it, ramps a service (slowStart with
// -slowstart.window from a 10 % floor; four services of weight 10, URLHASH)
// three ways in turn: b4 added to b1, b2 and b3; b4 put at weight 0 (its
// keys back on the others at once) and raised to 10; b4 back from DOWN,
// with health checks on. Each ramp is watched over 240 keys (rampWatch):
// in every sweep b4 has the share lbcore's ramp gives it for as long as
// its ramp can have run in the worker that decided, ± 3 points; no key is
// ever on a service but its own before the ramp or b4; once the window is
// over every key is where lbcore puts it without slow start.
//
// A worker's ramp starts in its on_configure for a new configuration, in
// its tick for a service back from DOWN, and a request reads the time of
// the worker's last tick: a decision between ts and te is made at most
// te minus the earliest start (the change's write; the backend healed)
// into the ramp, and at least ts, less a tick widened by the lateness
// this process measured, minus the latest start (every worker logged the
// configuration; every worker ticked after the verdict's stat moved).
func TestFilterSlowStart(t *testing.T) {
	window, slow := rampWindow(t)
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		bs := envoyrun.StartBackends(t, 4)
		// plugin is the configuration of b1…bn, b4 at weight w4, with
		// health checks when health.
		plugin := func(n, w4 int, health bool) []byte {
			var svcs []string
			for i, b := range bs[:n] {
				w := 10
				if i == 3 {
					w = w4
				}
				svcs = append(svcs, fmt.Sprintf(`{"name":%q,"hashId":%q,"address":%q,"weight":%d}`, b.Name, b.Name, b.Addr, w))
			}
			hc := ""
			if health {
				hc = `"healthCheck":{"interval":"1s","timeout":"500ms","unhealthyThreshold":1,"healthyThreshold":1,"cluster":"hashlb_upstream"},`
			}
			return []byte(`{"lbMethod":"URLHASH","upstreamHeader":"x-envoy-original-dst-host","upstreamCount":1,` + slow + `,` + hc +
				`"services":[` + strings.Join(svcs, ",") + `]}`)
		}
		parse := func(b []byte) *lbcore.Config {
			c, err := lbcore.ParseConfig(b)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		dir := envoyrun.WorkDir(t)
		ecds := filepath.Join(dir, "ecds", "hashlb.json")
		version := 0
		writeAtomic(t, ecds, ecdsFile(t, "hashlb", "0", plugin(3, 10, false)))
		e := startEnvoy(t, bin, envoyrun.Options{Bootstrap: reconfigBootstrap(t), Dir: dir})
		addr := e.MustListener(t, "hashlb_listener")
		get := servedBy(t, "http://"+addr)
		// reconfigure writes the configuration and returns when it was
		// written and when the main thread and every worker had logged it
		// (Envoy's configuration canary, on the main thread, logs it too,
		// but not for a configuration it has checked before).
		const four = "hashlb: URLHASH over 4 services"
		reconfigure := func(config []byte) (written, applied time.Time) {
			t.Helper()
			mark := len(e.Log())
			version++
			written = time.Now()
			writeAtomic(t, ecds, ecdsFile(t, "hashlb", fmt.Sprint(version), config))
			threads := map[string]bool{}
			eventually(t, func() string {
				return fmt.Sprintf("%q logged by %d threads after the update, want the main thread and %d workers\n%s", four, len(threads), persistWorkers, e.LogTail(30))
			}, func() bool {
				for _, l := range strings.Split(e.Log()[mark:], "\n") {
					if m := threadRE.FindStringSubmatch(l); m != nil && strings.Contains(l, four) {
						threads[m[1]] = true
					}
				}
				return len(threads) == persistWorkers+1
			})
			return written, time.Now()
		}

		const keys = 240
		var paths []string
		for k := range keys {
			paths = append(paths, fmt.Sprintf("/ramp/%d", k))
		}
		req := func(p string) lbcore.Request { return lbcore.Request{Target: p, Method: "GET", Authority: addr} }
		three, all := parse(plugin(3, 10, false)), parse(plugin(4, 10, false))
		before, final := map[string]string{}, map[string]string{}
		for _, p := range paths {
			before[p], final[p] = oracle(three, req(p))[0], oracle(all, req(p))[0]
		}
		// placed checks that every key is where want puts it.
		placed := func(when string, want map[string]string) {
			t.Helper()
			for _, p := range paths {
				if got := get(p); got != want[p] {
					t.Fatalf("%s: %s went to %s, lbcore: %s", when, p, got, want[p])
				}
			}
		}
		placed("three services", before)
		onNew := func(elapsed time.Duration) int {
			o := lbcore.NewBalancer(all, 0)
			t0 := time.Unix(1767225600, 0)
			o.Ramp(3, t0)
			n := 0
			for _, p := range paths {
				r := req(p)
				if d := o.Decide(&r, t0.Add(elapsed)); all.Services[d.At(0)].Name == "b4" {
					n++
				}
			}
			return n
		}
		// from is the bounds of a ramp that started between first and
		// last in each worker, with m measuring the lateness meanwhile.
		from := func(first, last time.Time, m *lateness.Meter) func(ts, te time.Time) (time.Duration, time.Duration) {
			return func(ts, te time.Time) (time.Duration, time.Duration) {
				return ts.Sub(last) - lateness.Widen(tick, m.Late(), 2), te.Sub(first)
			}
		}
		watch := func(what string, first, last time.Time, m *lateness.Meter) {
			t.Helper()
			rampWatch{what: what, keys: paths, get: get, before: before, final: final, name: "b4", window: window,
				onNew: onNew, bounds: from(first, last, m)}.watch(t)
			m.Stop()
		}

		// b4 added.
		m := lateness.Start()
		written, applied := reconfigure(plugin(4, 10, false))
		watch("b4 added", written, applied, m)

		// b4 at weight 0, then 10 again.
		reconfigure(plugin(4, 0, false))
		placed("b4 at weight 0", before)
		m = lateness.Start()
		written, applied = reconfigure(plugin(4, 10, false))
		watch("b4 raised from weight 0 to 10", written, applied, m)

		// Health checks on: every service stays UP and in place (a
		// service the configuration keeps has no Pending record); b4 fails
		// its probes, then passes them.
		reconfigure(plugin(4, 10, true))
		tickWait() // the first probes' round and the workers' reading of it
		placed("health checks on", final)
		downStat, upStat := "wasmcustom.hashlb.service.b4.health_down", "wasmcustom.hashlb.service.b4.health_up"
		up0 := e.Stat(t, upStat)
		bs[3].FailHealth(503)
		waitStatIs(t, e, downStat, func(v int64) bool { return v >= 1 })
		tickWait() // every worker reads the verdict on its tick
		placed("b4 DOWN", before)
		m = lateness.Start()
		healed := time.Now()
		bs[3].FailHealth(0)
		waitStatIs(t, e, upStat, func(v int64) bool { return v > up0 })
		tickWait()
		watch("b4 back from DOWN", healed, time.Now(), m)
		if s := e.Log(); strings.Contains(s, "wasm trap") || strings.Contains(s, "failed: Uncaught") {
			t.Error("VM failure in the log")
		}
	})
}
