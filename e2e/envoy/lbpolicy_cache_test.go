package envoy

import (
	"fmt"
	"testing"

	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/lbcore"
)

// TestLBPolicyChoiceCache: a choice that depends on the :path only is
// answered from the module's C cache when the same key comes again
// (counted in dynamicmodulescustom.cached), with lbcore's answer every
// time: for a repeated path, for a longer path with the same first
// hashLength bytes (URLHASH hashes no more), and after the hosts change
// (a removed host's keys move, the others' stay, still answered from the
// cache: no stale answer, no needless miss). A
// policy whose choices read more than the path (DOMAINHASH) or keep state
// (persistence) never answers from the cache.
func TestLBPolicyChoiceCache(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		bs := envoyrun.StartBackends(t, 5)
		url := policyCluster{name: "url", config: `{"lbMethod":"URLHASH","hashLength":24}`}
		domain := policyCluster{name: "domain", config: `{"lbMethod":"DOMAINHASH"}`}
		persist := policyCluster{name: "persist", config: `{"lbMethod":"URLHASH","persistence":{"keys":["${request.path}"]}}`}
		for _, b := range bs {
			ep := policyEndpoint{b: b}
			url.eps, domain.eps, persist.eps = append(url.eps, ep), append(domain.eps, ep), append(persist.eps, ep)
		}
		e := startPolicy(t, bin, []policyCluster{url, domain, persist})
		cached := func() int64 { return e.Stat(t, "dynamicmodulescustom.cached") }
		// want is lbcore's host for path over c's hosts.
		want := func(c policyCluster, path string) string {
			b, _ := policyOracle(t, c)
			d := b.Decide(&lbcore.Request{Target: path, Authority: e.addr, Method: "GET"}, corpus.Now)
			return backendOf(c, d.At(0))
		}
		// send GETs each path n times (on kept-alive connections) and
		// checks every answer.
		send := func(c policyCluster, paths []string, n int) {
			for range n {
				for _, p := range paths {
					got, st := e.getPath(t, c.name, p)
					if st != 200 {
						t.Fatalf("%s %s: status %d", c.name, p, st)
					}
					if w := want(c, p); got != w {
						t.Fatalf("%s %s went to %s, lbcore chose %s", c.name, p, got, w)
					}
				}
			}
		}
		// flush makes every worker enter Go once (a path never sent
		// before), which adds the cache's hits to the counter.
		fresh := 0
		flush := func(c policyCluster) {
			var ps []string
			for range 64 {
				fresh++
				ps = append(ps, fmt.Sprintf("/fresh/%d", fresh))
			}
			send(c, ps, 1)
		}
		paths := make([]string, 20)
		for i := range paths {
			paths[i] = fmt.Sprintf("/cart/%d", i)
		}
		send(url, paths, 10)
		flush(url)
		hits := cached()
		// 200 requests of 20 paths: at most the first of each path on each
		// of the 4 workers (and the flush) enter Go.
		if hits < 200-20*4 {
			t.Fatalf("%d of 200 requests of 20 paths answered from the cache, want at least %d", hits, 200-20*4)
		}
		t.Logf("URLHASH: %d of 200 requests of 20 paths answered from the cache", hits)

		// Longer paths whose first 24 bytes are one key: one choice.
		long := []string{"/catalog/items/0123456789-a", "/catalog/items/0123456789-b", "/catalog/items/0123456789-c?x=1"}
		if long[0][:24] != long[1][:24] || long[0][:24] != long[2][:24] {
			t.Fatal("the long paths must share their first 24 bytes")
		}
		send(url, long, 5)

		// More keys on one set of the cache than it has entries (16 paths
		// whose FNV-1a falls in one set of four): entries are replaced and
		// moved, and every answer is still lbcore's.
		crowd := crowdedPaths(16)
		send(url, crowd, 4)

		// Hits reach Envoy's counter from C, 256 at a time, though the
		// worker does not enter Go: 1,200 requests of 20 known paths.
		c0 := cached()
		send(url, paths, 60)
		if n := cached() - c0; n < 256 {
			t.Errorf("the counter rose by %d over 1,200 hits without a worker entering Go, want at least 256", n)
		}

		// A removed host: its keys move, the others' stay, all as lbcore
		// over the new hosts, though the old answers were in the cache.
		removed := url
		removed.eps = append(append([]policyEndpoint(nil), url.eps[:2]...), url.eps[3:]...)
		mark := len(e.Log())
		writePolicyEDS(t, e.Dir, removed)
		e.waitHosts(t, url.name, 4, mark)
		// The keys whose host stayed are answered from the cache at once:
		// removing a host moves its keys alone, so the cache keeps the
		// others' choices over the change.
		stayed := 0
		for _, p := range paths {
			if want(url, p) != bs[2].Name {
				stayed++
			}
		}
		h0 := cached()
		send(removed, paths, 1)
		flush(removed)
		if n := cached() - h0; n < int64(stayed) {
			t.Errorf("%d of the first %d requests after a host was removed answered from the cache, want the %d whose host stayed", n, len(paths), stayed)
		}
		send(removed, paths, 3)
		for _, p := range paths {
			if got, _ := e.getPath(t, url.name, p); got == bs[2].Name {
				t.Fatalf("%s still on the removed host %s", p, got)
			}
		}

		flush(removed)
		before := cached()
		if before-hits < 40 {
			t.Errorf("%d requests answered from the cache after the change, want at least 40 of 80 (2 of every 3 passes of 20 paths, and the check)", before-hits)
		}
		send(domain, paths, 5)
		send(persist, paths, 5)
		flush(domain)
		flush(persist)
		if n := cached() - before; n > 0 {
			t.Errorf("%d choices of DOMAINHASH or persistence answered from the cache, want 0", n)
		}
	})
}

// Cache geometry (internal/lbpolicy/abi/cache.h: HL_CACHE_BITS, HL_CACHE_WAYS).
const (
	cacheEntries = 1 << 13
	cacheWays    = 4
)

// crowdedPaths are n short paths (each a whole cache key) that fall in one
// set of the choice cache: more than it holds when n > cacheWays.
func crowdedPaths(n int) []string {
	set := func(p string) uint64 {
		h := uint64(14695981039346656037)
		for i := 0; i < len(p); i++ {
			h = (h ^ uint64(p[i])) * 1099511628211
		}
		return h & (cacheEntries - cacheWays)
	}
	var out []string
	want := set("/crowd/0")
	for i := 0; len(out) < n; i++ {
		if p := fmt.Sprintf("/crowd/%d", i); set(p) == want {
			out = append(out, p)
		}
	}
	return out
}
