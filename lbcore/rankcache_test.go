package lbcore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// weightedPool is pool with weight weights[i%len] per service and some disabled.
func weightedPool(n int, weights []int, extra string) string {
	return urlPool(n, weights, extra, func(i int) bool { return i%37 == 5 })
}

// urlPool is a URLHASH configuration that starts with extra (top-level
// fields, each followed by a comma) over services s0..s(n-1): service i of
// weight weights[i%len(weights)] (1 each when weights is nil), disabled
// where off(i); with off nil no service says "enabled".
func urlPool(n int, weights []int, extra string, off func(int) bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"lbMethod":"URLHASH",%s"services":[`, extra)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		w := 1
		if weights != nil {
			w = weights[i%len(weights)]
		}
		fmt.Fprintf(&b, `{"name":"s%d","address":"10.0.%d.%d:80","weight":%d`, i, i/250, i%250+1, w)
		if off != nil {
			fmt.Fprintf(&b, `,"enabled":%v`, !off(i))
		}
		b.WriteByte('}')
	}
	b.WriteString("]}")
	return b.String()
}

// zipfTargets returns a Zipf (s = 1.1) draw over keys distinct URL targets.
func zipfTargets(rng *rand.Rand, keys int) func() string {
	z := rand.NewZipf(rng, 1.1, 1, uint64(keys-1))
	return func() string { return fmt.Sprintf("/item/%d", z.Uint64()) }
}

// TestRankCacheMatchesFullRanking: over 10^6 requests with Zipf keys, with
// services going DOWN and UP (sometimes most of them), active counts moving
// (bounded load) and the weights changing (a new configuration, so a new
// Balancer, carrying health and load over), every decision of a Balancer
// with the rank cache equals the full ranking's.
func TestRankCacheMatchesFullRanking(t *testing.T) {
	const n = 300
	requests := 1_000_000
	if testing.Short() {
		requests = 100_000
	}
	variants := []struct{ name, extra string }{
		{"one service", `"upstreamCount":1,`},
		{"three services, bounded load", `"upstreamCount":3,"hashBalanceFactor":125,`},
	}
	weightSets := [][]int{{1}, {1, 2, 5}, {3}, {7, 1}}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			target := zipfTargets(rng, 100_000)
			down := make([]bool, n)
			active := make([]int64, n)
			var cached, full *Balancer
			build := func(ws []int) {
				c := mustConfig(t, weightedPool(n, ws, v.extra))
				cached, full = NewBalancer(c, 7), NewBalancer(c, 7)
				if cached.cache == nil {
					t.Fatal("no rank cache at 300 services")
				}
				full.cache, full.unitPass = nil, false
				for i := range down {
					for _, b := range []*Balancer{cached, full} {
						b.SetDown(i, down[i])
						b.SetActive(i, active[i])
					}
				}
			}
			build(weightSets[0])
			hits := 0
			for r := 0; r < requests; r++ {
				switch {
				case r%(requests/len(weightSets)) == 0 && r > 0:
					build(weightSets[r/(requests/len(weightSets))%len(weightSets)])
				case r%50 == 0:
					// Health: a few flips; now and then most of the pool DOWN, then back.
					flips := 1 + rng.IntN(3)
					if r%20000 == 0 {
						flips = n * 9 / 10
					}
					for range flips {
						i := rng.IntN(n)
						down[i] = !down[i]
						cached.SetDown(i, down[i])
						full.SetDown(i, down[i])
					}
				case r%7 == 0:
					i := rng.IntN(n)
					active[i] = int64(rng.IntN(20))
					cached.SetActive(i, active[i])
					full.SetActive(i, active[i])
				}
				req := Request{Target: target()}
				var dc, df Decision
				cached.DecideInto(&dc, &req, time.Time{})
				full.DecideInto(&df, &req, time.Time{})
				if dc.Reason != df.Reason || dc.Len() != df.Len() {
					t.Fatalf("request %d %s: cached decision %v over %d services, full ranking %v over %d", r, req.Target, dc.Reason, dc.Len(), df.Reason, df.Len())
				}
				for i := 0; i < dc.Len(); i++ {
					if dc.At(i) != df.At(i) {
						t.Fatalf("request %d %s: cached ranking %v, full ranking %v", r, req.Target, dc.ranked[:dc.n], df.ranked[:df.n])
					}
				}
				if dc.Len() > 0 {
					hits++
				}
			}
			if hits == 0 {
				t.Fatal("no request was decided")
			}
		})
	}
}

// TestRankCacheAllocatesNothing: a cached decision, hit or miss, allocates nothing.
func TestRankCacheAllocatesNothing(t *testing.T) {
	b := NewBalancer(mustConfig(t, pool("URLHASH", 1000, `"upstreamCount":2`)), 1)
	reqs := []Request{{Target: "/a"}, {Target: "/b"}}
	var d Decision
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		reqs[0].Target = reqs[i%2].Target
		b.DecideInto(&d, &reqs[i%2], time.Time{})
		i++
	}); n != 0 {
		t.Errorf("a decision at 1000 services with the rank cache allocated %.1f times, want 0", n)
	}
}

// BenchmarkRankCache is one URLHASH decision at 10^4 services: a miss (a
// key not in the cache: the pass over the pool) and a hit. Compare the two
// with each other and with a decision at 10 services (no cache).
func BenchmarkRankCache(b *testing.B) {
	targets := make([]Request, 1<<16)
	for i := range targets {
		targets[i].Target = fmt.Sprintf("/catalog/items/%d", i)
	}
	for _, c := range []struct {
		name      string
		services  int
		distinct  int
		upstreams int
	}{
		{"10 services", 10, 16, 1},
		{"hit, 10000 services", 10000, 16, 1},
		{"miss, 10000 services", 10000, len(targets), 1},
		{"miss, 10000 services, upstreamCount 3", 10000, len(targets), 3},
	} {
		bal := NewBalancer(mustConfig(b, pool("URLHASH", c.services, fmt.Sprintf(`"upstreamCount":%d`, c.upstreams))), 1)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var d Decision
			i := 0
			for b.Loop() {
				bal.DecideInto(&d, &targets[i%c.distinct], time.Time{})
				i++
			}
		})
	}
}

// TestRankCacheBigPool: from rankCacheBigPool services the cache has more
// slots; decisions still equal the full ranking's, with services going DOWN
// and UP.
func TestRankCacheBigPool(t *testing.T) {
	const n = rankCacheBigPool
	c := mustConfig(t, weightedPool(n, []int{1}, `"upstreamCount":2,`))
	cached, full := NewBalancer(c, 3), NewBalancer(c, 3)
	if cached.cache == nil || cached.cache.mask != rankCacheBigSlots-1 {
		t.Fatalf("rank cache at %d services: %+v, want %d slots", n, cached.cache, rankCacheBigSlots)
	}
	full.cache, full.unitPass = nil, false
	rng := rand.New(rand.NewPCG(7, 8))
	target := zipfTargets(rng, 100_000)
	for r := range 40_000 {
		if r%100 == 0 {
			i := rng.IntN(n)
			down := !cached.down[i]
			cached.SetDown(i, down)
			full.SetDown(i, down)
		}
		req := Request{Target: target()}
		var dc, df Decision
		cached.DecideInto(&dc, &req, time.Time{})
		full.DecideInto(&df, &req, time.Time{})
		if dc.Reason != df.Reason || dc.ranked != df.ranked || dc.Len() != df.Len() {
			t.Fatalf("request %d %s: cached %v %v, full ranking %v %v", r, req.Target, dc.Reason, dc.ranked[:dc.n], df.Reason, df.ranked[:df.n])
		}
	}
}
