package lbcore

import (
	"testing"
	"time"
)

func TestActiveThresholds(t *testing.T) {
	h := &HealthCheck{HealthyThreshold: 2, UnhealthyThreshold: 3}
	var s ServiceHealth
	steps := []struct {
		ok          bool
		wantDown    bool
		wantChanged bool
	}{
		{false, false, false}, {false, false, false}, {true, false, false}, // a success resets the streak
		{false, false, false}, {false, false, false}, {false, true, true}, // three in a row: DOWN
		{true, true, false}, {false, true, false}, {true, true, false}, {true, false, true}, // two good in a row: UP
	}
	for i, st := range steps {
		changed := h.Probe(&s, st.ok)
		if s.Down != st.wantDown || changed != st.wantChanged {
			t.Fatalf("step %d Probe(%v): down %v changed %v, want %v %v", i, st.ok, s.Down, changed, st.wantDown, st.wantChanged)
		}
	}
}

func TestPassiveEjection(t *testing.T) {
	p := &PassiveHealth{ConsecutiveFailures: 3, EjectionTime: 30 * time.Second}
	var s ServiceHealth
	now := epoch
	for i := 0; i < 2; i++ {
		if p.Response(&s, true, now) {
			t.Fatalf("ejected after %d failures, want 3", i+1)
		}
	}
	p.Response(&s, false, now) // a success in between resets the count
	for i := 0; i < 2; i++ {
		p.Response(&s, true, now)
	}
	if !p.Response(&s, true, now) || s.Selectable(now) {
		t.Fatal("three consecutive failures did not eject the service")
	}
	if s.Selectable(now.Add(29 * time.Second)) {
		t.Error("selectable again before the ejection time")
	}
	if !s.Selectable(now.Add(30 * time.Second)) {
		t.Error("not selectable after the ejection time")
	}
}

func TestHealthEncoding(t *testing.T) {
	in := ServiceHealth{Down: true, Streak: 2, Failures: 7, EjectedUntil: 1234567890123}
	out, ok := DecodeHealth(EncodeHealth(nil, &in))
	if !ok || out != in {
		t.Errorf("DecodeHealth(EncodeHealth(%+v)) = %+v, %v", in, out, ok)
	}
	for _, bad := range [][]byte{nil, {1}, {2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}} {
		if s, ok := DecodeHealth(bad); ok || !s.Selectable(epoch) {
			t.Errorf("DecodeHealth(%v) = %+v, %v; want a healthy default, false", bad, s, ok)
		}
	}
}

func TestUpdateHealthShared(t *testing.T) {
	st := NewMemStore()
	p := &PassiveHealth{ConsecutiveFailures: 4, EjectionTime: time.Minute}
	// Four workers each see one failure: the shared record ejects on the fourth.
	var ejected bool
	for w := 0; w < 4; w++ {
		UpdateHealth(st, "ns/h/x", func(s *ServiceHealth) { ejected = p.Response(s, true, epoch) })
	}
	s, _ := UpdateHealth(st, "ns/h/x", func(*ServiceHealth) {})
	if !ejected || s.Selectable(epoch) {
		t.Errorf("after 4 failures across workers: ejected %v, record %+v", ejected, s)
	}
}
