package e2e

// The lateness a fleet test measures on the machine it runs on, and the
// time bounds it widens by it. A bound of the fleet (a call's timeout,
// agreement within seconds after etcd answers) is a figure of a quiet
// machine; a loaded one delivers timers, calls and their answers late, and
// a test that held it to the quiet figure would judge the machine, not the
// module. So each fleet test measures how late a 10 ms timer of its own
// process fires while it runs (lateMeter), widens its bounds by that, and
// says so in its failures. The product's figures stay the documented ones
// (docs/persistence.md), measured on a quiet machine.

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// lateMeter measures, until stop, how late a 10 ms timer of this process
// fires: a host's callout timeout and tick are such timers, and on a loaded
// machine (or with other VMs' guest code holding both Ps) they fire that
// much after their time.
type lateMeter struct {
	worst  atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

const lateTick = 10 * time.Millisecond

func newLateMeter() *lateMeter {
	ctx, cancel := context.WithCancel(context.Background())
	m := &lateMeter{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			t0 := time.Now()
			time.Sleep(lateTick)
			if d := time.Since(t0) - lateTick; d > time.Duration(m.worst.Load()) {
				m.worst.Store(int64(d))
			}
		}
	}()
	return m
}

// late is the most a timer fired late so far.
func (m *lateMeter) late() time.Duration { return time.Duration(m.worst.Load()) }

func (m *lateMeter) stop() {
	m.cancel()
	<-m.done
}

// measureLate is how late a 10 ms timer fires at most over d, now.
func measureLate(d time.Duration) time.Duration {
	m := newLateMeter()
	time.Sleep(d)
	m.stop()
	return m.late()
}

// widen is bound for a machine whose timers fire up to late late, along a
// path of steps timers or calls one after the other: each may be that late.
func widen(bound, late time.Duration, steps int) time.Duration {
	return bound + time.Duration(steps)*late
}

// callTimeout is a fleet call timeout of base on this machine, for a test
// that is not about calls missing it: base widened by twice the lateness
// measured (a call waits for its timer and its answer's delivery), rounded
// up to 10 ms, at most max. The test's failures name it.
func callTimeout(base, late, max time.Duration) time.Duration {
	d := base + 2*late
	d = (d + 9*time.Millisecond).Truncate(10 * time.Millisecond)
	return min(d, max)
}

// lateNote is what a failure adds about the machine.
func lateNote(late time.Duration, what string) string {
	return fmt.Sprintf("(the machine's timers fired up to %v late during the run; %s)", late.Round(time.Millisecond), what)
}
