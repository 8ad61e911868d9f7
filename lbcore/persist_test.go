package lbcore

import (
	"container/list"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func selectAll(uint64) bool { return true }

// chooser counts its calls and returns svc (ok == false when svc is 0).
type chooser struct {
	svc   uint64
	calls int
}

func (c *chooser) choose() (uint64, bool) {
	c.calls++
	return c.svc, c.svc != 0
}

// stored reads key's entry straight from the store.
func stored(s Store, tb *Table, key string) (entry, bool) {
	h, fp := fingerprint([]byte(key))
	val, _, err := s.Get(strings.Clone(tb.bucketKey(h)))
	if err != nil {
		return entry{}, false
	}
	var d Table
	d.decode(val)
	if i := d.find(fp); i >= 0 {
		return d.ents[i], true
	}
	return entry{}, false
}

// countEntries returns the entries held by every bucket of namespace ns.
func countEntries(s *MemStore, ns string) (entries, buckets int) {
	var d Table
	s.Range(func(k string, v []byte, _ uint32) bool {
		if strings.HasPrefix(k, ns+"/p/") && k != ns+markerSuffix {
			d.decode(v)
			entries += d.n
			buckets++
		}
		return true
	})
	return entries, buckets
}

func TestPersistResolve(t *testing.T) {
	s := NewMemStore()
	tb := NewTable(s, "hashlb/test", 10000, time.Hour)
	not1 := func(svc uint64) bool { return svc != 1 }
	steps := []struct {
		name       string
		key        string
		at         time.Duration
		selectable func(uint64) bool
		choose     uint64 // 0: choose fails
		want       uint64
		wantOK     bool
		wantOut    Outcome
		wantCalls  int
		wantWrite  bool
		wantLast   time.Duration // stored last use after the step
	}{
		{"miss stores", "a", 0, selectAll, 1, 1, true, Outcome{Miss: true}, 1, true, 0},
		{"second hit in its first second promotes", "a", 500 * time.Millisecond, selectAll, 9, 1, true, Outcome{Hit: true}, 0, true, 0},
		{"hit same second", "a", 900 * time.Millisecond, selectAll, 9, 1, true, Outcome{Hit: true}, 0, false, 0},
		{"hit next second refreshes", "a", 1 * time.Second, selectAll, 9, 1, true, Outcome{Hit: true}, 0, true, time.Second},
		{"refresh at most once a second", "a", 1999 * time.Millisecond, selectAll, 9, 1, true, Outcome{Hit: true}, 0, false, time.Second},
		{"unselectable rechosen", "a", 3 * time.Second, not1, 2, 2, true, Outcome{Rechosen: true}, 1, true, 3 * time.Second},
		{"rechosen mapping sticks", "a", 4 * time.Second, selectAll, 9, 2, true, Outcome{Hit: true}, 0, true, 4 * time.Second},
		{"expired rechosen", "a", 4*time.Second + time.Hour + time.Second, selectAll, 3, 3, true, Outcome{Expired: true}, 1, true, 4*time.Second + time.Hour + time.Second},
		{"choose fails stores nothing", "b", 0, selectAll, 0, 0, false, Outcome{Miss: true}, 1, false, 0},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			c := &chooser{svc: st.choose}
			before := s.Stats().Sets
			svc, ok, out := tb.Resolve([]byte(st.key), t0.Add(st.at), st.selectable, c.choose)
			out.PrevUse = 0 // TestPersistPrevUse
			if svc != st.want || ok != st.wantOK || out != st.wantOut {
				t.Fatalf("Resolve(%q) = %d, %v, %+v, want %d, %v, %+v", st.key, svc, ok, out, st.want, st.wantOK, st.wantOut)
			}
			if c.calls != st.wantCalls {
				t.Errorf("choose called %d times, want %d", c.calls, st.wantCalls)
			}
			if wrote := s.Stats().Sets != before; wrote != st.wantWrite {
				t.Errorf("wrote = %v, want %v", wrote, st.wantWrite)
			}
			e, found := stored(s, tb, st.key)
			if found != st.wantOK {
				t.Fatalf("stored(%q) found = %v, want %v", st.key, found, st.wantOK)
			}
			if found && (e.svc != st.want || e.last != unixSeconds(t0.Add(st.wantLast))) {
				t.Errorf("stored(%q) = svc %d last %d, want svc %d last %d", st.key, e.svc, e.last, st.want, unixSeconds(t0.Add(st.wantLast)))
			}
		})
	}
}

func TestPersistExpiry(t *testing.T) {
	const expire = 10 * time.Minute
	tests := []struct {
		name  string
		every time.Duration // touches after the first, until 10×expire
		idle  time.Duration // then idle this long
		want  Outcome
	}{
		{"idle expire+1s is gone", 0, expire + time.Second, Outcome{Expired: true}},
		{"idle exactly expire lives", 0, expire, Outcome{Hit: true}},
		{"touched every expire/2 lives on", expire / 2, expire / 2, Outcome{Hit: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := NewTable(NewMemStore(), "ns", 10000, expire)
			c := &chooser{svc: 7}
			now := t0
			tb.Resolve([]byte("k"), now, selectAll, c.choose)
			for tt.every > 0 && now.Sub(t0) < 10*expire {
				now = now.Add(tt.every)
				if svc, _, out := tb.Resolve([]byte("k"), now, selectAll, c.choose); svc != 7 || !out.Hit {
					t.Fatalf("Resolve at %v = %d, %+v, want 7, hit", now.Sub(t0), svc, out)
				}
			}
			c.svc = 8
			_, _, out := tb.Resolve([]byte("k"), now.Add(tt.idle), selectAll, c.choose)
			out.PrevUse = 0
			if out != tt.want {
				t.Errorf("Resolve after %v idle: %+v, want %+v", tt.idle, out, tt.want)
			}
		})
	}
}

func TestPersistTableSizeBound(t *testing.T) {
	const size = 10000
	s := NewMemStore()
	tb := NewTable(s, "ns", size, time.Hour)
	c := &chooser{svc: 1}
	var key []byte
	evicted := 0
	for i := range 10 * size {
		key = strconv.AppendInt(key[:0], int64(i), 10)
		_, _, out := tb.Resolve(key, t0.Add(time.Duration(i)*time.Millisecond), selectAll, c.choose)
		evicted += out.Evicted
	}
	entries, buckets := countEntries(s, "ns")
	if entries > size || buckets > size/Ways {
		t.Errorf("after %d keys: %d entries in %d buckets, want at most %d in %d", 10*size, entries, buckets, size, size/Ways)
	}
	if entries+evicted != 10*size {
		t.Errorf("entries %d + evicted %d = %d, want %d", entries, evicted, entries+evicted, 10*size)
	}
	t.Logf("%d entries held of %d, %d evicted", entries, size, evicted)
}

func TestPersistEvictsLRU(t *testing.T) {
	tests := []struct {
		name        string
		expire      time.Duration
		spacing     time.Duration // between the first Ways inserts
		touch       int           // key hit at touchAt, -1 for none
		touchAt     time.Duration
		insertAt    time.Duration
		wantEvicted int
		wantGone    []int
	}{
		{"least recently used goes", time.Hour, time.Second, 0, 8 * time.Second, 9 * time.Second, 1, []int{1}},
		{"tie goes to the earliest written", time.Hour, 0, -1, 0, 0, 1, []int{0}},
		{"tie keeps an entry hit since stored", time.Hour, 0, 0, 0, 0, 1, []int{1}},
		{"expired go first", 5 * time.Second, time.Second, 7, 8 * time.Second, 12 * time.Second, 0, []int{0, 1, 2, 3, 4, 5, 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewMemStore()
			tb := NewTable(s, "ns", Ways, tt.expire) // one bucket
			c := &chooser{svc: 1}
			for i := range Ways {
				tb.Resolve([]byte{byte('a' + i)}, t0.Add(time.Duration(i)*tt.spacing), selectAll, c.choose)
			}
			if tt.touch >= 0 {
				tb.Resolve([]byte{byte('a' + tt.touch)}, t0.Add(tt.touchAt), selectAll, c.choose)
			}
			_, _, out := tb.Resolve([]byte("new"), t0.Add(tt.insertAt), selectAll, c.choose)
			if out.Evicted != tt.wantEvicted {
				t.Errorf("Evicted = %d, want %d", out.Evicted, tt.wantEvicted)
			}
			var gone []int
			for i := range Ways {
				if _, ok := stored(s, tb, string(rune('a'+i))); !ok {
					gone = append(gone, i)
				}
			}
			if !slices.Equal(gone, tt.wantGone) {
				t.Errorf("gone = %v, want %v", gone, tt.wantGone)
			}
			if _, ok := stored(s, tb, "new"); !ok {
				t.Errorf("new key not stored")
			}
		})
	}
}

func TestPersistForeignBucketValue(t *testing.T) {
	s := NewMemStore()
	tb := NewTable(s, "ns", Ways, time.Hour)
	for _, v := range []string{"", "\x02", "\x01abc", strings.Repeat("\x01", 1+EntrySize*(Ways+1))} {
		s.Set("ns/p/0", []byte(v), 0)
		c := &chooser{svc: 5}
		if svc, _, out := tb.Resolve([]byte("k"), t0, selectAll, c.choose); svc != 5 || out.GaveUp {
			t.Errorf("Resolve over bucket %q = %d, %+v, want 5 stored", v, svc, out)
		}
		if e, ok := stored(s, tb, "k"); !ok || e.svc != 5 {
			t.Errorf("after bucket %q: stored = %+v, %v, want svc 5", v, e, ok)
		}
	}
}

func TestPersistHitAllocs(t *testing.T) {
	tb := NewTable(NewMemStore(), "ns", 10000, time.Hour)
	key := []byte("client-1")
	c := &chooser{svc: 1}
	tb.Resolve(key, t0, selectAll, c.choose)
	if n := testing.AllocsPerRun(100, func() { tb.Resolve(key, t0, selectAll, c.choose) }); n != 0 {
		t.Errorf("Resolve hit allocates %v times, want 0", n)
	}
}

func TestBytesPerEntry(t *testing.T) {
	const overhead = 64
	got := BytesPerEntry(3000000, "hashlb/hashlb", overhead)
	t.Logf("bytes/entry at 3,000,000 entries, namespace hashlb/hashlb, %d B/key overhead: %.2f", overhead, got)
	if got > 48 {
		t.Errorf("BytesPerEntry(3000000) = %.2f, want <= 48", got)
	}
	// A full table in a MemStore costs exactly what the formula says.
	s := NewMemStore()
	tb := NewTable(s, "hashlb/x", 10000, time.Hour)
	c := &chooser{svc: 1}
	var key []byte
	for i := range 200000 {
		key = strconv.AppendInt(key[:0], int64(i), 10)
		tb.Resolve(key, t0, selectAll, c.choose)
	}
	if n, _ := countEntries(s, "hashlb/x"); n != tb.Capacity() {
		t.Fatalf("table not full: %d of %d", n, tb.Capacity())
	}
	measured := float64(s.Bytes(overhead)) / float64(tb.Capacity())
	if want := BytesPerEntry(10000, "hashlb/x", overhead); measured != want {
		t.Errorf("MemStore bytes/entry = %.3f, BytesPerEntry = %.3f", measured, want)
	}
}

// exactLRU is a textbook LRU cache of keys, the yardstick for the table.
type exactLRU struct {
	cap   int
	order *list.List // front: most recent
	at    map[uint64]*list.Element
}

func (l *exactLRU) access(k uint64) (hit bool) {
	if e, ok := l.at[k]; ok {
		l.order.MoveToFront(e)
		return true
	}
	if l.order.Len() == l.cap {
		last := l.order.Back()
		delete(l.at, last.Value.(uint64))
		l.order.Remove(last)
	}
	l.at[k] = l.order.PushFront(k)
	return false
}

func TestPersistZipfLRU(t *testing.T) {
	if testing.Short() {
		t.Skip("10^6 requests per case")
	}
	const universe, requests = 1000000, 1000000
	tests := []struct {
		name     string
		capacity int
		step     time.Duration // virtual time between requests
	}{
		{"cap=10000/1000rps", 10000, time.Millisecond},
		{"cap=100000/1000rps", 100000, time.Millisecond},
		{"cap=10000/100000rps", 10000, 10 * time.Microsecond},
		{"cap=10000/1000000rps", 10000, time.Microsecond},
		{"cap=100000/1000000rps", 100000, time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			z := rand.NewZipf(r, 1.1, 1, universe-1)
			lru := &exactLRU{cap: tt.capacity, order: list.New(), at: make(map[uint64]*list.Element)}
			tb := NewTable(NewMemStore(), "ns", tt.capacity, 365*24*time.Hour)
			c := &chooser{svc: 1}
			var key []byte
			var hits, lruHits int
			for i := range requests {
				k := z.Uint64()
				key = strconv.AppendUint(key[:0], k, 10)
				if _, _, out := tb.Resolve(key, t0.Add(time.Duration(i)*tt.step), selectAll, c.choose); out.Hit {
					hits++
				}
				if lru.access(k) {
					lruHits++
				}
			}
			got, want := float64(hits)/requests, float64(lruHits)/requests
			t.Logf("hit rate: table %.4f, exact LRU %.4f (%+.2f%% relative)", got, want, 100*(got-want)/want)
			if got < want*0.98 {
				t.Errorf("table hit rate %.4f more than 2%% below exact LRU %.4f", got, want)
			}
		})
	}
}

func BenchmarkPersist(b *testing.B) {
	b.Run("hit", func(b *testing.B) {
		tb := NewTable(NewMemStore(), "hashlb/bench", 3000000, time.Hour)
		key, c := []byte("203.0.113.7"), &chooser{svc: 1}
		tb.Resolve(key, t0, selectAll, c.choose)
		tb.Resolve(key, t0, selectAll, c.choose) // promoted: later hits write nothing
		b.ReportAllocs()
		for b.Loop() {
			tb.Resolve(key, t0, selectAll, c.choose)
		}
	})
	b.Run("miss", func(b *testing.B) {
		tb := NewTable(NewMemStore(), "hashlb/bench", 100000, time.Hour)
		c := &chooser{svc: 1}
		var key []byte
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			key = strconv.AppendInt(key[:0], int64(i), 10)
			tb.Resolve(key, t0, selectAll, c.choose)
			i++
		}
	})
	b.Run("hotkey-parallel", func(b *testing.B) {
		// 4 workers on one key over a virtual clock at 10,000 requests a
		// second: every second each worker tries to refresh the entry.
		s := NewMemStore()
		var n atomic.Int64
		var retries, gaveUp atomic.Int64
		b.SetParallelism(max(1, 4/runtime.GOMAXPROCS(0)))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			tb := NewTable(s, "hashlb/bench", 3000000, time.Hour)
			key, c := []byte("hot"), &chooser{svc: 1}
			for pb.Next() {
				now := t0.Add(time.Duration(n.Add(1)) * 100 * time.Microsecond)
				_, _, out := tb.Resolve(key, now, selectAll, c.choose)
				retries.Add(int64(out.CASRetries))
				if out.GaveUp {
					gaveUp.Add(1)
				}
			}
		})
		b.ReportMetric(100*float64(retries.Load())/float64(b.N), "cas-retry-%")
		b.ReportMetric(float64(gaveUp.Load()), "gaveup")
	})
}

// TestPersistPrevUse: a hit reports the entry's previous last use, which a
// fleet level compares with the current slot to refresh its stamp.
func TestPersistPrevUse(t *testing.T) {
	tb := NewTable(NewMemStore(), "ns", 10000, time.Hour)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := &chooser{svc: 7}
	tb.Resolve([]byte("k"), t0, selectAll, c.choose)
	for _, step := range []struct {
		at   time.Duration
		want time.Duration
	}{{5 * time.Second, 0}, {20 * time.Second, 5 * time.Second}, {20 * time.Second, 20 * time.Second}} {
		_, _, out := tb.Resolve([]byte("k"), t0.Add(step.at), selectAll, c.choose)
		if want := uint32(t0.Add(step.want).Unix()); !out.Hit || out.PrevUse != want {
			t.Errorf("Resolve at +%v = %+v, want a hit with PrevUse %d (+%v)", step.at, out, want, step.want)
		}
	}
}
