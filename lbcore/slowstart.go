package lbcore

import (
	"math"
	"time"
)

// Slow start (Config.SlowStart): a service that joins the pool ranks with an
// effective weight, weight × Fraction(elapsed), that grows from a floor to
// its weight. Ranking is weighted rendezvous (hrw.go), where a service's
// score for a key depends on its own weight alone: lowering one service's
// weight changes no other service's score, so the order of the others for
// every key stays what it is, and as the effective weight grows the service
// only ever overtakes others. Every key that moves during a ramp moves to
// the ramping service, and at its end the ranking is the one without slow
// start (RATIONALE.md, "Slow start").
//
// What starts a ramp: a service becoming pickable (SetDown bringing it
// back, Continue for a service a new configuration adds, enables or raises
// from weight 0), once the Balancer's lineage has decided (started): at a
// proxy's start every service takes its full share at once, as HAProxy and
// NetScaler do. A ramp is stamped with the first time the Balancer is
// given after it started (a decision's now, or SetTime): before that the
// service has taken no key. A service that goes DOWN ends its ramp.
//
// While a service ramps, decisions rank every service in full (fillRamp):
// the unit-weight pass and the rank cache assume fixed weights, so they are
// set aside and come back when the last ramp ends. With no ramp a decision
// pays one comparison (DecideInto).

// Fraction is the share of its weight a service ranks with elapsed after
// its ramp started: max(MinWeightPercent/100, min(1, t/Window)), where t is
// elapsed, or with Step the end of the step elapsed is in. 1 ends the ramp.
func (s *SlowStart) Fraction(elapsed time.Duration) float64 {
	floor := float64(s.MinWeightPercent) / 100
	if elapsed < 0 { // the clock went back: the ramp is at its start
		elapsed = 0
	}
	t := elapsed
	if s.Step > 0 {
		t = (elapsed/s.Step + 1) * s.Step
	}
	if t >= s.Window {
		return 1
	}
	return max(floor, float64(t)/float64(s.Window))
}

// Length is how long after its start a ramp reaches the full weight:
// window, or with step the start of the step whose end reaches it.
func (s *SlowStart) Length() time.Duration {
	if s.Step <= 0 {
		return s.Window
	}
	return (s.Window+s.Step-1)/s.Step*s.Step - s.Step
}

// rampState is one service's ramp.
type rampState struct {
	from    time.Time // when the ramp started
	pending bool      // started, not yet stamped: from is the next time the Balancer is given
}

// started reports whether the Balancer's lineage has decided: this Balancer
// (its decision counter moved) or one it continues.
func (b *Balancer) started() bool { return b.lived || b.seq != b.seq0 }

// Ramping reports whether service i is in a ramp, the fraction of its
// weight it ranks with and when the ramp started (zero while it waits for
// the Balancer's next time).
func (b *Balancer) Ramping(i int) (fraction float64, since time.Time, ok bool) {
	if b.frac == nil || b.frac[i] >= 1 {
		return 1, time.Time{}, false
	}
	return b.frac[i], b.ramp[i].from, true
}

// AnyRamping reports whether a service is in a ramp: the Balancer's
// decisions then change with time alone, so a host that remembers them
// (the policy's choice cache) must not while it is true.
func (b *Balancer) AnyRamping() bool { return len(b.ramps) != 0 }

// Ramp puts service i in a ramp that started at since, as if it had joined
// then (hashlb explain's -ramp; a host that knows when a service joined).
// It does nothing without slowStart, for a service that is not pickable, or
// when the ramp would already be over at since.
func (b *Balancer) Ramp(i int, since time.Time) {
	if b.frac == nil || !b.pickable(i) {
		return
	}
	b.startRamp(i)
	if b.frac[i] < 1 {
		b.ramp[i] = rampState{from: since}
	}
}

// SetTime gives the Balancer the time for slow start: pending ramps are
// stamped with now and every ramp's fraction is set for now; ramps that are
// over end. DecideInto calls it while a service ramps; a host may call it
// at a tick so that a ramp starts on time without a request.
func (b *Balancer) SetTime(now time.Time) {
	if len(b.ramps) == 0 {
		return
	}
	s := b.cfg.SlowStart
	for j := 0; j < len(b.ramps); {
		i := b.ramps[j]
		r := &b.ramp[i]
		if r.pending {
			r.from, r.pending = now, false
		}
		f := s.Fraction(now.Sub(r.from))
		if f < 1 {
			b.frac[i] = f
			j++
			continue
		}
		b.frac[i] = 1
		last := len(b.ramps) - 1
		b.ramps[j] = b.ramps[last]
		b.ramps = b.ramps[:last]
	}
	if len(b.ramps) == 0 {
		b.unitPass, b.cache = b.baseUnit, b.baseCache
	}
}

// startRamp starts service i's ramp, pending its stamp: it ranks at the
// floor until then. The unit-weight pass and the rank cache are set aside.
func (b *Balancer) startRamp(i int) {
	s := b.cfg.SlowStart
	if b.frac == nil || s.MinWeightPercent >= 100 {
		return
	}
	if b.frac[i] >= 1 {
		b.ramps = append(b.ramps, int32(i))
	}
	b.ramp[i] = rampState{pending: true}
	b.frac[i] = s.Fraction(0)
	b.unitPass, b.cache = false, nil
}

// stopRamp ends service i's ramp, if it has one: it went DOWN.
func (b *Balancer) stopRamp(i int) {
	if b.frac == nil || b.frac[i] >= 1 {
		return
	}
	b.frac[i] = 1
	for j, x := range b.ramps {
		if int(x) == i {
			last := len(b.ramps) - 1
			b.ramps[j] = b.ramps[last]
			b.ramps = b.ramps[:last]
			break
		}
	}
	if len(b.ramps) == 0 {
		b.unitPass, b.cache = b.baseUnit, b.baseCache
	}
}

// Continue makes b, built for a new configuration, go on from prev, the
// Balancer of the configuration it replaces (c = prev.Carry(b's services)):
// a service in a ramp in prev goes on with it; a service prev did not have,
// or had but could not pick (DOWN, disabled, weight 0), and b can pick
// starts one. Nothing ramps when prev never decided (the proxy's start) or
// without slowStart. Call it before giving b the services' health: a
// service the host then marks DOWN ends its ramp, and starts one when it
// comes back.
func (b *Balancer) Continue(prev *Balancer, c *Carry) {
	if prev == nil || !prev.started() {
		return
	}
	b.lived = true
	if b.frac == nil {
		return
	}
	for i, j := range c.From {
		if !b.pickable(i) {
			continue
		}
		switch {
		case j < 0 || j >= len(prev.services) || !prev.pickable(j):
			b.startRamp(i)
		case prev.frac != nil && prev.frac[j] < 1:
			b.startRamp(i)
			b.ramp[i], b.frac[i] = prev.ramp[j], prev.frac[j]
		}
	}
}

// rankScore is service i's score for key hash k as a decision ranks it:
// score, or for a ramping service the score of its effective weight.
func (b *Balancer) rankScore(k uint64, i int) uint64 {
	if b.frac == nil || b.frac[i] >= 1 {
		return b.score(k, i)
	}
	return b.rampScore(k, i)
}

// rampScore is the score of ramping service i for key hash k: that of its
// effective weight, on the scale of the others' scores.
func (b *Balancer) rampScore(k uint64, i int) uint64 {
	s := &b.services[i]
	f := b.frac[i]
	if !b.uniform {
		return math.Float64bits(weightedScore(k, s.ID, float64(s.Weight)*f))
	}
	// Unit weights compare raw scores. A service of weight f·w among
	// services of weight w beats one of unit score u' when u^(1/f) > u'
	// (-f·w/ln u > -w/ln u'), so u^(1/f), scaled as a raw score, is its
	// score among theirs, and theirs are left exactly as they are.
	e := math.Exp(math.Log(unitScore(mix(k^s.ID))) / f)
	if e >= 1 {
		return math.MaxUint64
	}
	return uint64(e * 0x1p64)
}

// fillRamp is fill while a service ramps: every selectable service scored
// by rankScore.
func (b *Balancer) fillRamp(k uint64) int {
	c := b.cand[:len(b.services)]
	es := b.rank[:len(b.services)]
	n := 0
	for i := range es {
		if es[i].mask == 0 {
			continue
		}
		var s uint64
		switch {
		case b.frac[i] < 1:
			s = b.rampScore(k, i)
		case b.uniform:
			s = mix(k ^ es[i].id)
		default:
			s = b.score(k, i)
		}
		c[n] = candidate{idx: i, score: s}
		n++
	}
	b.cand = c[:n]
	return n
}
