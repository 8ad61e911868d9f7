package e2e

// BenchmarkPersist/hostsim/*: one full stream (request headers, response
// headers, done/log/delete) through the module under hostsim, with and
// without the persistence table. Run with
//
//	go test -run '^$' -bench Persist -benchmem ./e2e
//
// "none" runs first so that hit and miss can report their cost relative to
// it (x_none; the goal is ≤ 1.5). The 4-worker cases report the CAS retry
// rate from hashlb.persistence_cas_retry per request.
//
// The table's memory, measured by hostsim's shared-data accounting
// (TestPersistMemory*): through the module at 10,000 entries, and through
// lbcore's Table over hostsim's SharedData at the default 3,000,000.

import (
	"context"
	"encoding/binary"
	"encoding/json"
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

// persistBenchHost runs the module for a benchmark: debug header off, as deployed.
func persistBenchHost(b *testing.B, p map[string]any, workers int, realTime bool) *hostsim.Host {
	b.Helper()
	c := map[string]any{"lbMethod": "ROUNDROBIN", "services": fourServices()}
	if p != nil {
		c["persistence"] = p
	}
	cfg, err := json.Marshal(c)
	if err != nil {
		b.Fatal(err)
	}
	h, err := hostsim.New(context.Background(), module(b), hostsim.Config{
		Workers: workers, PluginConfig: cfg, RootID: persistRootID, RealTime: realTime})
	if err != nil {
		b.Fatalf("hostsim.New: %v", err)
	}
	b.Cleanup(func() { h.Close(context.Background()) })
	return h
}

var persistBenchProps = persistReq{}.props()

// persistBenchHeaders are a request's headers with x-client-id id.
func persistBenchHeaders(id string) [][2]string { return persistReq{id: id}.headers() }

// persistStream runs one full stream on worker w.
func persistStream(b *testing.B, h *hostsim.Host, w int, hs [][2]string) {
	s := h.Stream(w)
	if res := s.RequestHeaders(hs, persistBenchProps); res.Err != nil || res.LocalReply != nil {
		b.Fatalf("RequestHeaders: %v %+v", res.Err, res.LocalReply)
	}
	if res := s.ResponseHeaders([][2]string{{":status", "200"}}); res.Err != nil {
		b.Fatalf("ResponseHeaders: %v", res.Err)
	}
	if err := s.Finish(); err != nil {
		b.Fatalf("Finish: %v", err)
	}
}

// interleaved runs b.N rounds of k cases, case j of round i being the
// function prepare(i, j) returns, in a rotating order, timing each run of
// that function alone, and returns each case's total time. Alternating the
// cases keeps their ratios apart from what else the (shared) machine does.
func interleaved(b *testing.B, k int, prepare func(i, j int) func()) []time.Duration {
	total := make([]time.Duration, k)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for r := range k {
			j := (i + r) % k
			run := prepare(i, j)
			start := time.Now()
			run()
			total[j] += time.Since(start)
		}
	}
	b.StopTimer()
	return total
}

// persistPerOp is the last run's time per operation.
func persistPerOp(b *testing.B) float64 { return float64(b.Elapsed().Nanoseconds()) / float64(b.N) }

// persistPrewarm creates every bucket of a tableSize table in h's shared data, one
// entry each, through lbcore.Table (the code the module runs), so that a
// benchmark's misses land in existing buckets as on a table in service.
func persistPrewarm(h *hostsim.Host, tableSize int) {
	nb := tableSize / lbcore.Ways
	tb := lbcore.NewTable(sharedStore{h.SharedData()}, persistNamespace, tableSize, 7*24*time.Hour)
	seen := make([]bool, nb)
	id := xxhash.Sum64String("10.0.0.11:8080")
	var key []byte
	for i, left := 0, nb; left > 0; i++ {
		key = strconv.AppendInt(append(key[:0], "warm-"...), int64(i), 10)
		if bk, _ := bucketOf(key, nb); !seen[bk] {
			seen[bk] = true
			left--
			tb.Resolve(key, h.Now(), func(uint64) bool { return true }, func() (uint64, bool) { return id, true })
		}
	}
}

// persistHotBucketKeys returns n persistence keys that all fall in bucket 0 of a
// tableSize table.
func persistHotBucketKeys(n, tableSize int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		k := "hot-" + strconv.Itoa(i)
		if bk, _ := bucketOf([]byte(k), tableSize/lbcore.Ways); bk == 0 {
			out = append(out, k)
		}
	}
	return out
}

// persistFourWorkers runs b.N streams from four goroutines, one per worker, and
// reports the CAS retry and give-up rates per request.
func persistFourWorkers(b *testing.B, h *hostsim.Host, headers func(w, i int) [][2]string) {
	retry0, giveup0 := persistMetric(h, "hashlb.persistence_cas_retry"), persistMetric(h, "hashlb.persistence_cas_giveup")
	cas0 := persistWriteCount(h)
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < b.N; i += 4 {
				s := h.Stream(w)
				if res := s.RequestHeaders(headers(w, i), persistBenchProps); res.Err != nil || res.LocalReply != nil {
					b.Errorf("RequestHeaders: %v %+v", res.Err, res.LocalReply)
					return
				}
				s.ResponseHeaders([][2]string{{":status", "200"}})
				if err := s.Finish(); err != nil {
					b.Errorf("Finish: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	retries := persistMetric(h, "hashlb.persistence_cas_retry") - retry0
	giveups := persistMetric(h, "hashlb.persistence_cas_giveup") - giveup0
	b.ReportMetric(100*float64(retries)/float64(b.N), "casretry%")
	b.ReportMetric(100*float64(giveups)/float64(b.N), "casgiveup%")
	b.ReportMetric(100*float64(persistWriteCount(h)-cas0-1)/float64(b.N), "writes%")
}

// persistWriteCount returns the host's shared-data write count so far. The
// host draws every write's cas from one counter (cpp-host nextCas), so a
// probe write's cas counts the writes before it (this one included).
func persistWriteCount(h *hostsim.Host) int64 {
	sd := h.SharedData()
	sd.Set("bench/probe", []byte{1}, 0)
	_, cas, _ := sd.Get("bench/probe")
	return int64(cas)
}

func BenchmarkPersist(b *testing.B) {
	b.Run("hostsim", func(b *testing.B) {
		var none float64
		ratio := func(b *testing.B) {
			if none > 0 {
				b.ReportMetric(persistPerOp(b)/none, "x_none")
			}
		}
		// newKeys times b.N requests, each of a new client key.
		newKeys := func(b *testing.B, h *hostsim.Host) {
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				persistStream(b, h, 0, persistBenchHeaders("client-"+strconv.Itoa(i)))
			}
			b.StopTimer()
		}
		// none: the same request, persistence off.
		b.Run("none", func(b *testing.B) {
			h := persistBenchHost(b, nil, 1, false)
			newKeys(b, h)
			none = persistPerOp(b)
		})
		// hit: one key again and again (refresh writes at most once a second).
		b.Run("hit", func(b *testing.B) {
			h := persistBenchHost(b, persistence(nil), 1, false)
			persistStream(b, h, 0, persistBenchHeaders("client-1"))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				// Built each time, as none and miss build theirs.
				persistStream(b, h, 0, persistBenchHeaders("client-"+strconv.Itoa(1)))
			}
			b.StopTimer()
			ratio(b)
			if got := persistMetric(h, "hashlb.persistence_hit"); got != int64(b.N) {
				b.Fatalf("persistence_hit = %d, want %d", got, b.N)
			}
		})
		// miss: a new key each time, into a 1,000,000-entry table whose
		// buckets exist (one entry each): no bucket creation, no eviction.
		b.Run("miss", func(b *testing.B) {
			const tableSize = 1000000
			h := persistBenchHost(b, persistence(map[string]any{"tableSize": tableSize}), 1, false)
			persistPrewarm(h, tableSize)
			newKeys(b, h)
			ratio(b)
			if got := persistMetric(h, "hashlb.persistence_miss"); got != int64(b.N) {
				b.Fatalf("persistence_miss = %d, want %d", got, b.N)
			}
		})
		// miss-cold: a new key each time into an empty 100,000,000-entry
		// table: nearly every miss creates its bucket (marker write, read,
		// guarded create).
		b.Run("miss-cold", func(b *testing.B) {
			h := persistBenchHost(b, persistence(map[string]any{"tableSize": 100000000}), 1, false)
			newKeys(b, h)
			ratio(b)
		})
		// interleaved: none, hit and miss one request each in turn, timed
		// separately, so that the ratios do not depend on what else the
		// (shared) machine did during one of the runs above.
		b.Run("interleaved", func(b *testing.B) {
			const tableSize = 1000000
			hosts := [3]*hostsim.Host{
				persistBenchHost(b, nil, 1, false),
				persistBenchHost(b, persistence(nil), 1, false),
				persistBenchHost(b, persistence(map[string]any{"tableSize": tableSize}), 1, false),
			}
			persistPrewarm(hosts[2], tableSize)
			persistStream(b, hosts[1], 0, persistBenchHeaders("client-1"))
			total := interleaved(b, 3, func(i, j int) func() {
				id := "client-1"
				if j != 1 {
					id = "client-" + strconv.Itoa(i)
				}
				hs := persistBenchHeaders(id)
				return func() { persistStream(b, hosts[j], 0, hs) }
			})
			n := float64(b.N)
			b.ReportMetric(float64(total[0].Nanoseconds())/n, "none-ns")
			b.ReportMetric(float64(total[1].Nanoseconds())/n, "hit-ns")
			b.ReportMetric(float64(total[2].Nanoseconds())/n, "miss-ns")
			b.ReportMetric(float64(total[1])/float64(total[0]), "hit_x_none")
			b.ReportMetric(float64(total[2])/float64(total[0]), "miss_x_none")
		})
		// hotkey-4workers: four workers on one key, on the wall clock, so
		// that each refreshes the entry once a second.
		b.Run("hotkey-4workers", func(b *testing.B) {
			h := persistBenchHost(b, persistence(nil), 4, true)
			hs := persistBenchHeaders("client-1")
			persistStream(b, h, 0, hs)
			persistFourWorkers(b, h, func(int, int) [][2]string { return hs })
		})
		// hotkey-4workers-fastclock: the same on the virtual clock moved one
		// second every 100 requests, so that the four workers race to
		// refresh the entry 40 times more often than at 4,000 requests a
		// second on the wall clock. writes% counts every shared-data write:
		// per virtual second one refresh and each worker's tick (its slot of
		// active requests), 5 per 100 requests.
		b.Run("hotkey-4workers-fastclock", func(b *testing.B) {
			h := persistBenchHost(b, persistence(nil), 4, false)
			hs := persistBenchHeaders("client-1")
			persistStream(b, h, 0, hs)
			persistFourWorkers(b, h, func(w, i int) [][2]string {
				if w == 0 && i%100 == 0 {
					h.Advance(time.Second)
				}
				return hs
			})
		})
		// hotbucket-4workers: the worst case, every request a write to one
		// bucket: four workers cycle through 64 keys of bucket 0, so each
		// request misses (8 ways) and evicts.
		b.Run("hotbucket-4workers", func(b *testing.B) {
			const tableSize = 10000
			keys := persistHotBucketKeys(64, tableSize)
			hs := make([][][2]string, len(keys))
			for i, k := range keys {
				hs[i] = persistBenchHeaders(k)
			}
			h := persistBenchHost(b, persistence(map[string]any{"tableSize": tableSize}), 4, true)
			persistFourWorkers(b, h, func(_, i int) [][2]string { return hs[i%len(hs)] })
		})
	})
}

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
