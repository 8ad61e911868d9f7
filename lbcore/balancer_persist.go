package lbcore

import (
	"time"

	"github.com/cespare/xxhash/v2"
)

// EnablePersistence attaches the TR7 persistence table, stored in s under
// namespace (for example "hashlb/<plugin root id>", so that two hashlb
// plugins of one proxy keep separate tables). It does nothing when the
// configuration has no persistence block.
func (b *Balancer) EnablePersistence(s Store, namespace string) {
	if p := b.cfg.Persistence; p != nil {
		b.table = NewTable(s, namespace, p.TableSize, p.Expire)
	}
}

// decidePersistent consults the persistence table: a hit on a selectable
// service wins over the method, a miss lets the method choose and records
// the choice.
func (b *Balancer) decidePersistent(r *Request, now time.Time) Decision {
	p := b.cfg.Persistence
	key, empty := b.pkey[:0], true
	for i, e := range p.Keys {
		if i > 0 {
			key = append(key, 0x1f)
		}
		n := len(key)
		key = e.appendEval(key, r, &b.x)
		empty = empty && len(key) == n
	}
	b.pkey = key[:0]
	if empty && p.EmptyKey == "skip" {
		d := b.decideMethod(r)
		d.EmptyKey = true
		return d
	}
	var d Decision
	chose := false
	svc, ok, out := b.table.Resolve(key, now,
		func(id uint64) bool {
			i, known := b.ids[id]
			return known && b.selectable(i)
		},
		func() (uint64, bool) {
			chose = true
			d = b.decideMethod(r)
			if d.Len() == 0 {
				return 0, false
			}
			return b.services[d.At(0)].ID, true
		})
	d.Persist, d.EmptyKey = out, empty
	if !ok {
		d.Reason = ReasonNoService
		d.n = 0
		return d
	}
	idx := b.ids[svc]
	if chose && d.Len() > 0 && d.At(0) == idx {
		return d // the method's own choice was stored
	}
	// The table's service (a hit, or another worker's concurrent store).
	d.Reason, d.Method, d.n = ReasonPersistence, b.cfg.LBMethod, 0
	d.add(idx)
	if b.want > 1 {
		b.failover(&d, r, idx)
	}
	return d
}

// failover appends the failover order after a persisted choice: the hash
// method's ranking when the request has its input, else the decision counter's.
func (b *Balancer) failover(d *Decision, r *Request, chosen int) {
	if b.keyer == nil {
		b.addRest(d, chosen)
		return
	}
	key, ok := b.keyer.AppendKey(b.buf[:0], r, &b.x)
	b.buf = key[:0]
	if !ok {
		b.addRest(d, chosen)
		return
	}
	b.addRanked(d, xxhash.Sum64(key), chosen)
}
