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
