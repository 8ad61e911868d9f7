package hostsim

import (
	"sync"
	"time"
)

// clock is the host's virtual clock. Guest calls hold mu for reading and see
// one snapshot for their whole duration; Advance takes mu for writing, so it
// waits for running calls and no call starts while time moves (a clock that
// jumps under a running call stalls Go's garbage collector:
// docs/envoy-host.md#clocks-in-a-test-host).
type clock struct {
	mu    sync.RWMutex
	now   time.Time
	start time.Time
	real  bool
}

func newClock(start time.Time, real bool) *clock {
	if start.IsZero() {
		start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if real {
		start = time.Now()
	}
	return &clock{now: start, start: start, real: real}
}

// read returns the current time; callers hold mu.
func (c *clock) read() time.Time {
	if c.real {
		return time.Now()
	}
	return c.now
}

// Now returns the host clock's current time.
func (h *Host) Now() time.Time {
	h.clock.mu.RLock()
	defer h.clock.mu.RUnlock()
	return h.clock.read()
}

// Advance moves the virtual clock forward by d, after any running guest call
// has returned, then fires the ticks that became due (see Tick). It does
// nothing to a RealTime clock but fire due ticks.
func (h *Host) Advance(d time.Duration) {
	h.clock.mu.Lock()
	if !h.clock.real && d > 0 {
		h.clock.now = h.clock.now.Add(d)
	}
	h.clock.mu.Unlock()
	h.Tick()
}

// monotonic is the monotonic clock: time since the host started, plus one
// second so it is never zero.
func (v *vm) monotonic() uint64 {
	return uint64(v.now.Sub(v.h.clock.start) + time.Second)
}
