package lbcore

import (
	"math"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// mix is the splitmix64 finaliser (Steele, Lea and Flood, "Fast splittable
// pseudorandom number generators", 2014). Applied to keyHash ^ serviceID it
// turns one key hash into an independent-looking score per service, which is
// what rendezvous hashing needs: the ranking of services for one key is a
// random permutation, and a different key gives an unrelated permutation.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// score is service id's rendezvous score for key hash k with unit weight: the
// highest score wins. Exposed for golden tests and for tools that want to
// explain a decision.
func score(k, id uint64) uint64 { return mix(k ^ id) }

// weightedScore is the weighted rendezvous score -w/ln(u) with u the unit
// score mapped into (0, 1) (Schindelhauer and Schomaker, "Weighted distributed
// hash tables", 2005): service s then wins weight_s/Σweight of the keys.
// The weight need not be whole: a ramping service ranks with a fraction of
// its own (slowstart.go).
func weightedScore(k, id uint64, w float64) float64 {
	return -w / math.Log(unitScore(mix(k^id)))
}

// unitScore maps a unit score into (0, 1).
func unitScore(x uint64) float64 { return (float64(x>>11) + 0.5) / (1 << 53) }

// rankEntry is what ranking reads of one service, packed so that the
// scoring loops walk one small array (not Service's 104 bytes, and not the
// health slice beside it) and call nothing (RATIONALE.md, "Cost per request").
type rankEntry struct {
	id   uint64 // Service.ID
	mask uint64 // all ones when the service is pickable (enabled, not down, weight above 0), else 0
}

// newRank returns the rank entries of svcs, all UP, padded with entries that
// are never selectable to a multiple of four (decide's unit-weight pass takes
// four at a time). SetDown keeps the masks.
func newRank(svcs []Service) []rankEntry {
	es := make([]rankEntry, (len(svcs)+3)&^3)
	for i := range svcs {
		es[i].id = svcs[i].ID
		if svcs[i].Enabled && svcs[i].Weight > 0 {
			es[i].mask = ^uint64(0)
		}
	}
	return es
}

// hashBest is hashRank for one service without bounded load: a single pass
// that keeps the best, without filling b.cand. With unit weights decide
// runs the pass itself, inline (unitPass), and comes here only for what that
// pass leaves open.
func (b *Balancer) hashBest(d *Decision, k uint64) {
	best := -1
	var bestScore, bestID uint64
	for i := range b.services {
		if b.rank[i].mask == 0 {
			continue
		}
		var s uint64
		switch {
		case b.frac != nil && b.frac[i] < 1:
			s = b.rampScore(k, i) // slowstart.go
		case b.uniform:
			s = mix(k ^ b.rank[i].id)
		default:
			s = b.score(k, i)
		}
		id := b.rank[i].id
		if best < 0 || s > bestScore || s == bestScore && id > bestID {
			best, bestScore, bestID = i, s, id
		}
	}
	if best < 0 {
		d.Reason = ReasonNoService
		return
	}
	d.add(best)
}

// scan is one step of decide's unit-weight pass: service i scores s against the best
// score so far, top, held by service best; tie is 1 when another service
// scored top too. It compiles to selects.
func scan(top, tie uint64, best int, s uint64, i int) (uint64, uint64, int) {
	if s == top {
		tie = 1
	}
	if s > top {
		top, tie, best = s, 0, i
	}
	return top, tie, best
}

// candidate is a selectable service and its score for the current key.
type candidate struct {
	idx   int
	score uint64 // unit weight: raw score; weighted: math.Float64bits of a positive float, which orders the same
}

// better orders candidates by score, then by service identity so that a tie
// (a 2^-64 event) still has one answer on every worker.
func (b *Balancer) better(x, y candidate) bool {
	if x.score != y.score {
		return x.score > y.score
	}
	return b.services[x.idx].ID > b.services[y.idx].ID
}

// score computes service i's score for key hash k.
func (b *Balancer) score(k uint64, i int) uint64 {
	s := &b.services[i]
	if b.uniform {
		return mix(k ^ s.ID)
	}
	// Positive finite floats order like their bit patterns.
	return math.Float64bits(weightedScore(k, s.ID, float64(s.Weight)))
}

// fill puts every selectable service, scored for key k, into b.cand and
// returns how many there are. Callers then take them in order with next.
// It allocates nothing: b.cand has room for every service.
func (b *Balancer) fill(k uint64) int {
	if len(b.ramps) != 0 {
		return b.fillRamp(k)
	}
	es := b.rank[:len(b.services)]
	c := b.cand[:len(es)]
	n := 0
	for i := range es {
		if es[i].mask != 0 {
			s := mix(k ^ es[i].id)
			if !b.uniform {
				s = b.score(k, i)
			}
			c[n] = candidate{idx: i, score: s}
			n++
		}
	}
	b.cand = c[:n]
	return n
}

// next moves the best candidate among positions j and later to position j:
// one step of a selection sort, so ranking the top n costs O(n·N) and a
// decision that needs only the winner costs one pass.
func (b *Balancer) next(j int) int {
	c := b.cand
	best := j
	for i := j + 1; i < len(c); i++ {
		if b.better(c[i], c[best]) {
			best = i
		}
	}
	c[j], c[best] = c[best], c[j]
	return c[j].idx
}

// KeyHash is the method's key hash for r, as a decision hashes it, and
// false when the method has no key or r lacks its input (the backup method
// decides). With Outranks it tells whether a service added to the pool
// takes a key from the service that has it.
func (b *Balancer) KeyHash(r *Request) (uint64, bool) {
	if b.keyer == nil {
		return 0, false
	}
	key, ok, inPlace := keyInRequest(b.keyer, r)
	if !inPlace {
		b.x.capped, b.x.m.steps, b.x.work = false, 0, 0 // as begin, without a decision
		kb, in := b.keyer.AppendKey(b.buf[:0], r, &b.x)
		b.buf = kb[:0]
		key, ok = unsafe.String(unsafe.SliceData(kb), len(kb)), in // b.buf's bytes, hashed at once
	}
	if !ok {
		return 0, false
	}
	return xxhash.Sum64String(key), true
}

// Outranks reports whether service i ranks before service j for key hash k
// in the rendezvous ranking (bounded load aside): a higher score, ramps
// counted, or the same score and a higher identity.
func (b *Balancer) Outranks(k uint64, i, j int) bool {
	return b.better(candidate{idx: i, score: b.rankScore(k, i)}, candidate{idx: j, score: b.rankScore(k, j)})
}

// ScoresLike reports whether a service scores every key under b as a
// service of prev with its identity and weight does: the score is a
// function of the key, the identity and the weight, and whether every
// service of the pool has the same weight (unit scores, else weighted).
func (b *Balancer) ScoresLike(prev *Balancer) bool { return b.uniform == prev.uniform }
