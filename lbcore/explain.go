package lbcore

import (
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"
)

// ServiceState is a service's standing in an Explanation.
// Exported as the type of Explanation.States and RankedService.State.
type ServiceState uint8

// The service states.
// Each is exported with its type, whether or not a package outside names
// it.
const (
	// StateSelectable: enabled and not DOWN; the service may be chosen.
	StateSelectable ServiceState = iota
	// StateDisabled: "enabled": false in the configuration.
	StateDisabled
	// StateDown: taken out by health checks (Balancer.SetDown).
	StateDown
)

var stateNames = [...]string{"selectable", "disabled", "DOWN"}

// String returns "selectable", "disabled" or "DOWN".
func (s ServiceState) String() string { return nameOf(stateNames[:], int(s)) }

// RankedService is one service of an Explanation's ranking.
//
// Its fields are exported as one record, whether or not a package outside
// reads each one.
type RankedService struct {
	// Index is the service's index in Config.Services.
	Index int
	// Rank is the 1-based rank among selectable services; 0 for a service
	// that is not selectable (it keeps its place by score in the ranking,
	// which is where it returns when it is selectable again).
	Rank int
	// Score is the rendezvous score of KeyHash and ID with unit weight.
	Score uint64
	// Weighted is the weighted score -weight/ln(u) the ranking compares when
	// the services' weights differ (Explanation.Weighted); 0 otherwise.
	Weighted float64
	// State says whether the service may be chosen.
	State ServiceState
}

// PersistExplanation is what the persistence table does with a request.
type PersistExplanation struct {
	// Values are the values of Persistence.Keys, in order.
	Values [][]byte
	// Key is the table's key: Values joined with 0x1f.
	Key []byte
	// Empty: every key expression was empty. With emptyKey "skip" the
	// request is balanced by lbMethod and not persisted; with "shared" it
	// uses the one entry of the empty key.
	Empty bool
	// Stored: an empty table stores the decision's first service under Key
	// (a miss; later requests with the key go there while it is selectable).
	Stored bool
}

// Explanation says how a request is decided, step by step, for operators
// asking why a request went where it went (hashlb explain). It is computed
// by the Balancer's own code on a copy of its state, so it cannot disagree
// with Decide.
//
// Its fields are exported as one record, whether or not a package outside
// reads each one.
type Explanation struct {
	// Method is lbMethod.
	Method Method
	// Reads is what the method reads from the request (its inputs, the token
	// expression's and the client address's), to name what was missing.
	Reads Inputs
	// HasInput: lbMethod hashes and the request carries its input. False for
	// LEASTCONNECTION and ROUNDROBIN, which have no input.
	HasInput bool
	// Key is the hash input, exactly the bytes hashed (after hashLength,
	// masks and normalisation); nil without input.
	Key []byte
	// KeyHash is xxhash64(Key).
	KeyHash uint64
	// Weighted: the services' weights differ, or one ramps (Ramps), so the
	// ranking compares RankedService.Weighted instead of the unit Score.
	Weighted bool
	// Ranking is every service in rank order for KeyHash, when HasInput; the
	// ones not selectable are in their place with Rank 0.
	Ranking []RankedService
	// States is every service's state, in configuration order.
	States []ServiceState
	// Decision is what Decide returns for the request on this Balancer in
	// its present state (for a fresh Balancer: a fresh worker's choice), with
	// an empty persistence table. Decision.Method is the method that chose,
	// Decision.Capped says whether an input cap was hit.
	Decision Decision
	// Backup is the method that chooses when the hash method has no input:
	// backupLBMethod, or the method's own (URLHASH without a URL is balanced
	// round robin, as Citrix does; then OwnBackup is true).
	Backup    Method
	OwnBackup bool
	// WorkerState: the choice depends on the worker's state, not on the
	// request alone (a round-robin position, the decision counter that
	// breaks least-connection ties and orders their failover, active
	// requests under bounded load): another worker may choose otherwise.
	WorkerState bool
	// Persistence is set when the configuration has persistence.
	Persistence *PersistExplanation
	// Session is set when the configuration has a session block.
	Session *SessionExplanation
	// Ramps are the services in a slow-start ramp at the decision's time,
	// in configuration order.
	Ramps []RampExplanation
}

// RampExplanation is where a service is in its slow-start ramp.
//
// Its fields are exported as one record, whether or not a package outside
// reads each one.
type RampExplanation struct {
	// Index is the service's index in Config.Services.
	Index int
	// Fraction is the share of its weight it ranks with; Effective is
	// weight × Fraction, the weight the ranking uses.
	Fraction, Effective float64
	// Since is when the ramp started, Ends when it reaches the full weight.
	Since, Ends time.Time
}

// SessionExplanation is what a request's session came to, and what the
// response carries.
//
// Its fields are exported as one record, whether or not a package outside
// reads each one.
type SessionExplanation struct {
	// Value is the session value the request carried; Found is false when
	// it carried none.
	Value string
	Found bool
	// Checked is false when the Balancer has no key (EnableSession was not
	// called): the value was not checked and Decision ignores it.
	Checked bool
	// State is Decision.Session.
	State SessionState
	// Service is the index of the service a signed value names, or -1.
	Service int
	// Issued and LastUse are a signed value's times; Expires is when
	// absoluteTimeout ends it, IdleEnds when idleTimeout would (zero
	// without one).
	Issued, LastUse, Expires, IdleEnds time.Time
	// Header is what the response adds: set-cookie or the session header,
	// and its value; empty when it sets nothing (Decision.SetsSession).
	Header [2]string
}

// Explain returns how Decide would decide r at now, without changing the
// Balancer: the decision is made on a copy of its state (health, active
// requests, round-robin position, decision counter) with an empty
// persistence table in memory, so a later Decide is unaffected and a table
// the Balancer has is neither read nor written.
func (b *Balancer) Explain(r *Request, now time.Time) Explanation {
	c := b.cfg
	e := Explanation{
		Method:    c.LBMethod,
		Backup:    b.backup.method,
		OwnBackup: b.method.ownBackup,
		Weighted:  !b.uniform,
	}
	client := c.methodInputs(&e.Reads)
	if c.Token != nil {
		client = c.Token.addInputs(&e.Reads) || client
	}
	if client {
		c.clientInputs(&e.Reads)
	}

	for i := range b.services {
		e.States = append(e.States, b.state(i))
	}
	w := b.copyState()
	e.Decision = w.Decide(r, now)
	for i := range w.services {
		if f, since, ok := w.Ramping(i); ok {
			e.Weighted = true
			e.Ramps = append(e.Ramps, RampExplanation{Index: i, Fraction: f, Effective: f * float64(w.services[i].Weight),
				Since: since, Ends: since.Add(c.SlowStart.Length())})
		}
	}

	x := evalCtx{hops: c.TrustedForwardedHops}
	if b.keyer != nil {
		key, ok := b.keyer.AppendKey(nil, r, &x)
		if ok {
			e.HasInput, e.Key, e.KeyHash = true, key, xxhash.Sum64(key)
			e.Ranking = w.ranking(e.KeyHash)
		}
	}
	if p := c.Persistence; p != nil {
		pe := &PersistExplanation{Empty: true}
		for i, k := range p.Keys {
			if i > 0 {
				pe.Key = append(pe.Key, 0x1f)
			}
			v := k.appendEval(nil, r, &x)
			pe.Values = append(pe.Values, v)
			pe.Key = append(pe.Key, v...)
			pe.Empty = pe.Empty && len(v) == 0
		}
		d := &e.Decision
		pe.Stored = d.Persist.Miss && !d.Persist.GaveUp && d.Len() > 0
		e.Persistence = pe
	}
	if s := c.Session; s != nil {
		e.Session = w.explainSession(r, &e.Decision, now)
	}
	d := &e.Decision
	e.WorkerState = d.Reason == ReasonBackup || d.Reason == ReasonLeastConnection ||
		d.Reason == ReasonRoundRobin || c.HashBalanceFactor > 0
	return e
}

// copyState returns a Balancer that decides as b would now, with state of
// its own, and an empty in-memory persistence table when b's configuration
// has persistence.
func (b *Balancer) copyState() *Balancer {
	w := *b
	w.down = slices.Clone(b.down)
	w.rank = slices.Clone(b.rank)
	w.active = slices.Clone(b.active)
	w.rr = slices.Clone(b.rr)
	w.cand = make([]candidate, 0, len(b.services))
	w.buf = make([]byte, 0, 512)
	w.pkey = make([]byte, 0, 256)
	w.table = nil
	w.cache, w.baseCache = nil, nil // the full ranking, which the cache always agrees with
	w.frac = slices.Clone(b.frac)
	w.ramp = slices.Clone(b.ramp)
	w.ramps = slices.Clone(b.ramps)
	w.x.m, w.x.jwt = matcher{}, nil
	if p := b.cfg.Persistence; p != nil {
		w.table = NewTable(&scratchStore{}, "explain", p.TableSize, p.Expire)
	}
	return &w
}

// ranking returns every service in rendezvous order for key hash k: the
// selectable ones as Decide ranks them (fill and next), the others merged in
// at their place by the same order.
func (b *Balancer) ranking(k uint64) []RankedService {
	n := b.fill(k)
	var sel []candidate
	for j := 0; j < n; j++ {
		b.next(j)
		sel = append(sel, b.cand[j])
	}
	var out []RankedService
	add := func(c candidate, rank int) {
		rs := RankedService{Index: c.idx, Rank: rank, Score: score(k, b.services[c.idx].ID)}
		if !b.uniform || len(b.ramps) > 0 {
			s := &b.services[c.idx]
			w := float64(s.Weight)
			if f, _, ok := b.Ramping(c.idx); ok {
				w *= f
			}
			rs.Weighted = weightedScore(k, s.ID, w)
		}
		rs.State = b.state(c.idx)
		out = append(out, rs)
	}
	var others []candidate
	for i := range b.services {
		if !b.selectable(i) {
			others = append(others, candidate{idx: i, score: b.rankScore(k, i)})
		}
	}
	slices.SortFunc(others, func(x, y candidate) int {
		switch {
		case b.better(x, y):
			return -1
		case b.better(y, x):
			return 1
		}
		return 0
	})
	j := 0
	for i, c := range sel {
		for j < len(others) && b.better(others[j], c) {
			add(others[j], 0)
			j++
		}
		add(c, i+1)
	}
	for ; j < len(others); j++ {
		add(others[j], 0)
	}
	return out
}

// state returns service i's state.
func (b *Balancer) state(i int) ServiceState {
	switch {
	case !b.services[i].Enabled:
		return StateDisabled
	case b.down[i]:
		return StateDown
	}
	return StateSelectable
}

// scratchStore is the empty, private Store of an explained decision's
// persistence table: one decision's writes, never shared.
type scratchStore struct {
	vals map[string][]byte
	cas  map[string]uint32
	next uint32
}

// Get implements Store.
func (s *scratchStore) Get(key string) ([]byte, uint32, error) {
	v, ok := s.vals[key]
	if !ok {
		return nil, 0, ErrNotFound
	}
	return v, s.cas[key], nil
}

// Set implements Store, with the host's cas rules.
func (s *scratchStore) Set(key string, value []byte, cas uint32) error {
	if s.vals == nil {
		s.vals, s.cas = map[string][]byte{}, map[string]uint32{}
	}
	if cur, ok := s.cas[key]; ok && cas != 0 && cas != cur {
		return ErrCASMismatch
	}
	s.next++
	s.vals[key], s.cas[key] = slices.Clone(value), s.next
	return nil
}

var _ Store = (*scratchStore)(nil)
