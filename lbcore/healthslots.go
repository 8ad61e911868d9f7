package lbcore

import (
	"encoding/binary"
	"errors"
)

// Health records live in slots, not under service identities: shared data
// cannot delete a key, and with the controller a service's identity is its
// pod's name, so a key per identity would grow with every pod the proxy ever
// saw. A plugin's slot table ("<namespace>/h/t") gives each identity of the
// configuration a slot ("<namespace>/h/<n>"); a configuration's start frees
// the slots of identities it lacks, and a new identity takes a free slot
// before the table grows. So a plugin holds at most as many slots as the
// largest services list it ever had, whatever the churn.
//
// A slot is claimed with a generation drawn from the table's counter, and
// its record carries the identity and generation it was written for: a
// reused slot whose record is still the previous owner's reads as no record
// (a new service), and a context holding a slot it lost (an older
// configuration still draining) can neither read nor write the new owner's
// record.

// slot table value: version 1 | next generation uint32 | n uint32 |
// n × (identity uint64, generation uint32, live byte), little-endian.
const (
	slotTableHeader = 1 + 4 + 4
	slotTableEntry  = 8 + 4 + 1
	// slotHead is what a slot's record carries before encodeHealth: the
	// identity and generation it was written for.
	slotHead = 8 + 4
	// slotAttempts bounds the table writes one configuration's start tries:
	// every attempt that conflicts is another worker's write that succeeded,
	// and after it the table usually needs nothing more.
	slotAttempts = 64
)

// healthSlot is one slot of the table.
type healthSlot struct {
	id   uint64
	gen  uint32
	live bool
}

// slotTable is the decoded table.
type slotTable struct {
	next    uint32
	entries []healthSlot
}

// decodeSlotTable reads a table; a value of any other shape reads as an
// empty table, so a corrupt one costs the records it indexed (every service
// reads as new), never a wrong record.
func decodeSlotTable(v []byte) slotTable {
	t := slotTable{next: 1}
	if len(v) < slotTableHeader || v[0] != 1 {
		return t
	}
	n := int(binary.LittleEndian.Uint32(v[5:]))
	if n > (len(v)-slotTableHeader)/slotTableEntry || len(v) != slotTableHeader+n*slotTableEntry {
		return t
	}
	t.next = binary.LittleEndian.Uint32(v[1:])
	t.entries = make([]healthSlot, n)
	for i := range t.entries {
		e := v[slotTableHeader+i*slotTableEntry:]
		t.entries[i] = healthSlot{binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint32(e[8:]), e[12] == 1}
	}
	return t
}

func (t *slotTable) encode() []byte {
	v := make([]byte, 0, slotTableHeader+len(t.entries)*slotTableEntry)
	v = append(v, 1)
	v = binary.LittleEndian.AppendUint32(v, t.next)
	v = binary.LittleEndian.AppendUint32(v, uint32(len(t.entries)))
	for _, e := range t.entries {
		live := byte(0)
		if e.live {
			live = 1
		}
		v = binary.LittleEndian.AppendUint64(v, e.id)
		v = binary.LittleEndian.AppendUint32(v, e.gen)
		v = append(v, live)
	}
	return v
}

// assign gives every identity of ids a live slot: the one it has (revived if
// it was freed and not reused, so its record is still its own), else the
// first free slot, else a new one at the end; the slots of identities ids
// lacks are freed. It reports whether the table changed.
func (t *slotTable) assign(ids []uint64) (slots []int, changed bool) {
	want := make(map[uint64]int, len(ids))
	for i, id := range ids {
		want[id] = i
	}
	slots = make([]int, len(ids))
	for i := range slots {
		slots[i] = -1
	}
	for n := range t.entries {
		e := &t.entries[n]
		i, live := want[e.id]
		if live {
			slots[i] = n
		}
		if live != e.live {
			e.live, changed = live, true
		}
	}
	free := 0
	for i, id := range ids {
		if slots[i] >= 0 {
			continue
		}
		for free < len(t.entries) && t.entries[free].live {
			free++
		}
		if free == len(t.entries) {
			t.entries = append(t.entries, healthSlot{})
		}
		t.entries[free] = healthSlot{id: id, gen: t.next, live: true}
		slots[i], changed = free, true
		if t.next++; t.next == 0 { // 0 marks no generation
			t.next = 1
		}
	}
	return slots, changed
}

// claimSlots assigns slots to ids in the table under key, writing it with
// CAS (created with createKey and marker), and returns each identity's slot
// and generation. It fails only when the store does, or when other writers
// won slotAttempts times in a row.
func claimSlots(st Store, key, marker string, ids []uint64) (slots []int, gens []uint32, err error) {
	for attempt := 0; attempt < slotAttempts; attempt++ {
		v, cas, gerr := st.Get(key)
		if gerr != nil && !errors.Is(gerr, ErrNotFound) {
			return nil, nil, gerr
		}
		t := decodeSlotTable(v)
		slots, changed := t.assign(ids)
		gens = make([]uint32, len(ids))
		for i, n := range slots {
			gens[i] = t.entries[n].gen
		}
		if !changed {
			return slots, gens, nil
		}
		if errors.Is(gerr, ErrNotFound) {
			err = createKey(st, marker, key, t.encode())
		} else {
			err = st.Set(key, t.encode(), cas)
		}
		if err == nil {
			return slots, gens, nil
		}
		if !errors.Is(err, ErrCASMismatch) {
			return nil, nil, err
		}
	}
	return nil, nil, ErrCASMismatch
}

// slotHeld reports whether the table under key still gives slot n to id
// with generation gen.
func slotHeld(st Store, key string, n int, id uint64, gen uint32) bool {
	v, _, err := st.Get(key)
	if err != nil || len(v) < slotTableHeader || v[0] != 1 {
		return false
	}
	at := slotTableHeader + n*slotTableEntry
	if int(binary.LittleEndian.Uint32(v[5:])) <= n || len(v) < at+slotTableEntry {
		return false
	}
	e := v[at:]
	return binary.LittleEndian.Uint64(e) == id && binary.LittleEndian.Uint32(e[8:]) == gen && e[12] == 1
}
