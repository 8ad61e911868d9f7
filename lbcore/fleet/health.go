package fleet

import (
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// health is whether a worker considers etcd up, and the calls of its own
// that tell: after FailLimit failed calls in a row etcd is down, and a
// probe every ProbeEvery asks whether it is back; while it is up, a
// heartbeat every HeartbeatEvery asks whether it still knows the worker's
// lease (known.go). One probe or heartbeat is in flight at a time.
//
// Calls in a row are calls sent one after the other's failure: the
// failures of calls sent before the last failure counted (calls under way
// together, which one slow moment of etcd or of the host fails at once)
// count as that one. So a burst of timeouts marks etcd down only when the
// calls sent after it fail too.
type health struct {
	fails     int
	failAt    time.Time // when the last failure in the run was counted (monotonic)
	down      bool
	probeAt   time.Time // the next probe of a down etcd (monotonic)
	recovered int64     // Unix second after the last recovery: hits used before it sync their key
	probing   bool      // a probe or heartbeat in flight

	beatAt    time.Time // when the last heartbeat was sent (monotonic)
	beatLease int64     // the lease beatBody asks after
	beatBody  []byte    // the heartbeat's body, made once per lease
	beatCall  fleetCall // the heartbeat in flight, made once
}

// answered ends a run of failures at wall-clock time now; back reports
// whether etcd was down until then.
func (h *health) answered(now time.Time) (back bool) {
	h.fails, h.failAt = 0, time.Time{}
	if !h.down {
		return false
	}
	h.down, h.recovered = false, now.Unix()+1
	return true
}

// failed adds the failure at mono of a call sent at mono sent to the run,
// unless the call was sent before the last failure counted; down reports
// whether it marked etcd down.
func (h *health) failed(mono, sent time.Time) (down bool) {
	if h.fails > 0 && sent.Before(h.failAt) {
		return false // under way with a call that failed: the same failure
	}
	h.fails, h.failAt = h.fails+1, mono
	if h.down {
		h.probeAt = mono.Add(ProbeEvery)
		return false
	}
	if h.fails >= FailLimit {
		h.down, h.probeAt = true, mono.Add(ProbeEvery)
		return true
	}
	return false
}

// probeDue reports whether a down etcd is to be probed at mono.
func (h *health) probeDue(mono time.Time) bool {
	return h.down && !h.probing && !mono.Before(h.probeAt)
}

// beatDue reports whether an etcd that is up is to be asked after the
// worker's lease at mono.
func (h *health) beatDue(mono time.Time) bool {
	return !h.down && !h.probing && mono.Sub(h.beatAt) >= HeartbeatEvery
}

// beatFor is the heartbeat's body asking after lease l.
func (h *health) beatFor(l int64) []byte {
	if h.beatLease != l {
		h.beatLease, h.beatBody = l, timeToLiveRequest(l)
	}
	return h.beatBody
}

// probe asks a down etcd whether it is back: an authenticate when the
// worker has credentials and no token, else a read of the prefix.
func (c *Client) probe(now time.Time) {
	if !c.health.probeDue(c.clk.mono) {
		return
	}
	switch {
	case c.root.needAuth() && !c.root.authing:
		c.health.probing = true
		c.authIn(c.cfg.Timeout).probe = true
	case !c.root.needAuth():
		c.health.probing = true
		c.rootCall(callProbe, "/v3/kv/range", c.out.rangeBody(c.out.prefixKey()))
	}
}

// heartbeat asks an etcd that is up, every HeartbeatEvery, whether it
// still knows this slot's lease (or the last one's, which outlives its
// slot by expire + slot), once the worker placed keys: its answer shows a
// loss of etcd's data even on a worker that only has hits. Without a lease
// it reads the prefix.
func (c *Client) heartbeat(now time.Time) {
	if c.root.needAuth() || c.known.len() == 0 || !c.health.beatDue(c.clk.mono) {
		return
	}
	c.health.probing, c.health.beatAt = true, c.clk.mono
	slot := c.slotOf(now.Unix())
	l := c.root.leaseFor(slot)
	if l == 0 {
		l = c.root.leaseFor(slot - 1)
	}
	if l == 0 {
		c.rootCall(callProbe, "/v3/kv/range", c.out.rangeBody(c.out.prefixKey()))
		return
	}
	c.rootCall(callAlive, "/v3/lease/timetolive", c.health.beatFor(l)).lease = l
}

// onProbe reads the answer (or err) of a probe or a heartbeat.
func (c *Client) onProbe(cl *fleetCall, now time.Time, body []byte, err error) {
	c.health.probing = false
	if cl.kind == callProbe {
		if err == nil {
			_, _, err = parseRange(body, &c.out.decodeBuf)
		}
		c.after(now, cl.sent, err)
		return
	}
	var known bool
	if err == nil {
		known, err = parseTimeToLive(body)
	}
	c.after(now, cl.sent, err)
	if err == nil && !known {
		c.lostLease(cl.lease, now)
	}
}

// retryable reports whether err is an answer of etcd that another call
// cures: a token it no longer accepts (authenticate again), a lease it no
// longer knows (grant another). etcd answered: such an answer is never a
// failure of etcd, on any path (transactions, syncs, grants, probes,
// heartbeats), and the call is tried again once the cure is in.
func retryable(err error) bool { return err == errAuthToken || err == errLeaseNotFound }

// after counts the outcome of a call sent at mono sent: a success, or an
// answer that asks for a retry (retryable), ends a run of failures (and a
// down etcd); a failure adds to it (health.failed).
func (c *Client) after(now, sent time.Time, err error) {
	if retryable(err) {
		if err == errAuthToken {
			c.root.token = ""
		}
		err = nil
	}
	switch err {
	case nil:
		if c.health.answered(now) {
			c.syncs.resting = false // the queue goes on at once
			c.out.log(false, "hashlb: fleet: etcd on cluster "+c.cluster()+
				" answers again; new keys are decided fleet-wide, and keys decided locally meanwhile are reconciled")
		}
		return
	case errAuthFailed:
		c.counts.Auth++
		c.logOnce(err, true, "hashlb: fleet: etcd on cluster "+c.cluster()+
			" refused the user "+quoteUser(c.root.user)+": wrong user or password (HASHLB_ETCD_USER, HASHLB_ETCD_PASSWORD); keys are decided locally")
	case errPermission:
		c.logOnce(err, true, "hashlb: fleet: etcd on cluster "+c.cluster()+": "+err.Error())
	case errAnswerTooLarge, errAnswerTooDeep:
		c.logOnce(errAnswerTooDeep, true, "hashlb: fleet: an answer of etcd on cluster "+c.cluster()+" was refused unread ("+
			err.Error()+"); such answers are failed calls, and this is logged once")
	}
	if err == errTimeout {
		c.counts.Timeout++
	} else {
		c.counts.Error++
	}
	if c.health.failed(c.clk.mono, sent) {
		c.out.log(true, "hashlb: fleet: etcd on cluster "+c.cluster()+
			" failed "+itoa(c.health.fails)+" times in a row (last: "+err.Error()+
			"); new keys are decided locally until it answers again (asked every "+lbcore.FormatDuration(ProbeEvery)+")")
	}
}
