package lbcore

import (
	"encoding/binary"
	"errors"
	"strconv"
	"time"
)

// LoadBoard shares active request counts between the workers of one proxy.
// Each worker (Wasm VM) owns one slot, "<namespace>/a/<n>" for n in
// [0, MaxSlots), and publishes its own counts there with a heartbeat; every
// worker adds the fresh slots of the others to its own exact counts. A slot
// whose heartbeat is older than slotTTL is ignored and may be taken over, so
// the counts of a VM that died never leak.
//
// Publishing once per tick (a second) instead of on every request costs one
// Get and one Set per worker per second instead of two CAS writes per
// request; other workers' requests are seen up to a tick late, the worker's
// own at once.
type LoadBoard struct {
	store  Store
	prefix string
	marker string
	ids    []uint64       // service identities, in Config.Services order
	index  map[uint64]int // identity → position
	me     uint64         // this worker's identity (non-zero)
	slot   int            // owned slot, -1 when none
	buf    []byte
	others []int64
	keys   []string // keys[n] is slot n's key, made at its first use
}

// MaxSlots bounds the workers that share counts; slotTTL is how long a slot
// counts without a heartbeat.
const (
	MaxSlots = 64
	slotTTL  = 5 * time.Second
)

// NewLoadBoard returns the board of the given services under namespace in s.
// me identifies this worker (for example a random number drawn at start).
func NewLoadBoard(s Store, namespace string, services []Service, me uint64) *LoadBoard {
	b := &LoadBoard{store: s, prefix: namespace + "/a/", marker: namespace + "/a/c", me: me | 1, slot: -1,
		others: make([]int64, len(services)), index: make(map[uint64]int, len(services))}
	for i, svc := range services {
		b.ids = append(b.ids, svc.ID)
		b.index[svc.ID] = i
	}
	return b
}

// slot value: version 1 | owner uint64 | heartbeat unix ms int64 | n uint32 |
// n × (service id uint64, count uint32), little-endian.
const (
	slotOwnerAt = 1               // owner's offset
	slotBeatAt  = slotOwnerAt + 8 // heartbeat's offset
	slotCountAt = slotBeatAt + 8  // n's offset
	slotHeader  = slotCountAt + 4 // where the entries start
	slotEntry   = 8 + 4           // one entry: service id, count
)

// key is slot n's key, made once: the tick reads slots every second.
func (b *LoadBoard) key(n int) string {
	for len(b.keys) <= n {
		b.keys = append(b.keys, b.prefix+strconv.Itoa(len(b.keys)))
	}
	return b.keys[n]
}

func (b *LoadBoard) encode(now time.Time, own []int64) []byte {
	v := append(b.buf[:0], 1)
	v = binary.LittleEndian.AppendUint64(v, b.me)
	v = binary.LittleEndian.AppendUint64(v, uint64(now.UnixMilli()))
	v = binary.LittleEndian.AppendUint32(v, uint32(len(b.ids)))
	for i, id := range b.ids {
		v = binary.LittleEndian.AppendUint64(v, id)
		v = binary.LittleEndian.AppendUint32(v, uint32(max(own[i], 0)))
	}
	b.buf = v
	return v
}

// slotOwner reads a slot's owner and heartbeat; ok is false for a value of
// another shape.
func slotOwner(v []byte) (owner uint64, beat time.Time, ok bool) {
	if len(v) < slotHeader || v[0] != 1 {
		return 0, time.Time{}, false
	}
	return binary.LittleEndian.Uint64(v[slotOwnerAt:]), time.UnixMilli(int64(binary.LittleEndian.Uint64(v[slotBeatAt:]))), true
}

// Publish writes this worker's counts (own, in service order) with a fresh
// heartbeat, claiming a slot first if it holds none or lost its slot. It
// reports whether the counts were published.
func (b *LoadBoard) Publish(now time.Time, own []int64) bool {
	if b.slot >= 0 {
		v, cas, err := b.store.Get(b.key(b.slot))
		if owner, _, ok := slotOwner(v); err == nil && ok && owner == b.me {
			return b.store.Set(b.key(b.slot), b.encode(now, own), cas) == nil
		}
		b.slot = -1 // taken over while this worker stalled: claim another
	}
	for n := 0; n < MaxSlots; n++ {
		v, cas, err := b.store.Get(b.key(n))
		switch {
		case errors.Is(err, ErrNotFound):
			if createKey(b.store, b.marker, b.key(n), b.encode(now, own)) == nil {
				b.slot = n
				return true
			}
		case err != nil:
			return false
		default:
			if _, beat, ok := slotOwner(v); !ok || now.Sub(beat) > slotTTL {
				if b.store.Set(b.key(n), b.encode(now, own), cas) == nil {
					b.slot = n
					return true
				}
			}
		}
	}
	return false
}

// Refresh republishes this worker's counts in the slot it holds, and claims
// none: it reports false when the worker holds no slot (it never published),
// so that a caller wanting the counts seen at once passes them on itself.
func (b *LoadBoard) Refresh(now time.Time, own []int64) bool {
	if b.slot < 0 {
		return false
	}
	return b.Publish(now, own)
}

// Release gives up this worker's slot: its counts stop counting at once
// (the heartbeat reads as expired) and the slot may be taken over. A plugin
// context calls it when it goes away (proxy_on_done), after its last
// request ended.
func (b *LoadBoard) Release() {
	if b.slot < 0 {
		return
	}
	v, cas, err := b.store.Get(b.key(b.slot))
	if owner, _, ok := slotOwner(v); err == nil && ok && owner == b.me {
		b.store.Set(b.key(b.slot), b.encode(time.UnixMilli(0), make([]int64, len(b.ids))), cas)
	}
	b.slot = -1
}

// Others returns the summed counts of every other worker's fresh slot, in
// service order. The slice is reused by the next call.
func (b *LoadBoard) Others(now time.Time) []int64 {
	clear(b.others)
	for n := 0; n < MaxSlots; n++ {
		v, _, err := b.store.Get(b.key(n))
		if errors.Is(err, ErrNotFound) {
			break // slots are claimed lowest first and never deleted
		}
		owner, beat, ok := slotOwner(v)
		if err != nil || !ok || owner == b.me || now.Sub(beat) > slotTTL {
			continue
		}
		count := int(binary.LittleEndian.Uint32(v[slotCountAt:]))
		for j, p := 0, slotHeader; j < count && p+slotEntry <= len(v); j, p = j+1, p+slotEntry {
			// By identity, so a worker still on the previous configuration
			// during a reload adds its counts to the right services.
			if i, known := b.index[binary.LittleEndian.Uint64(v[p:])]; known {
				b.others[i] += int64(binary.LittleEndian.Uint32(v[p+8:]))
			}
		}
	}
	return b.others
}
