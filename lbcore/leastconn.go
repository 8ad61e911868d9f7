package lbcore

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
