package abi

/*
#include "cache.h"
*/
import "C"

import "unsafe"

// CacheKeyMax is the longest :path key the choice cache keeps: cache.h's
// HL_CACHE_KEY, which defines it.
const CacheKeyMax = C.HL_CACHE_KEY

// Cache is one load balancer's choice cache (cache.h), which answers in C,
// before Envoy's choice enters Go, a request whose :path key it holds under
// the load balancer's current view of the hosts. The load balancer gives it
// that view (SetView) and its choices (Put); its hits are counted in the
// configuration's "cached" counter. Used on the load balancer's thread only.
type Cache struct {
	c    *C.hl_cache
	hits Counter
}

// newCache allocates an empty cache; nil when C has no memory for it (the
// load balancer then has none).
func newCache(n int, prefix bool, hits Counter) *Cache {
	var owner unsafe.Pointer // the counter's, when Envoy defined it
	if hits.ok {
		owner = hits.envoy
	}
	c := C.hl_cache_new(C.uint32_t(n), C.bool(prefix), owner, hits.id)
	if c == nil {
		return nil
	}
	return &Cache{c: c, hits: hits}
}

// cell is the cache as the C cell of its load balancer holds it (hl_lb).
func (c *Cache) cell() *C.hl_cache {
	if c == nil {
		return nil
	}
	return c.c
}

// SetView gives the cache the load balancer's view of the hosts: gen, which
// changes with every change of the view and is never 0, and its healthy
// hosts at priority 0, which C compares with Envoy's count before it
// answers. A choice put under another view is not answered. It also adds
// the hits C has not counted yet to the counter.
func (c *Cache) SetView(gen uint32, healthy int) {
	c.c.gen, c.c.healthy_count = C.uint32_t(gen), C.uint32_t(healthy)
	if c.c.hits > 0 {
		c.hits.Add(uint64(c.c.hits))
		c.c.hits = 0
	}
}

// Gen is the generation of the view the cache was last given (SetView,
// Carry); 0 before.
func (c *Cache) Gen() uint32 { return uint32(c.c.gen) }

// Carry gives the cache the load balancer's view gen as SetView does, and
// keeps of the choices put under the view it had those keep says still
// hold, at the host indices keep returns (host among priority 0's hosts,
// healthy among their healthy hosts): keep is asked with each choice's key
// and host index under the earlier view. With keep nil no choice is kept.
func (c *Cache) Carry(gen uint32, healthy int, keep func(key string, host int) (nhost, nhealthy int, ok bool)) {
	from := uint32(c.c.gen)
	c.SetView(gen, healthy)
	if keep == nil || from == gen {
		return // the others are stale: put under another view
	}
	for i := range c.c.entries {
		e := &c.c.entries[i]
		if e.gen == 0 {
			continue
		}
		ok := false
		if uint32(e.gen) == from {
			var host, h int
			key := unsafe.String((*byte)(unsafe.Pointer(&e.key[0])), int(e.len))
			if host, h, ok = keep(key, int(e.host)); ok {
				e.gen, e.host, e.healthy = C.uint32_t(gen), C.uint32_t(host), C.uint32_t(h)
			}
		}
		if !ok {
			e.gen = 0
		}
	}
}

// Put remembers, under the current view, the choice for path's key: host is
// the host's index among priority 0's hosts (Envoy's retry predicate is
// asked about it), healthy its index among their healthy hosts (the answer).
// A path without a key (longer than the key, unless the key is a prefix)
// is not remembered.
func (c *Cache) Put(path string, host, healthy int) {
	C.hl_cache_put(C.uintptr_t(uintptr(unsafe.Pointer(c.c))), strAddr(path), C.size_t(len(path)), C.uint32_t(host), C.uint32_t(healthy))
}
