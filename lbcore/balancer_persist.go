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
		b.pkeyIP = len(p.Keys) == 1 && p.Keys[0].clientIPOnly() && b.x.hops <= 0
		if p.Fleet != nil {
			b.askFleet = true
		}
	}
}

// decidePersistent is the persistence table's decision: a hit on a
// selectable service wins over the method; on a miss the method chooses and
// the table records the choice, or, with ask, the method's choice is
// returned unstored for the caller to ask the fleet (Decision.Ask).
//
// It fills d, which must read as zero (a Decision returned by value is a
// bulk clear and copy in Wasm).
func (b *Balancer) decidePersistent(d *Decision, r *Request, now time.Time, ask bool) {
	key, empty, skipped := b.persistKeyOrSkip(d, r)
	if skipped {
		return
	}
	var fr firstRead
	if b.persistHit(d, r, &fr, key, empty, now) {
		return
	}
	chose, asked := false, false
	// selectable remembers the last service it found, so that a hit maps its
	// identity to an index once (a map lookup is dear in Wasm).
	seenID, seenIdx := uint64(0), -1
	selectable := func(id uint64) bool {
		i, known := b.ids[id]
		if !known {
			return false
		}
		seenID, seenIdx = id, i
		return b.selectable(i)
	}
	svc, ok := b.table.resolveInto(&d.Persist, &fr, PersistKeyHash(key), now, selectable,
		func() (uint64, bool) {
			chose = true
			b.redecideMethod(d, r)
			if d.Len() == 0 {
				return 0, false
			}
			if ask {
				asked = true
				return 0, false
			}
			return b.services[d.At(0)].ID, true
		})
	d.EmptyKey = empty
	if asked {
		d.Ask = true
		return
	}
	if !ok {
		d.Reason = ReasonNoService
		d.n = 0
		return
	}
	idx := seenIdx
	if idx < 0 || svc != seenID {
		idx = b.ids[svc]
	}
	if chose && d.Len() > 0 && d.At(0) == idx {
		return // the method's own choice was stored
	}
	// The table's service: a hit, or another worker's concurrent store.
	b.persistedInto(d, r, idx)
}

// persistKeyOrSkip is persistKey, or, for an empty key that persistence
// skips (emptyKey "skip"), skipped with the method's decision in d.
func (b *Balancer) persistKeyOrSkip(d *Decision, r *Request) (key []byte, empty, skipped bool) {
	key, empty = b.persistKey(r)
	if empty && b.cfg.Persistence.EmptyKey == "skip" {
		b.decideMethod(d, r)
		d.EmptyKey = true
		return key, empty, true
	}
	return key, empty, false
}

// persistKey evaluates the persistence key expressions for r into b.pkey
// (joined by 0x1f) and reports whether every one was empty.
func (b *Balancer) persistKey(r *Request) (key []byte, empty bool) {
	key, empty = b.pkey[:0], true
	if b.pkeyIP {
		// The key is ${client.ip} of a dotted quad: its own text, as the
		// expression writes it (exprVar.appendValue), without the calls.
		if txt, ok := ipv4Text(r.Source); ok {
			b.pkey = append(key, txt...)
			return b.pkey, false
		}
	}
	for i, e := range b.cfg.Persistence.Keys {
		if i > 0 {
			key = append(key, 0x1f)
		}
		n := len(key)
		key = e.appendEval(key, r, &b.x)
		empty = empty && len(key) == n
	}
	b.pkey = key
	return key, empty
}

// persistHit settles d from a live entry for key on a selectable service
// when the lookup writes nothing: the common case, without the closures
// resolveInto takes (RATIONALE.md, "Cost per request"). fr keeps what it
// read for resolveInto.
func (b *Balancer) persistHit(d *Decision, r *Request, fr *firstRead, key []byte, empty bool, now time.Time) bool {
	svc, last, hit := b.table.quickHit(fr, key, unixSeconds(now))
	if !hit {
		return false
	}
	i, known := b.ids[svc]
	if !known || !b.selectable(i) {
		return false
	}
	d.Persist.Hit, d.Persist.PrevUse, d.EmptyKey = true, last, empty
	b.persistedInto(d, r, i)
	return true
}

// redecideMethod has the method choose again inside a decision begun: what
// d reports of the table and the session so far stays (resolveInto may ask
// again after a lost race).
func (b *Balancer) redecideMethod(d *Decision, r *Request) {
	out, sess, svc := d.Persist, d.Session, d.sessSvc
	d.reset()
	d.Persist, d.Session, d.sessSvc = out, sess, svc
	b.decideMethod(d, r)
}

// persistedInto names service i, the table's, first in d, then the
// failover order.
func (b *Balancer) persistedInto(d *Decision, r *Request, i int) {
	d.Reason, d.Method, d.n = ReasonPersistence, b.cfg.LBMethod, 0
	d.add(i)
	if b.want > 1 {
		b.failover(d, r, i)
	}
}

// DecideLocal is Decide deciding a local miss locally even when the table
// has a fleet level: etcd is unreachable, slow, or in backoff.
func (b *Balancer) DecideLocal(r *Request, now time.Time) (d Decision) {
	if len(b.ramps) != 0 {
		b.SetTime(now)
	}
	b.begin(&d)
	switch {
	case b.sess != nil && b.sessionDecide(&d, r, now):
	case b.table != nil:
		b.decidePersistent(&d, r, now, false)
	default:
		b.decideMethod(&d, r)
		return d
	}
	d.Capped = b.x.capped
	return d
}

// DecideFleet stores service i, the fleet's answer for r's key, in the
// local table (replacing what it holds) and decides with it first. A valid
// session still wins. A service that is not selectable here is not stored:
// the request is then decided locally (DecideLocal).
func (b *Balancer) DecideFleet(r *Request, now time.Time, i int) (d Decision) {
	if b.table == nil || i < 0 || i >= len(b.services) || !b.selectable(i) {
		return b.DecideLocal(r, now)
	}
	if len(b.ramps) != 0 {
		b.SetTime(now)
	}
	b.begin(&d)
	if b.sess == nil || !b.sessionDecide(&d, r, now) {
		b.decideForced(&d, r, now, i)
	}
	d.Capped = b.x.capped
	return d
}

// decideForced stores service i for r's persistence key, replacing what
// the table holds, and names it first in d (which must read as zero). An
// empty key that persistence skips leaves the decision to the method.
func (b *Balancer) decideForced(d *Decision, r *Request, now time.Time, i int) {
	key, empty, skipped := b.persistKeyOrSkip(d, r)
	if skipped {
		return
	}
	forced := b.services[i].ID
	var fr firstRead
	svc, ok := b.table.resolveInto(&d.Persist, &fr, PersistKeyHash(key), now,
		func(id uint64) bool { return id == forced },
		func() (uint64, bool) { return forced, true })
	d.EmptyKey = empty
	if !ok {
		d.Reason = ReasonNoService
		d.n = 0
		return
	}
	b.persistedInto(d, r, b.ids[svc])
}

// remember stores service i for persistence key key in the local table,
// replacing what it holds: the fleet moved the key.
func (b *Balancer) remember(key []byte, now time.Time, i int) {
	b.RememberHash(PersistKeyHash(key), now, i)
}

// RememberHash is remember for the key whose PersistKeyHash is h.
func (b *Balancer) RememberHash(h uint64, now time.Time, i int) {
	if b.table == nil || i < 0 || i >= len(b.services) {
		return
	}
	b.table.Put(h, now, b.services[i].ID)
}

// AskKey is the persistence key of the last decision (valid until the next
// one): the key a Decision.Ask names.
func (b *Balancer) AskKey() []byte { return b.pkey }

// failover appends the failover order after a persisted choice: the hash
// method's ranking when the request has its input, else the decision counter's.
func (b *Balancer) failover(d *Decision, r *Request, chosen int) {
	if b.keyer == nil {
		b.addRest(d, chosen)
		return
	}
	if key, ok, inPlace := keyInRequest(b.keyer, r); inPlace {
		if !ok {
			b.addRest(d, chosen)
			return
		}
		b.addRanked(d, xxhash.Sum64String(key), chosen)
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
