package lbcore

import (
	"errors"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"
)

func TestMemStoreSemantics(t *testing.T) {
	s := NewMemStore()
	if _, _, err := s.Get("k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(missing) err = %v, want ErrNotFound", err)
	}
	steps := []struct {
		name    string
		key     string
		value   string
		cas     func(cur uint32) uint32 // the cas to pass, given k's current one
		wantErr error
	}{
		{"set on a missing key writes whatever the cas", "k", "v1", func(uint32) uint32 { return 12345 }, nil},
		{"cas 0 always writes", "k", "v2", func(uint32) uint32 { return 0 }, nil},
		{"stale cas fails", "k", "v3", func(c uint32) uint32 { return c + 1 }, ErrCASMismatch},
		{"current cas writes", "k", "v4", func(c uint32) uint32 { return c }, nil},
	}
	want, last := "", uint32(0)
	for _, st := range steps {
		_, cur, _ := s.Get(st.key)
		if err := s.Set(st.key, []byte(st.value), st.cas(cur)); err != st.wantErr {
			t.Errorf("%s: Set err = %v, want %v", st.name, err, st.wantErr)
		}
		if st.wantErr == nil {
			want = st.value
		}
		v, c, err := s.Get(st.key)
		if string(v) != want || err != nil {
			t.Errorf("%s: Get = %q, %v, want %q", st.name, v, err, want)
		}
		if st.wantErr == nil && c <= last {
			t.Errorf("%s: cas %d after %d, want a new, larger one", st.name, c, last)
		}
		last = c
	}
	// One counter for every key: another key's write takes the next cas.
	s.Set("other", nil, 0)
	if _, c, _ := s.Get("other"); c != last+1 {
		t.Errorf("cas of another key's write = %d, want %d", c, last+1)
	}
	// The counter skips 0 when it wraps.
	s.SetNextCAS(math.MaxUint32)
	s.Set("a", nil, 0)
	s.Set("b", nil, 0)
	_, ca, _ := s.Get("a")
	_, cb, _ := s.Get("b")
	if ca != math.MaxUint32 || cb != 1 {
		t.Errorf("cas across the wrap = %d, %d, want %d, 1", ca, cb, uint32(math.MaxUint32))
	}
}

func TestMemStoreCopiesKeys(t *testing.T) {
	s := NewMemStore()
	buf := []byte("key1")
	k := unsafe.String(unsafe.SliceData(buf), len(buf))
	s.Set(k, []byte("a"), 0)
	s.Set(k, []byte("b"), 0) // an update must not store the aliasing key either
	buf[3] = '2'
	if v, _, err := s.Get("key1"); err != nil || string(v) != "b" {
		t.Errorf(`Get("key1") = %q, %v after the caller reused its buffer, want "b"`, v, err)
	}
	if s.Len() != 1 {
		t.Errorf("Len() = %d, want 1", s.Len())
	}
}

// TestPersistCreateRace replays the race CAS cannot guard in the host: worker
// A finds a bucket missing, and before A writes it, worker B creates the
// bucket and stores mappings in it. A late blind write by A would wipe them.
func TestPersistCreateRace(t *testing.T) {
	tests := []struct {
		name  string
		bKeys []string // what B stores while A is between its Get and Set
	}{
		{"same key", []string{"k"}},
		{"other keys of the bucket", []string{"x", "y"}},
		{"same key after others", []string{"x", "y", "k"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewMemStore()
			a := NewTable(s, "ns", Ways, time.Hour) // one bucket
			b := NewTable(s, "ns", Ways, time.Hour)
			armed := true
			s.BeforeSet = func(key string, _ []byte, _ uint32) {
				if !armed || key != "ns/p/0" {
					return
				}
				armed = false
				cb := &chooser{svc: 2}
				for _, k := range tt.bKeys {
					b.Resolve([]byte(k), t0, selectAll, cb.choose)
				}
			}
			ca := &chooser{svc: 1}
			svc, _, out := a.Resolve([]byte("k"), t0, selectAll, ca.choose)
			wantSvc := uint64(1)
			if slices.Contains(tt.bKeys, "k") {
				wantSvc = 2 // B stored k first: A must serve B's mapping
			}
			if svc != wantSvc || out.CASRetries != 1 || out.GaveUp || ca.calls != 1 {
				t.Errorf("A: Resolve = %d, %+v, %d choose calls; want %d, 1 retry, 1 call", svc, out, ca.calls, wantSvc)
			}
			for _, k := range append(tt.bKeys, "k") {
				e, ok := stored(s, a, k)
				want := uint64(2)
				if k == "k" {
					want = wantSvc
				}
				if !ok || e.svc != want {
					t.Errorf("stored(%q) = %d, %v, want %d", k, e.svc, ok, want)
				}
			}
		})
	}
}

// resolveAll runs workers goroutines, each with its own Table on s, that
// resolve keys (in an order of their own) with a chooser of their own, and
// returns what each got per key and which Resolves gave up. Every Set yields
// first, so workers interleave between their Gets and Sets as much as they
// can.
func resolveAll(s *MemStore, ns string, tableSize, workers int, keys []string) (got [][]uint64, gave [][]bool) {
	s.BeforeSet = func(string, []byte, uint32) { runtime.Gosched() }
	defer func() { s.BeforeSet = nil }()
	got, gave = make([][]uint64, workers), make([][]bool, workers)
	var start, done sync.WaitGroup
	start.Add(1)
	for w := range workers {
		got[w], gave[w] = make([]uint64, len(keys)), make([]bool, len(keys))
		done.Add(1)
		go func() {
			defer done.Done()
			tb := NewTable(s, ns, tableSize, time.Hour)
			c := &chooser{svc: uint64(w + 1)}
			start.Wait()
			for j := range keys {
				i := (j + w) % len(keys)
				svc, _, out := tb.Resolve([]byte(keys[i]), t0, selectAll, c.choose)
				got[w][i], gave[w][i] = svc, out.GaveUp
			}
		}()
	}
	start.Done()
	done.Wait()
	return got, gave
}

// checkAgree fails unless every worker got the service stored for each key,
// Resolves that gave up aside (they serve without persisting). It returns how
// many Resolves gave up and how many of those disagree.
func checkAgree(t *testing.T, s *MemStore, tb *Table, keys []string, got [][]uint64, gave [][]bool) (gaveUp, split int) {
	t.Helper()
	for i, k := range keys {
		e, ok := stored(s, tb, k)
		for w := range got {
			switch {
			case gave[w][i]:
				gaveUp++
				if !ok || got[w][i] != e.svc {
					split++
				}
			case !ok || got[w][i] != e.svc:
				t.Fatalf("key %q: worker %d got %d, stored %d (%v); all: %v", k, w, got[w][i], e.svc, ok, column(got, i))
			}
		}
	}
	return gaveUp, split
}

func column(got [][]uint64, i int) []uint64 {
	c := make([]uint64, len(got))
	for w := range got {
		c[w] = got[w][i]
	}
	return c
}

// TestPersistRacingCreation starts workers at once on a table whose only
// bucket does not exist yet, many times over.
func TestPersistRacingCreation(t *testing.T) {
	keys := []string{"a", "b", "c", "d", "e", "f"} // fewer than Ways: nothing is evicted
	s := NewMemStore()
	gaveUp, split := 0, 0
	for round := range 300 {
		ns := "r" + strconv.Itoa(round)
		got, gave := resolveAll(s, ns, Ways, 8, keys)
		g, sp := checkAgree(t, s, NewTable(s, ns, Ways, time.Hour), keys, got, gave)
		gaveUp, split = gaveUp+g, split+sp
	}
	t.Logf("300 rounds × 8 workers × %d keys on one new bucket: %d Sets, %d CAS mismatches, %d gave up, %d of them served another service",
		len(keys), s.Stats().Sets, s.Stats().Mismatches, gaveUp, split)
}

func TestPersistConcurrentWriters(t *testing.T) {
	keys := make([]string, 4000)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	s := NewMemStore()
	got, gave := resolveAll(s, "ns", 100000, 8, keys) // no bucket overflows
	gaveUp, split := checkAgree(t, s, NewTable(s, "ns", 100000, time.Hour), keys, got, gave)
	t.Logf("8 workers × %d keys: %d Sets, %d CAS mismatches, %d gave up, %d of them served another service",
		len(keys), s.Stats().Sets, s.Stats().Mismatches, gaveUp, split)
	if split != 0 {
		t.Errorf("%d Resolves served a service other than the key's", split)
	}
}

func TestPersistStoreErrorsAreSentinels(t *testing.T) {
	// Resolve recognises wrapped sentinels, as a filter Store may wrap them.
	w := failStore{NewMemStore(), nil, errors.Join(ErrCASMismatch)}
	w.MemStore.Set("ns/p/c", nil, 0)
	_, _, out := NewTable(w, "ns", Ways, time.Hour).Resolve([]byte("k"), t0, selectAll, (&chooser{svc: 1}).choose)
	if out.CASRetries != casAttempts || !out.GaveUp {
		t.Errorf("Resolve with wrapped ErrCASMismatch: %+v, want %d retries, gave up", out, casAttempts)
	}
}

// failStore wraps a MemStore and fails Get or Set with err.
type failStore struct {
	*MemStore
	getErr, setErr error
}

func (f failStore) Get(k string) ([]byte, uint32, error) {
	if f.getErr != nil {
		return nil, 0, f.getErr
	}
	return f.MemStore.Get(k)
}

func (f failStore) Set(k string, v []byte, cas uint32) error {
	if f.setErr != nil {
		return f.setErr
	}
	return f.MemStore.Set(k, v, cas)
}

func TestPersistStoreFailures(t *testing.T) {
	hostErr := errors.New("host error")
	tests := []struct {
		name    string
		getErr  error
		setErr  error
		wantOut Outcome
	}{
		{"conflicts give up", nil, ErrCASMismatch, Outcome{Miss: true, CASRetries: casAttempts, GaveUp: true}},
		{"get error", hostErr, nil, Outcome{GaveUp: true}},
		{"set error", nil, hostErr, Outcome{Miss: true, GaveUp: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := failStore{NewMemStore(), tt.getErr, tt.setErr}
			s.MemStore.Set("ns/p/c", nil, 0) // lets creation reach the bucket's Set
			c := &chooser{svc: 4}
			tb := NewTable(s, "ns", 10000, time.Hour)
			svc, ok, out := tb.Resolve([]byte("k"), t0, selectAll, c.choose)
			if svc != 4 || !ok || out != tt.wantOut || c.calls != 1 {
				t.Errorf("Resolve = %d, %v, %+v, %d calls; want 4, true, %+v, 1 call", svc, ok, out, c.calls, tt.wantOut)
			}
		})
	}
}
