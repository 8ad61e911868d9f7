package fleet

import (
	"strings"
	"time"
)

// Divert: a key the fleet holds on a live service this proxy cannot use
// (not selectable here, or not in its configuration) is served on its
// second choice, and goes back to the fleet's service once it is
// selectable here again.

// DivertMax bounds the keys a worker remembers as diverted (divert): past
// it, a key served on its second choice goes back to the fleet's service
// at its next refresh (the first hit in a later slot) instead of the next
// tick.
const DivertMax = 4096

// diverted is a key served on its second choice: the fleet's service for
// it (its identity), in a record stamped at Unix second stamp.
type diverted struct {
	id    string
	stamp int64
}

// divertSet is the keys a worker serves on their second choice, by
// lbcore.PersistKeyHash, at most DivertMax.
type divertSet map[uint64]diverted

// note remembers the key of hash h as served off the fleet's service id
// (identity, from a record stamped stamp): a key already noted on id
// takes the newer stamp; past DivertMax keys a new one is not noted.
func (s *divertSet) note(h uint64, id string, stamp int64) {
	if d, ok := (*s)[h]; ok && d.id == id {
		(*s)[h] = diverted{d.id, stamp}
		return
	}
	if len(*s) >= DivertMax {
		return
	}
	if *s == nil {
		*s = divertSet{}
	}
	(*s)[h] = diverted{strings.Clone(id), stamp}
}

// divert goes on with o, whose key the fleet holds on a live service this
// proxy cannot use, with the key's second choice (its alt key): the
// fleet's record is left as it is, for the proxies that can use its
// service, and this proxy serves the second choice, created with its
// proposal by the first proxy that could not use the first. A worker over
// the create budget only reads it. The key is remembered as diverted: once
// the fleet's service is selectable here again, the tick moves the local
// entry back to it (undivert).
func (c *Client) divert(o *fleetOp, kv etcdKV, now time.Time) {
	rec, _ := ParseRecord(kv.Value)
	c.noteDiverted(o.h, rec.Service, rec.Stamp)
	c.counts.Diverted++
	o.alt, o.rev, o.creates, o.replaces = true, 0, 0, 0
	c.next(o, now)
}

// noteDiverted remembers the key of hash h as served off the fleet's
// service id (divertSet.note); a stopped client passes it on.
func (c *Client) noteDiverted(h uint64, id string, stamp int64) {
	if c.stopped {
		if c.succ != nil {
			c.succ.noteDiverted(h, id, stamp)
		}
		return
	}
	c.diverted.note(h, id, stamp)
}

// undivert moves back the local entries of diverted keys whose fleet
// service is selectable here again (Remember), and forgets those whose
// record has expired. The tick runs it: after a service comes back on this
// proxy (its configuration or its health view), its keys agree with the
// fleet within one tick.
func (c *Client) undivert(now time.Time) {
	for h, d := range c.diverted {
		if !c.alive(d.stamp, now) {
			delete(c.diverted, h)
			continue
		}
		if i, ok := c.svcs.ServiceByKey(d.id); ok && c.svcs.Selectable(i) {
			delete(c.diverted, h)
			c.know(h, i, now.Unix())
			c.out.Remember = append(c.out.Remember, Remember{Hash: h, Service: i})
		}
	}
}

// Diverted is how many keys the worker serves on their second choice.
func (c *Client) Diverted() int { return len(c.diverted) }
