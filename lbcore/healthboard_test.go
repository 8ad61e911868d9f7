package lbcore

import (
	"testing"
	"time"
)

func healthBoards(t *testing.T, n int) []*HealthBoard {
	t.Helper()
	c := mustConfig(t, pool("URLHASH", 3, ""))
	st := NewMemStore()
	var bs []*HealthBoard
	for w := 0; w < n; w++ {
		bs = append(bs, NewHealthBoard(st, "ns", c.Services, uint64(w*2+2)))
	}
	return bs
}

// TestProbeLease: one worker at a time probes; the holder renews its lease,
// and another worker takes it over only once it has run out (1.5 rounds).
func TestProbeLease(t *testing.T) {
	w := healthBoards(t, 2)
	round := 5 * time.Second
	if !w[0].TakeLease(epoch, round) {
		t.Fatal("worker 0 could not take a free lease")
	}
	if w[1].TakeLease(epoch.Add(time.Second), round) {
		t.Fatal("worker 1 took a lease worker 0 holds")
	}
	if !w[0].TakeLease(epoch.Add(round), round) {
		t.Fatal("worker 0 could not renew its own lease")
	}
	if w[1].TakeLease(epoch.Add(round+7*time.Second), round) {
		t.Fatal("worker 1 took the renewed lease before it ran out")
	}
	if !w[1].TakeLease(epoch.Add(round+round+round/2), round) {
		t.Fatal("worker 1 could not take a lease that ran out (its holder died)")
	}
	if w[0].TakeLease(epoch.Add(3*round), round) {
		t.Fatal("worker 0 took the lease back while worker 1 holds it")
	}
}

// TestEjectionEndsOnce: every worker sees an ejection run out, but only one
// clears it, so its end is logged and counted once.
func TestEjectionEndsOnce(t *testing.T) {
	w := healthBoards(t, 4)
	p := &PassiveHealth{ConsecutiveFailures: 1, EjectionTime: 30 * time.Second}
	c, ok := w[0].Update(1, func(s *ServiceHealth) bool { return p.response(s, true, epoch) })
	if !ok || c.Transition(epoch) != Ejected {
		t.Fatalf("Update = %+v, %v; want an ejection", c, ok)
	}
	for i, b := range w {
		if _, ended := b.EndEjection(1, epoch.Add(29*time.Second)); ended {
			t.Fatalf("worker %d ended the ejection early", i)
		}
	}
	ends := 0
	at := epoch.Add(30 * time.Second)
	for _, b := range w {
		if c, ended := b.EndEjection(1, at); ended {
			ends++
			if got := c.Transition(at); got != CameBack {
				t.Errorf("end of ejection: transition %v, want CameBack", got)
			}
		}
	}
	if ends != 1 {
		t.Errorf("the ejection ended %d times, want once", ends)
	}
	if s := w[3].Read(1); s.EjectedUntil != 0 || !s.Selectable(at) {
		t.Errorf("record after the end: %+v", s)
	}
}

func TestTransitions(t *testing.T) {
	now := epoch
	later := now.Add(time.Minute).UnixMilli()
	tests := []struct {
		name          string
		before, after ServiceHealth
		changed       bool
		want          Transition
	}{
		{"unchanged", ServiceHealth{}, ServiceHealth{Failures: 1}, false, NoTransition},
		{"down", ServiceHealth{}, ServiceHealth{Down: true}, true, WentDown},
		{"ejected", ServiceHealth{}, ServiceHealth{EjectedUntil: later}, true, Ejected},
		{"up", ServiceHealth{Down: true}, ServiceHealth{}, true, CameBack},
		{"up while ejected", ServiceHealth{Down: true, EjectedUntil: later}, ServiceHealth{EjectedUntil: later}, true, PassedStillEjected},
		{"ejection ended", ServiceHealth{EjectedUntil: now.UnixMilli()}, ServiceHealth{}, true, CameBack},
		{"ejection ended, still down", ServiceHealth{Down: true, EjectedUntil: now.UnixMilli()}, ServiceHealth{Down: true}, true, EjectionEndedStillDown},
		{"down while ejected", ServiceHealth{EjectedUntil: later}, ServiceHealth{Down: true, EjectedUntil: later}, true, WentDown},
	}
	for _, tt := range tests {
		c := Change{tt.before, tt.after, tt.changed}
		if got := c.Transition(now); got != tt.want {
			t.Errorf("%s: Transition() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestPassiveClassification: failure statuses count; any other 5xx counts
// only when Envoy answered it because the upstream connection failed, and
// the connection is looked at only for a 5xx.
func TestPassiveClassification(t *testing.T) {
	c := mustConfig(t, pool("URLHASH", 2, `"passiveHealth":{"failureStatuses":"502-504"}`))
	p := c.PassiveHealth
	tests := []struct {
		status     int
		connFailed bool
		want       bool
		asked      bool
	}{
		{200, true, false, false}, {404, true, false, false}, {503, false, true, false},
		{500, false, false, true}, {500, true, true, true}, {599, true, true, true},
	}
	for _, tt := range tests {
		asked := false
		got := p.Failed(tt.status, func() bool { asked = true; return tt.connFailed })
		if got != tt.want || asked && !tt.asked {
			t.Errorf("Failed(%d, connection failed %v) = %v (asked %v), want %v (ask only for 5xx)", tt.status, tt.connFailed, got, asked, tt.want)
		}
	}
}

// TestLastServiceNeverEjected: the last selectable service's failures
// restart instead of ejecting it; with another selectable service it is
// ejected as usual.
func TestLastServiceNeverEjected(t *testing.T) {
	c := mustConfig(t, pool("URLHASH", 2, `"passiveHealth":{"consecutiveFailures":2}`))
	b := NewBalancer(c, 1)
	p := c.PassiveHealth
	b.SetDown(1, true)
	if !b.OnlySelectable(0) || b.OnlySelectable(1) {
		t.Fatalf("OnlySelectable(0, 1) = %v, %v with service 1 DOWN, want true, false", b.OnlySelectable(0), b.OnlySelectable(1))
	}
	var s ServiceHealth
	for k := 0; k < 10; k++ {
		if p.Observe(&s, true, b.OnlySelectable(0), epoch) {
			t.Fatalf("failure %d ejected the last selectable service", k+1)
		}
	}
	b.SetDown(1, false)
	p.Observe(&s, true, b.OnlySelectable(0), epoch)
	if !p.Observe(&s, true, b.OnlySelectable(0), epoch) {
		t.Error("two failures in a row did not eject a service that has company")
	}
}

// TestAdmitPending: a service a reconfiguration adds is DOWN until its first
// probe, which alone decides (Envoy's first health check of a new host); a
// service that already has a record keeps it.
func TestAdmitPending(t *testing.T) {
	hc := &HealthCheck{HealthyThreshold: 2, UnhealthyThreshold: 3}
	tests := []struct {
		name       string
		before     *ServiceHealth // nil: no record
		probes     []bool
		wantAdmit  bool
		wantUp     bool
		wantChange int // transitions the probes made
	}{
		{name: "new service, first probe good: UP at once", probes: []bool{true}, wantAdmit: true, wantUp: true, wantChange: 1},
		{name: "new service, no probe yet: DOWN", wantAdmit: true, wantUp: false},
		{name: "new service, first probe failed: DOWN, then the healthy threshold", probes: []bool{false, true}, wantAdmit: true, wantUp: false},
		{name: "new service, first probe failed, then two good ones", probes: []bool{false, true, true}, wantAdmit: true, wantUp: true, wantChange: 1},
		{name: "known UP service keeps its record", before: &ServiceHealth{}, wantUp: true},
		{name: "known DOWN service keeps its record", before: &ServiceHealth{Down: true}, probes: []bool{true}, wantUp: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := healthBoards(t, 2)
			if tc.before != nil {
				b[0].Update(1, func(s *ServiceHealth) bool { *s = *tc.before; return false })
			}
			if got := b[0].Admit(1); got != tc.wantAdmit {
				t.Fatalf("Admit(1) = %v, want %v", got, tc.wantAdmit)
			}
			if b[1].Admit(1) {
				t.Error("a second worker's Admit(1) wrote again")
			}
			changes := 0
			for _, ok := range tc.probes {
				if c, _ := b[1].Update(1, func(s *ServiceHealth) bool { return hc.Probe(s, ok) }); c.Changed {
					changes++
				}
			}
			s := b[0].Read(1)
			if s.Selectable(epoch) != tc.wantUp || changes != tc.wantChange {
				t.Errorf("after probes %v: selectable %v with %d transitions (%+v), want %v with %d", tc.probes, s.Selectable(epoch), changes, s, tc.wantUp, tc.wantChange)
			}
			if got := b[0].Read(0); !got.Selectable(epoch) {
				t.Errorf("service 0 (not admitted) reads %+v, want UP", got)
			}
		})
	}
}
