package abi

import (
	"testing"
	"time"
)

// A worker yields once every yieldEvery while its entries into Go come
// densely, and never while they come sparsely (the choice cache serving
// it): the rule that keeps sysmon from taking its P back without putting a
// hand-off on the requests of a worker that would lose its P anyway.
func TestEntriesYield(t *testing.T) {
	start := time.Unix(1000, 0)
	for _, c := range []struct {
		name  string
		every time.Duration
		n     int
		want  int
	}{
		{"an entry every 100 µs for 80 ms", 100 * time.Microsecond, 800, 10},
		{"an entry every 7 ms for 700 ms", 7 * time.Millisecond, 100, 50},
		{"an entry every 9 ms for 900 ms", 9 * time.Millisecond, 100, 0},
		{"an entry every 50 ms", 50 * time.Millisecond, 40, 0},
	} {
		var e entries
		for i := range c.n {
			e.enter(start.Add(time.Duration(i) * c.every))
		}
		if e.yields != c.want {
			t.Errorf("%s: %d yields, want %d", c.name, e.yields, c.want)
		}
	}
}
