package lbcore

// A rendezvous decision scores every service: O(N) per request (its cost at
// 10⁴ services: docs/performance.md#figures-behind-lbcores-caps-and-caches). The rank cache keeps, per worker, the top of the
// ranking of recent key hashes, so that a key seen again is decided from a
// few entries (Citrix's appliance likewise caches the value it computed for
// an input). What it keeps does not depend on health or load: it ranks the
// enabled services, and a decision skips the entries that are DOWN at the
// time and applies bounded load to the rest; when the kept prefix cannot
// settle the decision (too many of it DOWN or over the bound) the full
// ranking decides. So a decision is always exactly what the full ranking
// gives (TestRankCacheMatchesFullRanking). Services and weights are fixed
// for a Balancer's life (a new configuration builds a new Balancer), so the
// cache is never invalidated: it lives and dies with its Balancer. A
// service in a slow-start ramp ranks with a weight that changes: while one
// ramps the Balancer sets the cache aside, neither reading nor writing it,
// and takes it back, still exact, when the last ramp ends (slowstart.go).

// rankCacheMinServices is the pool size from which the cache is used: below
// it one pass over the services (decide's unit-weight pass) costs about as
// much as a cache lookup.
const rankCacheMinServices = 64

// rankCacheSlots is the number of key hashes kept (direct-mapped by hash),
// and rankCacheBigSlots that from rankCacheBigPool services, where a miss
// (a pass over the pool) costs most; the hit rates that chose the sizes are
// in docs/performance.md#figures-behind-lbcores-caps-and-caches.
// A slot costs 9 bytes plus 4 per entry kept (upstreamCount + 7).
const (
	rankCacheSlots    = 4096
	rankCacheBigSlots = 16384
	rankCacheBigPool  = 2048
)

// rankCache is a Balancer's cache of ranking prefixes.
type rankCache struct {
	depth int      // entries kept per key: min(services, want + 7)
	mask  uint64   // slots - 1
	ids   []uint64 // the enabled services' identities, in index order
	at    []int32  // the enabled services' indexes, beside ids; nil when every service is enabled
	keys  []uint64 // per slot: the key hash whose prefix it holds
	used  []bool   // per slot: holds a prefix
	top   []int32  // per slot, depth service indexes: the enabled services in rank order
}

// newRankCache returns the cache for b, or nil when b's pool is too small
// for it to pay.
func newRankCache(b *Balancer) *rankCache {
	if len(b.services) < rankCacheMinServices {
		return nil
	}
	depth := min(len(b.services), b.want+7)
	slots := rankCacheSlots
	if len(b.services) >= rankCacheBigPool {
		slots = rankCacheBigSlots
	}
	c := &rankCache{
		depth: depth,
		mask:  uint64(slots - 1),
		keys:  make([]uint64, slots),
		used:  make([]bool, slots),
		top:   make([]int32, slots*depth),
	}
	for i := range b.services {
		if b.services[i].Enabled {
			c.ids = append(c.ids, b.services[i].ID)
		}
	}
	if len(c.ids) < len(b.services) {
		for i := range b.services {
			if b.services[i].Enabled {
				c.at = append(c.at, int32(i))
			}
		}
	}
	return c
}

// index is the service index of the i-th enabled service.
func (c *rankCache) index(i int) int32 {
	if c.at == nil {
		return int32(i)
	}
	return c.at[i]
}

// prefix returns the ranking prefix for key hash k, computing it on a miss.
// Fewer than depth entries means that is every enabled service.
func (b *Balancer) prefix(k uint64) []int32 {
	c := b.cache
	slot := int((k ^ k>>32) & c.mask)
	top := c.top[slot*c.depth : (slot+1)*c.depth]
	if c.used[slot] && c.keys[slot] == k {
		return top[:c.n(top)]
	}
	n := b.rankEnabled(k, top)
	for i := n; i < len(top); i++ {
		top[i] = -1
	}
	c.keys[slot], c.used[slot] = k, true
	return top[:n]
}

// n is how many entries of a slot's prefix are set.
func (c *rankCache) n(top []int32) int {
	for i, s := range top {
		if s < 0 {
			return i
		}
	}
	return len(top)
}

// rankEnabled fills top with the best len(top) enabled services for key
// hash k in better's order and returns how many it found. It walks the
// cache's packed list of enabled services (not b.services) and keeps the
// kept entries' scores and identities beside them, so a service that does
// not enter the top costs its score and one comparison: with unit weights,
// four services at a time against the weakest kept score.
func (b *Balancer) rankEnabled(k uint64, top []int32) int {
	c := b.cache
	r := ranked{top: top}
	ids := c.ids
	i := 0
	if b.uniform {
		// Fill the top, then scan for what beats its weakest entry: a
		// score below it cannot enter; an equal one may, by identity.
		for ; i < len(ids) && r.n < len(top); i++ {
			r.insert(c.index(i), mix(k^ids[i]), ids[i])
		}
		if r.n < len(top) {
			return r.n
		}
		least := r.scores[r.n-1]
		for ; i+4 <= len(ids); i += 4 {
			s0, s1 := mix(k^ids[i]), mix(k^ids[i+1])
			s2, s3 := mix(k^ids[i+2]), mix(k^ids[i+3])
			if max(s0, s1, s2, s3) >= least {
				r.offer(c.index(i), s0, ids[i])
				r.offer(c.index(i+1), s1, ids[i+1])
				r.offer(c.index(i+2), s2, ids[i+2])
				r.offer(c.index(i+3), s3, ids[i+3])
				least = r.scores[r.n-1]
			}
		}
		for ; i < len(ids); i++ {
			r.offer(c.index(i), mix(k^ids[i]), ids[i])
		}
		return r.n
	}
	for ; i < len(ids); i++ {
		j := c.index(i)
		r.offer(j, b.score(k, int(j)), ids[i])
	}
	return r.n
}

// ranked is the top being built by rankEnabled: top[:n] in rank order, with
// each entry's score and service identity.
type ranked struct {
	top    []int32
	n      int
	scores [maxUpstreamCount + 7]uint64
	ids    [maxUpstreamCount + 7]uint64
}

// offer inserts service idx (score s, identity id) if it belongs in the top.
func (r *ranked) offer(idx int32, s, id uint64) {
	if r.n < len(r.top) {
		r.insert(idx, s, id)
		return
	}
	last := r.n - 1
	if s < r.scores[last] || s == r.scores[last] && id <= r.ids[last] {
		return
	}
	r.n-- // the weakest entry drops out
	r.insert(idx, s, id)
}

// insert puts service idx into the top, which has room, in better's order:
// higher score first, then higher identity.
func (r *ranked) insert(idx int32, s, id uint64) {
	j := r.n
	for ; j > 0 && (s > r.scores[j-1] || s == r.scores[j-1] && id > r.ids[j-1]); j-- {
		r.top[j], r.scores[j], r.ids[j] = r.top[j-1], r.scores[j-1], r.ids[j-1]
	}
	r.top[j], r.scores[j], r.ids[j] = idx, s, id
	r.n++
}

// cachedRank fills d from the cached prefix for key hash k as hashRank
// would, and reports whether the prefix settled it; if not, d is untouched.
func (b *Balancer) cachedRank(d *Decision, k uint64) bool {
	top := b.prefix(k)
	complete := len(top) < b.cache.depth // the prefix is every enabled service
	// sel: the selectable entries of the prefix, in rank order.
	var sel [maxUpstreamCount + 7]int32
	ns := 0
	for _, i := range top {
		if b.rank[i].mask != 0 {
			sel[ns] = i
			ns++
		}
	}
	if ns == 0 {
		if complete {
			d.Reason = ReasonNoService
			return true
		}
		return false
	}
	first := 0
	if f := b.cfg.HashBalanceFactor; f > 0 {
		bound := b.cachedLoadBound()
		for first = 0; first < ns && b.active[sel[first]]+1 > bound; first++ {
		}
		if first == ns {
			if !complete {
				return false
			}
			first = 0 // cannot happen (bound·n > total), as in hashRank
		} else if first > 0 {
			d.Reason = ReasonBoundedLoad
		}
	}
	if want := min(b.want, b.selN); !complete && (first >= ns || max(want, first+1) > ns) {
		return false
	}
	d.add(int(sel[first]))
	for j := 0; d.n < b.want && j < ns; j++ {
		if j != first {
			d.add(int(sel[j]))
		}
	}
	return true
}

// cachedLoadBound is loadBound over every selectable service, from the
// counts SetDown and SetActive keep.
func (b *Balancer) cachedLoadBound() int64 {
	f, n := int64(b.cfg.HashBalanceFactor), int64(b.selN)
	return max(1, (f*(b.selActive+1)+100*n-1)/(100*n))
}
