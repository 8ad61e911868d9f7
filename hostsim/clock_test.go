package hostsim

import (
	"strconv"
	"testing"
	"time"
)

func TestVirtualClockTicks(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := newHost(t, "basic", Config{Workers: 2, PluginConfig: []byte("tick=5000"), Start: start})
	ticks := func() int { return countPrefix(h.LogsAt(LogInfo), "tick ") }
	h.Advance(4 * time.Second)
	if n := ticks(); n != 0 {
		t.Fatalf("ticks after 4s = %d, want 0", n)
	}
	h.Advance(time.Second)
	if n := ticks(); n != 2 {
		t.Fatalf("ticks after 5s = %d, want 2 (one per worker)", n)
	}
	h.Advance(7 * 24 * time.Hour) // a long jump fires each timer once
	if n := ticks(); n != 4 {
		t.Fatalf("ticks after 7 days = %d, want 4", n)
	}
	want := "tick " + strconv.FormatInt(start.Add(7*24*time.Hour+5*time.Second).Unix(), 10)
	if got := h.LogsAt(LogInfo); got[len(got)-1] != want {
		t.Fatalf("last tick = %q, want %q (module reads the virtual clock)", got[len(got)-1], want)
	}
	if got := h.Now(); !got.Equal(start.Add(7*24*time.Hour + 5*time.Second)) {
		t.Fatalf("Now() = %v", got)
	}
}

func countPrefix(ss []string, p string) int {
	n := 0
	for _, s := range ss {
		if len(s) >= len(p) && s[:len(p)] == p {
			n++
		}
	}
	return n
}

// TestAdvanceWaitsForRunningCalls: Advance never lands inside a guest call.
func TestAdvanceWaitsForRunningCalls(t *testing.T) {
	h := newHost(t, "basic", Config{Workers: 2})
	done := make(chan bool)
	go func() {
		for i := 0; i < 200; i++ {
			h.Advance(time.Hour)
		}
		close(done)
	}()
	for i := 0; ; i++ {
		select {
		case <-done:
			return
		default:
		}
		s := h.Stream(i % 2)
		if res := s.RequestHeaders(req("/"), nil); res.Err != nil {
			t.Fatal(res.Err)
		}
		s.Finish()
	}
}
