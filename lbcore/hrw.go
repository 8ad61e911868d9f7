package lbcore

import "math"

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

// Score is service id's rendezvous score for key hash k with unit weight: the
// highest score wins. Exposed for golden tests and for tools that want to
// explain a decision.
func Score(k, id uint64) uint64 { return mix(k ^ id) }

// weightedScore is the weighted rendezvous score -w/ln(u) with u the unit
// score mapped into (0, 1) (Schindelhauer and Schomaker, "Weighted distributed
// hash tables", 2005): service s then wins weight_s/Σweight of the keys.
func weightedScore(k, id uint64, w int) float64 {
	u := (float64(mix(k^id)>>11) + 0.5) / (1 << 53)
	return -float64(w) / math.Log(u)
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
	return math.Float64bits(weightedScore(k, s.ID, s.Weight))
}

// fill puts every selectable service, scored for key k, into b.cand and
// returns how many there are. Callers then take them in order with next.
// It allocates nothing: b.cand has room for every service.
func (b *Balancer) fill(k uint64) int {
	c := b.cand[:0]
	for i := range b.services {
		if b.selectable(i) {
			c = append(c, candidate{idx: i, score: b.score(k, i)})
		}
	}
	b.cand = c
	return len(c)
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
