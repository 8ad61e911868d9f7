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
			b.onMiss = persistAsk
		}
	}
}

// persistMode says what decidePersistent does on a local miss.
type persistMode uint8

const (
	persistLocal persistMode = iota // the method chooses and the table stores it (no fleet, or etcd unreachable)
	persistAsk                      // the method proposes, nothing is stored: Decision.Ask
	persistForce                    // the fleet's service is stored, replacing what the table has
	methodOnly                      // the method alone, within a decision begun (Balancer.decide)
)

// decidePersistent consults the persistence table: a hit on a selectable
// service wins over the method, a miss lets the method choose and records
// the choice (persistLocal), or returns the method's choice unstored for the
// caller to ask the fleet (persistAsk). With persistForce, service force
// replaces whatever the table holds for the key.
//
// It fills d, which must read as zero (a Decision returned by value is a
// bulk clear and copy in Wasm).
func (b *Balancer) decidePersistent(d *Decision, r *Request, now time.Time, mode persistMode, force int) {
	p := b.cfg.Persistence
	key, empty := b.pkey[:0], true
	fast := false
	if b.pkeyIP {
		// The key is ${client.ip} of a dotted quad: its own text, as the
		// expression writes it (exprVar.appendValue), without the calls.
		if txt, ok := ipv4Text(r.Source); ok {
			key, empty, fast = append(key, txt...), false, true
		}
	}
	for i, e := range p.Keys {
		if fast {
			break
		}
		if i > 0 {
			key = append(key, 0x1f)
		}
		n := len(key)
		key = e.appendEval(key, r, &b.x)
		empty = empty && len(key) == n
	}
	b.pkey = key
	if empty && p.EmptyKey == "skip" {
		b.decide(d, r, now, methodOnly, 0)
		d.EmptyKey = true
		return
	}
	// The common case first: a hit that writes nothing, without the
	// closures Resolve takes (RATIONALE.md, "Cost per request").
	var fr firstRead
	if mode != persistForce {
		if svc, last, hit := b.table.quickHit(&fr, key, unixSeconds(now)); hit {
			if i, known := b.ids[svc]; known && b.selectable(i) {
				d.Persist.Hit, d.Persist.PrevUse, d.EmptyKey = true, last, empty
				d.Reason, d.Method, d.n = ReasonPersistence, b.cfg.LBMethod, 0
				d.add(i)
				if b.want > 1 {
					b.failover(d, r, i)
				}
				return
			}
		}
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
	if mode == persistForce {
		forced := b.services[force].ID
		selectable = func(id uint64) bool { return id == forced }
	}
	svc, ok := b.table.resolveInto(&d.Persist, &fr, PersistKeyHash(key), now, selectable,
		func() (uint64, bool) {
			if mode == persistForce {
				return b.services[force].ID, true
			}
			chose = true
			// Resolve may ask again after a lost race; what it has
			// reported so far in d.Persist stays.
			out, sess, svc := d.Persist, d.Session, d.sessSvc
			d.reset()
			d.Persist, d.Session, d.sessSvc = out, sess, svc
			b.decide(d, r, now, methodOnly, 0)
			if d.Len() == 0 {
				return 0, false
			}
			if mode == persistAsk {
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
	// The table's service (a hit, another worker's concurrent store, or
	// the fleet's).
	d.Reason, d.Method, d.n = ReasonPersistence, b.cfg.LBMethod, 0
	d.add(idx)
	if b.want > 1 {
		b.failover(d, r, idx)
	}
}

// DecideLocal is Decide deciding a local miss locally even when the table
// has a fleet level: etcd is unreachable, slow, or in backoff.
func (b *Balancer) DecideLocal(r *Request, now time.Time) (d Decision) {
	b.decide(&d, r, now, persistLocal, 0)
	return d
}

// DecideFleet stores service i, the fleet's answer for r's key, in the
// local table (replacing what it holds) and decides with it first. A
// service that is not selectable here is not stored: the request is then
// decided locally (DecideLocal).
func (b *Balancer) DecideFleet(r *Request, now time.Time, i int) Decision {
	if b.table == nil || i < 0 || i >= len(b.services) || !b.selectable(i) {
		return b.DecideLocal(r, now)
	}
	var d Decision
	b.decide(&d, r, now, persistForce, i)
	return d
}

// Remember stores service i for persistence key key in the local table,
// replacing what it holds: the fleet moved the key.
func (b *Balancer) Remember(key []byte, now time.Time, i int) {
	b.RememberHash(PersistKeyHash(key), now, i)
}

// RememberHash is Remember for the key whose PersistKeyHash is h.
func (b *Balancer) RememberHash(h uint64, now time.Time, i int) {
	if b.table == nil || i < 0 || i >= len(b.services) {
		return
	}
	id := b.services[i].ID
	var out Outcome
	b.table.resolveInto(&out, nil, h, now, func(s uint64) bool { return s == id }, func() (uint64, bool) { return id, true })
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
	key, ok := b.keyer.AppendKey(b.buf[:0], r, &b.x)
	b.buf = key[:0]
	if !ok {
		b.addRest(d, chosen)
		return
	}
	b.addRanked(d, xxhash.Sum64(key), chosen)
}
