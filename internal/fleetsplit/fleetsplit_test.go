package fleetsplit

import (
	"testing"
	"time"
)

// A key split counts only between two proxies, two services and within a
// second, and only after from; the last such placement is reported.
func TestLast(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ps := []Placement{
		{at(0), "a", 0, "s1"},
		{at(100), "a", 1, "s2"}, // split: another proxy, another service, 100 ms later
		{at(200), "b", 0, "s1"},
		{at(1300), "b", 1, "s2"}, // over a second after b's first: no split
		{at(1400), "c", 0, "s1"},
		{at(1500), "c", 0, "s2"}, // the same proxy: no split
		{at(1600), "d", 0, "s1"},
		{at(1700), "d", 1, "s1"}, // the same service: no split
	}
	if last, ex := Last(ps, time.Time{}); !last.Equal(at(100)) || ex != "a: proxy 0 got s1, proxy 1 got s2 100ms later" {
		t.Errorf("Last = %v %q, want %v and key a's example", last, ex, at(100))
	}
	if last, ex := Last(ps, at(0)); !last.IsZero() || ex != "" {
		t.Errorf("Last after a's first placement = %v %q, want none", last, ex)
	}
}
