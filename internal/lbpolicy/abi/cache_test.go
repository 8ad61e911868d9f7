package abi

import (
	"maps"
	"testing"
)

// Carry walks the choices put under the cache's view: each is asked about
// once, a kept one answers under the new view at the host keep gave it,
// and a dropped one, or every one when keep is nil, is gone.
func TestCacheCarry(t *testing.T) {
	c := newCache(CacheKeyMax, false, Counter{})
	if c == nil {
		t.Fatal("no cache")
	}
	c.SetView(1, 5)
	for i, p := range []string{"/a", "/b", "/c"} {
		c.Put(p, i, 10+i)
	}
	// seen records what keep is asked, keeping the keys of kept at host
	// 7, healthy 3.
	seen := map[string]int{}
	keep := func(kept ...string) func(string, int) (int, int, bool) {
		clear(seen)
		return func(key string, host int) (int, int, bool) {
			seen[key] = host
			for _, k := range kept {
				if k == key {
					return 7, 3, true
				}
			}
			return 0, 0, false
		}
	}
	c.Carry(2, 5, keep("/a"))
	if want := map[string]int{"/a": 0, "/b": 1, "/c": 2}; !maps.Equal(seen, want) {
		t.Fatalf("the first carry asked about %v, want %v", seen, want)
	}
	if c.Gen() != 2 {
		t.Fatalf("Gen() = %d after a carry to 2", c.Gen())
	}
	c.Carry(3, 5, keep("/a"))
	if want := map[string]int{"/a": 7}; !maps.Equal(seen, want) {
		t.Fatalf("the second carry asked about %v, want %v (the one kept, at its new host)", seen, want)
	}
	c.Carry(4, 5, nil)
	c.Carry(5, 5, keep())
	if len(seen) != 0 {
		t.Fatalf("after a carry that keeps nothing, the next asked about %v", seen)
	}
}
