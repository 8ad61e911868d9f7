package lbpolicy

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// pathCtx is a request for path.
func pathCtx(f *fakeHosts, path string) *fakeCtx {
	return &fakeCtx{f: f, headers: [][2]string{{":path", path}}}
}

// chosen is the index in f.hs of the host a choice named.
func chosen(t testing.TB, w *Worker, f *fakeHosts, path string) int {
	t.Helper()
	p, hi, fail := w.Choose(f, pathCtx(f, path), now)
	if fail != NoFailure {
		t.Fatalf("%s: failure %d", path, fail)
	}
	return f.hlevels[p][hi]
}

// The worker answers from Envoy's snapshot of the healthy hosts alone: a
// host whose health changed but whose snapshot has not (Envoy's
// update_merge_window) is chosen as before, every choice succeeds, and the
// answer is always an index into the snapshot's healthy list.
func TestChoicesFollowTheSnapshot(t *testing.T) {
	f := newFakeHosts(4)
	_, w := urlWorker(t, "snapshot", f)
	before := map[string]int{}
	for k := range 400 {
		path := fmt.Sprintf("/s/%d", k)
		before[path] = chosen(t, w, f, path)
	}
	// Host 3 fails; the snapshot still lists it healthy.
	f.hs[3].health = Unhealthy
	for path, h := range before {
		if got := chosen(t, w, f, path); got != h {
			t.Fatalf("%s: %d before the snapshot changed, was %d", path, got, h)
		}
	}
	// The snapshot arrives, with no membership hook: the choices see it.
	f.sync()
	for path, h := range before {
		got := chosen(t, w, f, path)
		if got == 3 || (h != 3 && got != h) {
			t.Fatalf("%s: on %d after host 3 left the snapshot, was %d", path, got, h)
		}
	}
	// Two hosts swap (one in, one out: the same count) in one snapshot,
	// with no membership hook (Envoy calls it on health changes too: this
	// is the fallback). The healthy count is unchanged, so the view is
	// rebuilt at the first choice whose index Envoy's list contradicts, a
	// key of the host that left: no choice names it, and once one has seen
	// the change every key is back on its host.
	f.hs[3].health, f.hs[1].health = Healthy, Unhealthy
	f.sync()
	paths := slices.Sorted(maps.Keys(before))
	for _, path := range paths {
		if got := chosen(t, w, f, path); got == 1 {
			t.Fatalf("%s: on host 1, out of the snapshot since the swap", path)
		}
	}
	for _, path := range paths {
		if got, h := chosen(t, w, f, path), before[path]; got == 1 || (h != 1 && got != h) {
			t.Fatalf("%s: on %d after the swap was seen, was %d", path, got, h)
		}
	}
}

// A snapshot whose hosts changed without the membership hook (a host
// replaced at the same count) is rebuilt from at the choice that sees it.
func TestChoiceRebuildsAStaleHostSet(t *testing.T) {
	f := newFakeHosts(4)
	_, w := urlWorker(t, "stale", f)
	f.hs[2].addr = "10.9.9.9:8080"
	f.hs[0].health = Unhealthy // the healthy count changes: the choice looks
	f.sync()
	for k := range 200 {
		if got := chosen(t, w, f, fmt.Sprintf("/r/%d", k)); got == 0 {
			t.Fatalf("/r/%d: chose the unhealthy host", k)
		}
	}
	if s := w.Services(); s[2].Address != "10.9.9.9:8080" {
		t.Errorf("services after the rebuild: %+v", s)
	}
}

// Priorities: with every host of priority 0 unhealthy, priority 1's hosts
// take every key, ranked as lbcore ranks them over that level; a key comes
// back to its priority 0 host when the level recovers; with neither level
// healthy, no host.
func TestPriorityFailover(t *testing.T) {
	f := newFakeHosts(7)
	for i := 4; i < 7; i++ {
		f.hs[i].prio = 1
	}
	f.sync()
	_, w := urlWorker(t, "prio", f)
	oracle := lbcore.NewBalancer(w.bal.Config(), 0)
	for i := range 4 {
		oracle.SetDown(i, true)
	}
	before := map[string]int{}
	for k := range 500 {
		path := fmt.Sprintf("/p/%d", k)
		h := chosen(t, w, f, path)
		if h >= 4 {
			t.Fatalf("%s: host %d of priority 1 chosen while priority 0 is healthy", path, h)
		}
		before[path] = h
	}
	for i := range 4 {
		f.hs[i].health = Unhealthy
	}
	f.sync()
	for path := range before {
		pr, _, fail := w.Choose(f, pathCtx(f, path), now)
		got := chosen(t, w, f, path)
		r := lbcore.Request{Target: path}
		d := oracle.Decide(&r, now)
		want := d.At(0)
		if fail != NoFailure || pr != 1 || got != want {
			t.Fatalf("%s: priority %d host %d (failure %d), want priority 1 host %d", path, pr, got, fail, want)
		}
	}
	if _, _, ok := w.Remembered(); ok {
		t.Error("a choice at priority 1 may be remembered by the cache, which answers priority 0")
	}
	f.hs[2].health = Healthy // one host of priority 0 back: the level serves again
	f.sync()
	for path := range before {
		if got := chosen(t, w, f, path); got != 2 {
			t.Fatalf("%s: host %d, want 2, priority 0's only healthy host", path, got)
		}
	}
	for i := range 4 {
		f.hs[i].health = Healthy
	}
	f.sync()
	for path, h := range before {
		if got := chosen(t, w, f, path); got != h {
			t.Fatalf("%s: host %d after priority 0 recovered, was %d", path, got, h)
		}
	}
	for i := range f.hs {
		f.hs[i].health = Unhealthy
	}
	f.sync()
	if _, _, fail := w.Choose(f, pathCtx(f, "/x"), now); fail != NoHost {
		t.Errorf("no healthy host at any level: failure %d, want NoHost", fail)
	}
}

// Retries at priority 1 walk that level's ranking and answer with its
// indices.
func TestPriorityRetries(t *testing.T) {
	f := newFakeHosts(6)
	for i := 3; i < 6; i++ {
		f.hs[i].prio = 1
	}
	for i := range 3 {
		f.hs[i].health = Unhealthy
	}
	f.sync()
	_, w := urlWorker(t, "prio-retry", f)
	for k := range 50 {
		ctx := pathCtx(f, fmt.Sprintf("/q/%d", k))
		ctx.avoid = map[int]bool{}
		for range 3 {
			pr, hi, fail := w.Choose(f, ctx, now)
			if fail != NoFailure || pr != 1 {
				t.Fatalf("priority %d, failure %d", pr, fail)
			}
			h := f.hlevels[1][hi]
			if ctx.avoid[h] {
				t.Fatalf("/q/%d: a retry got host %d again", k, h)
			}
			ctx.avoid[h] = true
		}
	}
}

// A cluster of more hosts than the services array's maximum (10,000) is
// served, each choice lbcore's.
func TestHundredThousandHosts(t *testing.T) {
	f := newFakeHosts(100000)
	_, w := urlWorker(t, "large", f)
	oracle := lbcore.NewBalancer(w.bal.Config(), 0)
	for k := range 100 {
		path := fmt.Sprintf("/big/%d", k)
		r := lbcore.Request{Target: path}
		d := oracle.Decide(&r, now)
		if got, want := chosen(t, w, f, path), d.At(0); got != want {
			t.Fatalf("%s: host %d, lbcore %d", path, got, want)
		}
	}
}

// A persistence table is freed once no worker has used its cluster for the
// grace period, and kept while one does.
func TestTablesFreedWithTheirCluster(t *testing.T) {
	s := newSharedStore()
	clock := time.Unix(1000, 0)
	s.now = func() time.Time { return clock }
	t1 := s.acquire("hashlb/gone")
	newWorkerStore(s, t1).Set("hashlb/gone/p/1", []byte("x"), 0)
	t2 := s.acquire("hashlb/kept")
	newWorkerStore(s, t2).Set("hashlb/kept/p/1", []byte("y"), 0)
	s.release("hashlb/gone")
	clock = clock.Add(orphanGrace - time.Second)
	s.acquire("hashlb/other")
	if s.keys() != 2 {
		t.Fatalf("%d keys within the grace period, want 2", s.keys())
	}
	// The cluster comes back within the grace (a CDS update): its table
	// is found again.
	if got := s.acquire("hashlb/gone"); got != t1 {
		t.Fatal("a cluster back within the grace period got a new table")
	}
	s.release("hashlb/gone")
	clock = clock.Add(orphanGrace)
	s.release("hashlb/other")
	if s.keys() != 1 {
		t.Fatalf("%d keys after the grace period, want 1 (the kept cluster's)", s.keys())
	}
	if _, ok := s.tables["hashlb/gone"]; ok {
		t.Error("the removed cluster's table is still held")
	}
}

// BenchmarkUpdate is a membership update's cost at 10^4 and 10^5 hosts.
func BenchmarkUpdate(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			p := mustPolicy(b, `{"lbMethod":"URLHASH"}`)
			f := newFakeHosts(n)
			w := p.NewWorker("bench-update")
			defer w.Close()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := w.Update(f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUpdateWorkers is one update of the cluster as Envoy makes it
// with --concurrency 4: the main thread and four workers each told of the
// change (host 0's weight, alternating), one after the other.
func BenchmarkUpdateWorkers(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			p := mustPolicy(b, `{"lbMethod":"URLHASH"}`)
			f := newFakeHosts(n)
			ws := make([]*Worker, 5)
			for i := range ws {
				ws[i] = p.NewWorker("bench-update-workers")
				defer ws[i].Close()
			}
			b.ReportAllocs()
			for b.Loop() {
				f.hs[0].weight = 3 - f.hs[0].weight
				for _, w := range ws {
					if _, err := w.Update(f); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkUpdateCarry is a rolling update's step at 10^4 hosts (one host
// replaced by a new address) with a full choice cache carried over it:
// CarryFrom, and Keep for each of the cache's entries. It reports the
// update's time and the carry's, each per step, and the carry's ÷ the
// update's, measured step by step in the same run.
func BenchmarkUpdateCarry(b *testing.B) {
	const n, entries = 10000, 1 << 13 // cache.h's HL_CACHE_BITS
	p := mustPolicy(b, `{"lbMethod":"URLHASH"}`)
	f := newFakeHosts(n)
	w := p.NewWorker("bench-update-carry")
	defer w.Close()
	if _, err := w.Update(f); err != nil {
		b.Fatal(err)
	}
	gen, _ := w.View()
	w.CarryFrom(0)
	// The entries as the C cache holds them, walked whole at every step.
	paths := make([]string, 0, entries)
	hosts := make([]int, 0, entries)
	for k := range entries {
		path := fmt.Sprintf("/bench/%d", k)
		w.Choose(f, &fakeCtx{headers: [][2]string{{":path", path}}}, now)
		if host, _, ok := w.Remembered(); ok {
			paths, hosts = append(paths, path), append(hosts, host)
		}
	}
	var update, carry time.Duration
	kept, next := 0, n
	b.ReportAllocs()
	for b.Loop() {
		f.hs[next%n].addr = fmt.Sprintf("10.200.%d.%d:8080", next>>8&255, next&255)
		next++
		f.sync()
		start := time.Now()
		if _, err := w.Update(f); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		c := w.CarryFrom(gen)
		if c == nil {
			b.Fatal("a host replaced: nothing carried")
		}
		for k, path := range paths {
			if h, _, ok := c.Keep(path, hosts[k]); ok {
				hosts[k] = h
				kept++
			}
		}
		end := time.Now()
		gen, _ = w.View()
		update, carry = update+mid.Sub(start), carry+end.Sub(mid)
	}
	steps := float64(b.N)
	b.ReportMetric(float64(update.Microseconds())/steps, "update-µs/step")
	b.ReportMetric(float64(carry.Microseconds())/steps, "carry-µs/step")
	b.ReportMetric(float64(carry)/float64(update), "carry÷update")
	b.ReportMetric(float64(kept)/steps/float64(len(paths)), "kept/entry")
}
