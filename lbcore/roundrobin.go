package lbcore

// roundRobin is smooth weighted round robin (the algorithm nginx uses): every
// pick adds each selectable service's weight to its current value, takes the
// largest, and subtracts the total from it. Over Σweight picks each service is
// chosen weight times, interleaved rather than in runs. The failover order
// after the pick is the rendezvous rank of the decision counter.
func (b *Balancer) roundRobin(d *Decision) {
	best := b.rrPick()
	if best < 0 {
		d.Reason = ReasonNoService
		return
	}
	d.add(best)
	b.addRest(d, best)
}

// rrPick is one pick of smooth weighted round robin: it moves the current
// weights on and returns the service picked, or -1 when none is selectable.
func (b *Balancer) rrPick() int {
	best, total := -1, int64(0)
	for i := range b.services {
		if !b.pickable(i) {
			continue
		}
		w := int64(b.services[i].Weight)
		total += w
		b.rr[i] += w
		if best < 0 || b.rr[i] > b.rr[best] {
			best = i
		}
	}
	if best >= 0 {
		b.rr[best] -= total
	}
	return best
}

// rrAdvance moves the round robin on by k picks, as k calls of rrPick. When
// every selectable service has the same weight w it does so in one pass:
// picks then go through the m selectable services in index order (ties go
// to the first), so after k = q·m + r picks the j-th of them was picked
// q+1 times for j < r and q times otherwise, and its current weight is
// k·w − picks·m·w. A new Balancer of 10^4 services advances by up to 1023
// picks, which one by one cost 10^7 steps (lbcore BenchmarkConfigure).
func (b *Balancer) rrAdvance(k uint64) {
	if k == 0 {
		return
	}
	m, w := int64(0), -1
	for i := range b.services {
		if !b.pickable(i) {
			continue
		}
		if w >= 0 && b.services[i].Weight != w {
			m = -1
			break
		}
		w = b.services[i].Weight
		m++
	}
	if m <= 0 || b.rrMoved() {
		for ; k > 0; k-- {
			b.rrPick()
		}
		return
	}
	q, r, j := int64(k)/m, int64(k)%m, int64(0)
	for i := range b.services {
		if !b.pickable(i) {
			continue
		}
		picks := q
		if j < r {
			picks++
		}
		b.rr[i] += int64(k)*int64(w) - picks*m*int64(w)
		j++
	}
}

// rrMoved reports whether any current weight is not zero (the closed form
// of rrAdvance starts from all zero).
func (b *Balancer) rrMoved() bool {
	for _, v := range b.rr {
		if v != 0 {
			return true
		}
	}
	return false
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
