package lbcore

import (
	"strings"
	"testing"
)

// idServices is a services list with the given identities (all a board reads).
func idServices(ids ...uint64) []Service {
	out := make([]Service, len(ids))
	for i, id := range ids {
		out[i].ID = id
	}
	return out
}

// healthKeys counts the keys of namespace ns's health records and table.
func healthKeys(st *MemStore, ns string) int {
	n := 0
	st.Range(func(key string, _ []byte, _ uint32) bool {
		if strings.HasPrefix(key, ns+"/h/") {
			n++
		}
		return true
	})
	return n
}

// TestHealthSlotsBounded: 10^4 identities churned through configurations of
// 20 services (half of them replaced each time, two workers starting each)
// leave at most 20 slots plus the table, lease and marker; the identities
// that stay keep their records all along.
func TestHealthSlotsBounded(t *testing.T) {
	st := NewMemStore()
	const size, identities = 20, 10_000
	ids := make([]uint64, size)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	next := uint64(size + 1)
	b := NewHealthBoard(st, "ns", idServices(ids...), 2)
	b.Update(0, func(s *ServiceHealth) bool { s.Down = true; return true })
	seen, most := size, 0
	for seen < identities {
		for i := size / 2; i < size; i++ {
			ids[i], next = next, next+1
			seen++
		}
		var boards []*HealthBoard
		for w := 0; w < 2; w++ {
			boards = append(boards, NewHealthBoard(st, "ns", idServices(ids...), uint64(w*2+2)))
		}
		for i := size / 2; i < size; i++ {
			boards[0].Admit(i)
		}
		most = max(most, healthKeys(st, "ns"))
		if s := boards[1].Read(0); !s.Down {
			t.Fatalf("after %d identities: the service that stayed DOWN reads %+v", seen, s)
		}
		for i := 1; i < size; i++ {
			if s := boards[1].Read(i); s.Down != (i >= size/2) || s.Pending != (i >= size/2) {
				t.Fatalf("after %d identities: service %d reads %+v, want pending only for the new ones", seen, i, s)
			}
		}
	}
	t.Logf("%d identities through configurations of %d services: at most %d health keys in shared data", seen, size, most)
	if most > size+3 {
		t.Errorf("health keys reached %d, want at most %d (one slot per service, table, lease, marker)", most, size+3)
	}
}

// TestHealthSlotReused: a slot freed by a service that left and given to a
// new one is never read as the old service, and the old configuration's
// board (still draining) can no longer write it; a service that returns
// before its slot is reused gets its record back.
func TestHealthSlotReused(t *testing.T) {
	st := NewMemStore()
	old := NewHealthBoard(st, "ns", idServices(10, 11), 2)
	old.Update(1, func(s *ServiceHealth) bool { s.Down = true; return true })
	// 11 leaves, 12 joins in its slot.
	cur := NewHealthBoard(st, "ns", idServices(10, 12), 2)
	if cur.slots[1] != old.slots[1] {
		t.Fatalf("the new service took slot %d, want the freed slot %d", cur.slots[1], old.slots[1])
	}
	if s := cur.Read(1); s.Down {
		t.Fatalf("the new service reads the old one's record %+v", s)
	}
	if !cur.Admit(1) {
		t.Fatal("Admit wrote nothing in a reused slot")
	}
	if _, ok := old.Update(1, func(s *ServiceHealth) bool { s.Down = false; return true }); ok {
		t.Error("the old configuration wrote a slot given to another service")
	}
	if s := cur.Read(1); !s.Pending {
		t.Errorf("the new service's record after the old board's write: %+v, want Pending", s)
	}
	if s := old.Read(1); s.Pending || !s.Down {
		t.Errorf("the old board (draining) reads %+v; want its own last record, DOWN, not the new service's", s)
	}
	// 12 leaves and 11 returns: 11's slot went to 12, so 11 is a new service.
	back := NewHealthBoard(st, "ns", idServices(10, 11), 2)
	if s := back.Read(1); s.Down || s.Pending {
		t.Errorf("11, back after its slot was reused, reads %+v; want no record", s)
	}
	// 11 leaves and returns with nothing in between: its slot and record stay.
	back.Update(1, func(s *ServiceHealth) bool { s.Down = true; return true })
	NewHealthBoard(st, "ns", idServices(10), 2)
	again := NewHealthBoard(st, "ns", idServices(10, 11), 2)
	if s := again.Read(1); !s.Down {
		t.Errorf("11, back before its slot was reused, reads %+v; want its DOWN record", s)
	}
}

// TestHealthSlotsWorkersAgree: workers starting one configuration at once,
// with conflicting writes of the table between them, get the same slots.
func TestHealthSlotsWorkersAgree(t *testing.T) {
	st := NewMemStore()
	NewHealthBoard(st, "ns", idServices(1, 2, 3), 2)
	var other *HealthBoard
	raced := false
	st.BeforeSet = func(key string, _ []byte, _ uint32) {
		if key == "ns/h/t" && !raced {
			raced = true // the other worker writes between this one's Get and Set
			other = NewHealthBoard(st, "ns", idServices(1, 4, 3), 4)
		}
	}
	b := NewHealthBoard(st, "ns", idServices(1, 4, 3), 2)
	st.BeforeSet = nil
	if b.Err() != nil || other.Err() != nil {
		t.Fatalf("claims failed: %v, %v", b.Err(), other.Err())
	}
	for i := range b.slots {
		if b.slots[i] != other.slots[i] || b.gens[i] != other.gens[i] {
			t.Errorf("service %d: slot %d gen %d on one worker, %d gen %d on the other", i, b.slots[i], b.gens[i], other.slots[i], other.gens[i])
		}
	}
	b.Update(1, func(s *ServiceHealth) bool { s.Down = true; return true })
	if s := other.Read(1); !s.Down {
		t.Errorf("the other worker reads %+v, want the DOWN record", s)
	}
}

// TestSlotTableCorrupt: a table of another shape reads as empty, so every
// service reads as new; nothing panics.
func TestSlotTableCorrupt(t *testing.T) {
	for _, v := range [][]byte{nil, {1}, {2, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 0, 9, 0, 0, 0}, {1, 1, 0, 0, 0, 255, 255, 255, 255, 0}} {
		if tb := decodeSlotTable(v); len(tb.entries) != 0 || tb.next != 1 {
			t.Errorf("decodeSlotTable(%v) = %+v, want empty", v, tb)
		}
		st := NewMemStore()
		st.Set("ns/h/t", v, 0)
		b := NewHealthBoard(st, "ns", idServices(1), 2)
		if b.Err() != nil || b.Read(0).Down {
			t.Errorf("board over table %v: err %v, record %+v", v, b.Err(), b.Read(0))
		}
	}
}
