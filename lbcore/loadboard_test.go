package lbcore

import (
	"slices"
	"testing"
	"time"
)

func TestLoadBoardSharesCounts(t *testing.T) {
	c := mustConfig(t, pool("LEASTCONNECTION", 3, ""))
	st := NewMemStore()
	w := []*LoadBoard{NewLoadBoard(st, "ns", c.Services, 1), NewLoadBoard(st, "ns", c.Services, 2), NewLoadBoard(st, "ns", c.Services, 3)}
	own := [][]int64{{1, 0, 0}, {0, 2, 0}, {0, 0, 3}}
	for i, b := range w {
		if !b.Publish(epoch, own[i]) {
			t.Fatalf("worker %d could not publish", i)
		}
	}
	if got := w[0].Others(epoch); !slices.Equal(got, []int64{0, 2, 3}) {
		t.Errorf("worker 0 sees others %v, want [0 2 3]", got)
	}
	// Worker 2 dies: after slotTTL its counts no longer count.
	later := epoch.Add(slotTTL + time.Second)
	w[0].Publish(later, own[0])
	w[1].Publish(later, own[1])
	if got := w[0].Others(later); !slices.Equal(got, []int64{0, 2, 0}) {
		t.Errorf("after worker 2 died, worker 0 sees %v, want [0 2 0]", got)
	}
	// A new worker takes the stale slot over instead of growing the table.
	fresh := NewLoadBoard(st, "ns", c.Services, 4)
	if !fresh.Publish(later, []int64{0, 0, 7}) || fresh.slot != 2 {
		t.Errorf("new worker claimed slot %d, want the stale slot 2", fresh.slot)
	}
	if got := w[0].Others(later); !slices.Equal(got, []int64{0, 2, 7}) {
		t.Errorf("worker 0 sees %v, want [0 2 7]", got)
	}
	// The stalled worker notices it lost its slot and claims another.
	w[2].Publish(later, own[2])
	if w[2].slot == 2 || w[2].slot < 0 {
		t.Errorf("stalled worker kept slot %d", w[2].slot)
	}
}

func TestLoadBoardByIdentity(t *testing.T) {
	old := mustConfig(t, pool("LEASTCONNECTION", 3, ""))
	// The new configuration drops s0: counts follow identities, not positions.
	next := *old
	next.Services = old.Services[1:]
	st := NewMemStore()
	NewLoadBoard(st, "ns", old.Services, 1).Publish(epoch, []int64{5, 6, 7})
	if got := NewLoadBoard(st, "ns", next.Services, 2).Others(epoch); !slices.Equal(got, []int64{6, 7}) {
		t.Errorf("counts across a reload = %v, want [6 7]", got)
	}
}

// TestLoadBoardRelease: a plugin context that goes away stops counting at
// once, and a new one takes its slot.
func TestLoadBoardRelease(t *testing.T) {
	c := mustConfig(t, pool("LEASTCONNECTION", 2, ""))
	st := NewMemStore()
	old, next := NewLoadBoard(st, "ns", c.Services, 1), NewLoadBoard(st, "ns", c.Services, 2)
	old.Publish(epoch, []int64{4, 1})
	if got := next.Others(epoch); !slices.Equal(got, []int64{4, 1}) {
		t.Fatalf("Others while the old context drains = %v, want [4 1]", got)
	}
	old.Release()
	if got := next.Others(epoch); !slices.Equal(got, []int64{0, 0}) {
		t.Errorf("Others after Release = %v, want [0 0]", got)
	}
	if !next.Publish(epoch, []int64{1, 1}) || next.slot != 0 {
		t.Errorf("after Release the new context claimed slot %d, want the released slot 0", next.slot)
	}
}

// TestLoadBoardRefresh: Refresh updates a held slot and never claims one.
func TestLoadBoardRefresh(t *testing.T) {
	c := mustConfig(t, pool("LEASTCONNECTION", 2, ""))
	st := NewMemStore()
	b, other := NewLoadBoard(st, "ns", c.Services, 1), NewLoadBoard(st, "ns", c.Services, 2)
	if b.Refresh(epoch, []int64{1, 1}) || st.Len() != 0 {
		t.Fatalf("Refresh without a slot wrote %d keys, want none", st.Len())
	}
	b.Publish(epoch, []int64{1, 1})
	if !b.Refresh(epoch, []int64{3, 0}) {
		t.Fatal("Refresh of a held slot failed")
	}
	if got := other.Others(epoch); !slices.Equal(got, []int64{3, 0}) {
		t.Errorf("Others after Refresh = %v, want [3 0]", got)
	}
}
