package lbcore

// roundRobin is smooth weighted round robin (the algorithm nginx uses): every
// pick adds each selectable service's weight to its current value, takes the
// largest, and subtracts the total from it. Over Σweight picks each service is
// chosen weight times, interleaved rather than in runs. The failover order
// after the pick is the rendezvous rank of the decision counter.
func (b *Balancer) roundRobin(d *Decision) {
	best, total := -1, int64(0)
	for i := range b.services {
		if !b.selectable(i) {
			continue
		}
		w := int64(b.services[i].Weight)
		total += w
		b.rr[i] += w
		if best < 0 || b.rr[i] > b.rr[best] {
			best = i
		}
	}
	if best < 0 {
		d.Reason = ReasonNoService
		return
	}
	b.rr[best] -= total
	d.add(best)
	b.addRest(d, best)
}

// addRest appends the failover order after chosen: every other selectable
// service by rendezvous rank of the decision counter.
func (b *Balancer) addRest(d *Decision, chosen int) { b.addRanked(d, mix(b.seq), chosen) }

// addRanked appends every selectable service but chosen, in rendezvous order
// for key hash k, until the decision names b.want services.
func (b *Balancer) addRanked(d *Decision, k uint64, chosen int) {
	if d.n >= b.want {
		return
	}
	n := b.fill(k)
	for j := 0; j < n && d.n < b.want; j++ {
		if i := b.next(j); i != chosen {
			d.add(i)
		}
	}
}

// leastConnection picks the selectable service with the fewest active
// requests per unit of weight. Ties, the common case when traffic is light,
// are broken by the rendezvous rank of the decision counter, so equal loads
// still spread instead of all landing on the first service in the list.
func (b *Balancer) leastConnection(d *Decision) {
	n := b.fill(mix(b.seq))
	if n == 0 {
		d.Reason = ReasonNoService
		return
	}
	c := b.cand
	for j := 0; j < n && d.n < b.want; j++ {
		best := j
		for i := j + 1; i < n; i++ {
			if b.lessLoaded(c[i], c[best]) {
				best = i
			}
		}
		c[j], c[best] = c[best], c[j]
		d.add(c[j].idx)
	}
}

// lessLoaded orders by active/weight (compared without division), then by
// rendezvous score.
func (b *Balancer) lessLoaded(x, y candidate) bool {
	lx := b.active[x.idx] * int64(b.services[y.idx].Weight)
	ly := b.active[y.idx] * int64(b.services[x.idx].Weight)
	if lx != ly {
		return lx < ly
	}
	return b.better(x, y)
}
