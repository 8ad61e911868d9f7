package e2e

// The persistence table's memory, measured by hostsim's shared-data
// accounting: through the module at 10,000 entries, and through lbcore's
// Table over hostsim's SharedData at the default 3,000,000.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/lbcore"
)

// bucketOf returns the bucket (of nb) and the stored fingerprint of a
// persistence key, as the table lays them out (lbcore/persist.go): the
// key's xxhash64 scaled to [0, nb), and that hash without its top bit.
func bucketOf(key []byte, nb int) (bucket int, fp uint64) {
	h := xxhash.Sum64(key)
	b, _ := bits.Mul64(h, uint64(nb))
	return int(b), max(h&^(1<<63), 1)
}

// TestPersistMemoryModule fills a 10,000-entry table through the module
// (keys chosen so that each lands in a bucket with room: exactly 10,000
// requests), checks the shared data it wrote (one key per bucket plus the
// creation marker, each bucket a version byte and 8 entries of fingerprint,
// service hash and last use) and measures bytes per entry from hostsim's
// accounting of cpp-host's shared data.
func TestPersistMemoryModule(t *testing.T) {
	const tableSize = 10000
	nb := tableSize / lbcore.Ways
	services := fourServices()
	h := lbHost(t, lbConfig(t, "ROUNDROBIN", persistence(map[string]any{"tableSize": tableSize}), services), 4)
	type key struct {
		id     string
		bucket int
		fp     uint64
	}
	count := make([]int, nb)
	var keys []key
	for i := 0; len(keys) < tableSize; i++ {
		id := "mem-" + strconv.Itoa(i)
		b, fp := bucketOf([]byte(id), nb)
		if count[b] < lbcore.Ways {
			count[b]++
			keys = append(keys, key{id, b, fp})
		}
	}
	// Four workers fill the table at once, racing to create buckets.
	svcOf := make([]string, len(keys))
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(keys) && errs[w] == nil; i += 4 {
				var rep persistReply
				rep, errs[w] = roundTrip(h, w, persistReq{id: keys[i].id})
				svcOf[i] = rep.service
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// The shared data: nb buckets and the marker, under the plugin's namespace.
	sd := h.SharedData()
	if got := sd.Len(); got != nb+1 {
		t.Fatalf("shared data has %d keys, want %d buckets + 1 marker", got, nb)
	}
	prefix := persistNamespace + "/p/"
	if _, _, ok := sd.Get(prefix + "c"); !ok {
		t.Errorf("no creation marker %sc", prefix)
	}
	addr := map[string]uint64{}
	for _, s := range services {
		addr[s.Name] = xxhash.Sum64String(s.Address)
	}
	now := uint32(h.Now().Unix())
	byBucket := map[int][]int{}
	for i, k := range keys {
		byBucket[k.bucket] = append(byBucket[k.bucket], i)
	}
	for b := range nb {
		val, _, ok := sd.Get(prefix + strconv.Itoa(b))
		if !ok || len(val) != 1+lbcore.Ways*lbcore.EntrySize || val[0] != 1 {
			t.Fatalf("bucket %d = %d bytes (found %v), want version 1 and %d full entries", b, len(val), ok, lbcore.Ways)
		}
		ents := map[uint64][2]uint64{} // fingerprint → service, last use
		for p := 1; p < len(val); p += lbcore.EntrySize {
			w := binary.LittleEndian.Uint64(val[p:])
			if w>>63 != 0 {
				t.Errorf("bucket %d: entry marked hot after one request", b)
			}
			ents[w&^(1<<63)] = [2]uint64{binary.LittleEndian.Uint64(val[p+8:]), uint64(binary.LittleEndian.Uint32(val[p+16:]))}
		}
		for _, i := range byBucket[b] {
			e, ok := ents[keys[i].fp]
			if !ok || e[0] != addr[svcOf[i]] || e[1] != uint64(now) {
				t.Errorf("key %s in bucket %d = %v (found %v), want service %s (%#x) last use %d",
					keys[i].id, b, e, ok, svcOf[i], addr[svcOf[i]], now)
			}
		}
	}

	bytes := sd.Bytes()
	got := float64(bytes) / tableSize
	want := lbcore.BytesPerEntry(tableSize, persistNamespace, hostsim.SharedDataEntryOverhead)
	t.Logf("tableSize %d: %d shared-data keys, %d bytes = %.2f bytes/entry (lbcore.BytesPerEntry %.2f)", tableSize, sd.Len(), bytes, got, want)
	if got != want || got > 48 {
		t.Errorf("bytes/entry = %.4f, want lbcore.BytesPerEntry's %.4f and ≤ 48", got, want)
	}

	// A new key in a full bucket evicts one entry: the table never grows.
	for i := 0; ; i++ {
		id := "more-" + strconv.Itoa(i)
		if b, _ := bucketOf([]byte(id), nb); b == keys[0].bucket {
			mustRoundTrip(t, h, 0, persistReq{id: id})
			break
		}
	}
	if sd.Len() != nb+1 || sd.Bytes() != bytes {
		t.Errorf("after one more key: %d keys, %d bytes; want %d, %d", sd.Len(), sd.Bytes(), nb+1, bytes)
	}
	// The counters last: the tick that gives the host the workers' counts
	// also writes the load board's keys into shared data and moves the clock.
	// Every bucket above held its 8 keys, so the fill evicted none.
	m := persistMetrics(h)
	t.Logf("filling and one more key: %v", m)
	if m["miss"] != tableSize+1 || m["evicted"] != 1 || m["cas_giveup"] != 0 {
		t.Errorf("metrics after the fill and one more key = %v, want %d misses, 1 eviction (the last key), no give-up", m, tableSize+1)
	}
}

// sharedStore is lbcore.Store over hostsim's SharedData, the store the
// module reaches through proxy_get_shared_data / proxy_set_shared_data.
type sharedStore struct{ d *hostsim.SharedData }

func (s sharedStore) Get(key string) ([]byte, uint32, error) {
	v, cas, ok := s.d.Get(key)
	if !ok {
		return nil, 0, lbcore.ErrNotFound
	}
	return v, cas, nil
}

func (s sharedStore) Set(key string, value []byte, cas uint32) error {
	// The Table's key aliases a buffer it reuses, and SharedData keeps the
	// key string it is given: copy it, as the host copies it out of the VM.
	switch st := s.d.Set(strings.Clone(key), value, cas); st {
	case 0:
		return nil
	case 8:
		return lbcore.ErrCASMismatch
	default:
		return fmt.Errorf("proxy_set_shared_data: status %d", st)
	}
}

// TestPersistMemory3M fills a 3,000,000-entry table (the default tableSize)
// through lbcore.Table on hostsim's SharedData and reports bytes per entry
// from hostsim's accounting: goal ≤ 48.
func TestPersistMemory3M(t *testing.T) {
	const tableSize = 3000000
	nb := tableSize / lbcore.Ways
	sd := hostsim.NewSharedData()
	tb := lbcore.NewTable(sharedStore{sd}, persistNamespace, tableSize, 7*24*time.Hour)
	if tb.Capacity() != tableSize {
		t.Fatalf("Capacity() = %d, want %d", tb.Capacity(), tableSize)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ids := []uint64{xxhash.Sum64String("10.0.0.11:8080"), xxhash.Sum64String("10.0.0.12:8080")}
	count := make([]uint8, nb)
	var key []byte
	filled := 0
	for i := 0; filled < tableSize; i++ {
		key = strconv.AppendInt(append(key[:0], "client-"...), int64(i), 10)
		b, _ := bucketOf(key, nb)
		if count[b] == lbcore.Ways {
			continue // only keys with room: the fill takes exactly tableSize inserts
		}
		count[b]++
		filled++
		svc := ids[i%2]
		_, _, out := tb.Resolve(key, now, func(uint64) bool { return true }, func() (uint64, bool) { return svc, true })
		if !out.Miss || out.Evicted != 0 || out.GaveUp {
			t.Fatalf("Resolve(%s) outcome %+v, want a plain miss", key, out)
		}
	}
	if got := sd.Len(); got != nb+1 {
		t.Fatalf("shared data has %d keys, want %d buckets + marker", got, nb+1)
	}
	bytes := sd.Bytes()
	got := float64(bytes) / tableSize
	want := lbcore.BytesPerEntry(tableSize, persistNamespace, hostsim.SharedDataEntryOverhead)
	t.Logf("tableSize %d: %d shared-data keys, %d bytes (%d per key overhead) = %.2f bytes/entry (lbcore.BytesPerEntry %.2f)",
		tableSize, sd.Len(), bytes, hostsim.SharedDataEntryOverhead, got, want)
	if got > 48 {
		t.Errorf("bytes/entry = %.2f, want ≤ 48", got)
	}
	if got != want {
		t.Errorf("bytes/entry = %.4f, lbcore.BytesPerEntry says %.4f", got, want)
	}
	// Full: one more key evicts and the memory stays the same.
	_, _, out := tb.Resolve([]byte("one-more"), now, func(uint64) bool { return true }, func() (uint64, bool) { return ids[0], true })
	if out.Evicted != 1 || sd.Len() != nb+1 || sd.Bytes() != bytes {
		t.Errorf("one more key: evicted %d, %d keys, %d bytes; want 1, %d, %d", out.Evicted, sd.Len(), sd.Bytes(), nb+1, bytes)
	}
}
