package lateness

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Tick is the timer a Meter sleeps on, again and again.
const Tick = 10 * time.Millisecond

// Meter measures, until Stop, how late a 10 ms timer of this process fires:
// a host's callout timeout and tick, or a test's own wait, are such timers,
// and on a loaded machine (or with other work holding every P) they fire
// that much after their time.
type Meter struct {
	worst  atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

// Start starts a Meter.
func Start() *Meter {
	ctx, cancel := context.WithCancel(context.Background())
	m := &Meter{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			t0 := time.Now()
			time.Sleep(Tick)
			if d := time.Since(t0) - Tick; d > time.Duration(m.worst.Load()) {
				m.worst.Store(int64(d))
			}
		}
	}()
	return m
}

// Late is the most a timer fired late so far.
func (m *Meter) Late() time.Duration { return time.Duration(m.worst.Load()) }

// Stop ends the measure; Late keeps its figure.
func (m *Meter) Stop() {
	m.cancel()
	<-m.done
}

// Measure is how late a 10 ms timer fires at most over d, now.
func Measure(d time.Duration) time.Duration {
	m := Start()
	time.Sleep(d)
	m.Stop()
	return m.Late()
}

// Widen is bound for a machine whose timers fire up to late late, along a
// path of steps timers or calls one after the other: each may be that late.
func Widen(bound, late time.Duration, steps int) time.Duration {
	return bound + time.Duration(steps)*late
}

// Note is what a failure adds about the machine.
func Note(late time.Duration, what string) string {
	return fmt.Sprintf("(the machine's timers fired up to %v late during the run; %s)", late.Round(time.Millisecond), what)
}
