package lbcore

// A rendezvous decision scores every service: O(N) per request, about 40 µs
// at 10⁴ services in V8. The rank cache keeps, per worker, the top of the
// ranking of recent key hashes, so that a key seen again is decided from a
// few entries (Citrix's appliance likewise caches the value it computed for
// an input). What it keeps does not depend on health or load: it ranks the
// enabled services, and a decision skips the entries that are DOWN at the
// time and applies bounded load to the rest; when the kept prefix cannot
// settle the decision (too many of it DOWN or over the bound) the full
// ranking decides. So a decision is always exactly what the full ranking
// gives (TestRankCacheMatchesFullRanking). Services and weights are fixed
// for a Balancer's life (a new configuration builds a new Balancer), so the
// cache is never invalidated: it lives and dies with its Balancer.

// rankCacheMinServices is the pool size from which the cache is used: below
// it one pass over the services (decide's unit-weight pass) costs about as
// much as a cache lookup.
const rankCacheMinServices = 64

// rankCacheSlots is the number of key hashes kept (direct-mapped by hash).
const rankCacheSlots = 4096

// rankCache is a Balancer's cache of ranking prefixes.
type rankCache struct {
	depth int      // entries kept per key: min(services, want + 7)
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
	return &rankCache{
		depth: depth,
		keys:  make([]uint64, rankCacheSlots),
		used:  make([]bool, rankCacheSlots),
		top:   make([]int32, rankCacheSlots*depth),
	}
}

// prefix returns the ranking prefix for key hash k, computing it on a miss.
// Fewer than depth entries means that is every enabled service.
func (b *Balancer) prefix(k uint64) []int32 {
	c := b.cache
	slot := int((k ^ k>>32) & (rankCacheSlots - 1))
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
// hash k in better's order and returns how many it found.
func (b *Balancer) rankEnabled(k uint64, top []int32) int {
	var scores [maxUpstreamCount + 7]uint64
	n := 0
	for i := range b.services {
		if !b.services[i].Enabled {
			continue
		}
		s := mix(k ^ b.services[i].ID)
		if !b.uniform {
			s = b.score(k, i)
		}
		// Insert i into the sorted top, if it belongs there.
		j := n
		if n == len(top) {
			if !b.better(candidate{i, s}, candidate{int(top[n-1]), scores[n-1]}) {
				continue
			}
			j = n - 1
		} else {
			n++
		}
		for ; j > 0 && b.better(candidate{i, s}, candidate{int(top[j-1]), scores[j-1]}); j-- {
			top[j], scores[j] = top[j-1], scores[j-1]
		}
		top[j], scores[j] = int32(i), s
	}
	return n
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
