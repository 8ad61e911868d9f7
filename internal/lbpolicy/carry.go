package lbpolicy

import "github.com/hashlb/hashlb/lbcore"

// carryAddedMax is the most hosts a change of the view may add to those
// served for the choices remembered before it to be kept: each kept choice
// is checked against every added host, and past a few the check costs more
// than the choices it would keep.
const carryAddedMax = 16

// CacheCarry says which choices remembered under an earlier view of the
// hosts (a cache's, Worker.CarryFrom) are still the choice in the current
// view, and where their hosts are now. Rendezvous hashing ranks each host
// by a score of the key and the host alone, so a change of the hosts moves
// a key only when its host is no longer served or a host added to those
// served outranks it; every other key keeps its host.
type CacheCarry struct {
	w *Worker
	// to[i] is the current index of the earlier view's host i when it is
	// served in both views, else -1.
	to []int32
	// added are the hosts served now that the earlier view did not serve
	// (new hosts, and hosts healthy again).
	added []int
	req   lbcore.Request
}

// Keep reports whether the choice of host (an index among the earlier
// view's hosts) for the :path key path is still lbcore's, and then the
// host's index among the current view's hosts and among priority 0's
// healthy hosts.
func (c *CacheCarry) Keep(path string, host int) (nhost, healthy int, ok bool) {
	if host < 0 || host >= len(c.to) || c.to[host] < 0 {
		return 0, 0, false
	}
	j := int(c.to[host])
	if len(c.added) > 0 {
		c.req.Target = path
		k, ok := c.w.bal.KeyHash(&c.req)
		c.req.Target = ""
		if !ok {
			return 0, 0, false
		}
		for _, a := range c.added {
			if c.w.bal.Outranks(k, a, j) {
				return 0, 0, false
			}
		}
	}
	return j, int(c.w.v.hidx[j]), true
}

// carryBase is the view a cache was last given (CarryFrom): its
// generation, host set, Balancer, and the hosts it served.
type carryBase struct {
	gen    uint32
	hs     *hostSet
	bal    *lbcore.Balancer
	serve  int
	served []bool
}

// CarryFrom returns how the choices remembered under the view of
// generation gen carry to the current view (View), or nil when none can be
// kept: gen is not the view CarryFrom last returned to (or the first call),
// either view serves a priority other than 0, a host's weight changed, the
// scores changed (lbcore.Balancer.ScoresLike), a host ramps up (slow start),
// or more than a few hosts are added to those served. The current view is
// what the next call carries from. The CacheCarry is valid until the next
// call.
func (w *Worker) CarryFrom(gen uint32) *CacheCarry {
	c := w.carry(gen)
	cur, _ := w.View()
	served := w.base.served[:0] // the carry is made: the earlier view is done with
	for i := range w.v.hidx {
		served = append(served, w.v.serving(i))
	}
	w.base = carryBase{gen: cur, hs: w.v.hs, bal: w.bal, serve: w.v.serve, served: served}
	w.lastCarry, w.lastFrom = lbcore.Carry{}, nil
	return c
}

// carry is CarryFrom's carry from w.base, the earlier view.
func (w *Worker) carry(gen uint32) *CacheCarry {
	prev := &w.base
	if gen == 0 || gen != prev.gen || prev.bal == nil || w.bal == nil ||
		prev.serve != 0 || w.v.serve != 0 || w.bal.AnyRamping() || !w.bal.ScoresLike(prev.bal) {
		return nil
	}
	c := &w.cc
	*c = CacheCarry{w: w, to: c.to[:0], added: c.added[:0]}
	for range prev.served {
		c.to = append(c.to, -1)
	}
	// add notes host j served now and not before; false past carryAddedMax.
	add := func(j int) bool {
		c.added = append(c.added, j)
		return len(c.added) <= carryAddedMax
	}
	if prev.hs == w.v.hs { // the same hosts: their health alone changed
		for i, was := range prev.served {
			switch now := w.v.serving(i); {
			case was && now:
				c.to[i] = int32(i)
			case now && !add(i):
				return nil
			}
		}
		return c
	}
	olds, news := prev.bal.Config().Services, w.bal.Config().Services
	from := w.lastCarry.From // Update's, when it is from the earlier view
	if w.lastFrom != prev.hs || len(from) != len(news) {
		from = prev.bal.Carry(news).From
	}
	for j, i := range from {
		now := w.v.serving(j)
		if i < 0 {
			if now && !add(j) {
				return nil
			}
			continue
		}
		if olds[i].Weight != news[j].Weight || olds[i].Enabled != news[j].Enabled {
			return nil
		}
		switch was := prev.served[i]; {
		case was && now:
			c.to[i] = int32(j)
		case now && !add(j):
			return nil
		}
	}
	return c
}
