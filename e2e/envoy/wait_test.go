package envoy

// Waiting, in these tests, is for a condition, never for a quiet machine's
// time. What Envoy does on its own (a stat moving, a log line, a listener
// warming, a host set reaching every worker) is polled until it holds, up
// to waitCeiling, which only a hang reaches; what every worker does on its
// 1-second tick is waited for as the tick widened by the lateness this
// process's timers show meanwhile (internal/lateness), since the workers'
// timers are as late on a loaded machine.

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/lateness"
)

// waitCeiling is the ceiling of a wait for something Envoy does on its
// own, as long as Envoy's readiness wait (envoyReady: V8 compiling the
// module is the slowest thing Envoy does): a loaded two-core machine
// reaches it only on a hang; a wait ends as soon as its condition holds,
// so a quiet machine pays nothing for it.
const waitCeiling = envoyReady

// eventually polls cond every 20 ms until it holds and returns how long
// that took; at waitCeiling it fails t with what it waited for.
func eventually(t testing.TB, what func() string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > waitCeiling {
			t.Fatalf("%s: not within %v", what(), waitCeiling)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// waitStatIs waits (up to waitCeiling) until stat name of e satisfies ok and
// returns its value and how long that took.
func waitStatIs(t testing.TB, e *envoyrun.Envoy, name string, ok func(int64) bool) (int64, time.Duration) {
	t.Helper()
	var v int64
	took := eventually(t, func() string { return fmt.Sprintf("stat %s (%d)", name, v) }, func() bool {
		v = e.Stat(t, name)
		return ok(v)
	})
	return v, took
}

// tick is how often hashlb's root context ticks in every VM (each worker
// and the main thread): its health checks, counters and shared verdicts
// move on it.
const tick = time.Second

// tickWait returns once every worker has run its 1-second tick since the
// call: a tick and a tenth, then twice the lateness this process's timers
// showed meanwhile (a worker's tick timer fires as late, and its work after
// it is delivered as late again).
func tickWait() {
	m := lateness.Start()
	time.Sleep(tick + tick/10)
	m.Stop()
	time.Sleep(lateness.Widen(0, m.Late(), 2))
}

// waitListener waits (up to waitCeiling) until e has listener name (one
// from an LDS file warms once its filters are ready) and returns its
// address.
func waitListener(t testing.TB, e *envoyrun.Envoy, name string) string {
	t.Helper()
	var addr string
	var err error
	eventually(t, func() string { return fmt.Sprintf("listener %s (%v)", name, err) }, func() bool {
		addr, err = e.Listener(name)
		return err == nil
	})
	return addr
}
