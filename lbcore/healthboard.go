package lbcore

import (
	"encoding/binary"
	"errors"
	"strconv"
	"time"
)

// HealthBoard keeps the health records of one configuration's services in
// the shared Store ("<namespace>/h/<service id>", EncodeHealth) and the lease
// that makes one worker at a time the prober ("<namespace>/h/lease"). Every
// worker of a proxy has its own HealthBoard over the same keys, so a probe
// made by one worker, or a failure seen by another, decides for all of them.
// Records are keyed by service identity, so a reload that keeps a service
// keeps its record.
type HealthBoard struct {
	store    Store
	keys     []string
	leaseKey string
	marker   string
	me       uint64
	// record and lease are Update's and TakeLease's encodings, reused: the
	// Store may be an interface the compiler cannot see through, so a
	// buffer on the stack would move to the heap on every call.
	record [healthSize]byte
	lease  [leaseSize]byte
	after  ServiceHealth // Update's record, which f sees
}

// NewHealthBoard returns the board of services under namespace in s; me
// identifies this worker for the lease (for example a random number drawn
// at start).
func NewHealthBoard(s Store, namespace string, services []Service, me uint64) *HealthBoard {
	b := &HealthBoard{store: s, leaseKey: namespace + "/h/lease", marker: namespace + "/h/c", me: me | 1}
	for _, svc := range services {
		b.keys = append(b.keys, namespace+"/h/"+strconv.FormatUint(svc.ID, 16))
	}
	return b
}

// Read returns service i's record; a missing or unreadable one reads as a
// healthy service.
func (b *HealthBoard) Read(i int) ServiceHealth {
	v, _, err := b.store.Get(b.keys[i])
	if err != nil {
		return ServiceHealth{}
	}
	s, _ := DecodeHealth(v)
	return s
}

// Admit gives service i, which a reconfiguration added, a Pending record
// (DOWN until its first probe) unless it has a record: a service that was
// in the pool before keeps what the workers knew of it. It reports whether
// it wrote one. Workers admitting one service at once write the same record.
func (b *HealthBoard) Admit(i int) bool {
	if _, _, err := b.store.Get(b.keys[i]); !errors.Is(err, ErrNotFound) {
		return false
	}
	var buf [healthSize]byte
	return CreateKey(b.store, b.marker, b.keys[i], EncodeHealth(buf[:0], &ServiceHealth{Down: true, Pending: true})) == nil
}

// Change is one update of a service's record: the record before and after,
// and whether the update reported a transition.
type Change struct {
	Before, After ServiceHealth
	Changed       bool
}

// Update applies f to service i's record with CAS (UpdateHealth); f reports
// whether it made a transition. ok is false when the record could not be
// written, and the observation is lost (the next one repeats it).
func (b *HealthBoard) Update(i int, f func(*ServiceHealth) bool) (c Change, ok bool) {
	ok = updateHealth(b.store, b.keys[i], b.record[:0], &b.after, func(s *ServiceHealth) {
		c.Before = *s
		c.Changed = f(s)
	})
	c.After = b.after
	return c, ok
}

// EndEjection clears service i's passive ejection when it has run out at now,
// so that its end is one transition, made (and logged) by the one worker
// whose write clears it. ok is false when there was nothing to end.
func (b *HealthBoard) EndEjection(i int, now time.Time) (Change, bool) {
	if s := b.Read(i); s.EjectedUntil == 0 || now.UnixMilli() < s.EjectedUntil {
		return Change{}, false
	}
	c, ok := b.Update(i, func(s *ServiceHealth) bool {
		if s.EjectedUntil == 0 || now.UnixMilli() < s.EjectedUntil {
			return false // another worker ended it first
		}
		s.EjectedUntil = 0
		return true
	})
	return c, ok && c.Changed
}

// lease value: holder uint64 | until unix ms int64, little-endian.
const leaseSize = 8 + 8

// TakeLease makes this worker the prober for the next round unless another
// worker holds an unexpired lease. The lease is held for 1.5 rounds, so its
// holder renews it before anyone else may take it. Two workers that both find
// it missing may both probe once: a duplicate probe, never a wrong verdict.
func (b *HealthBoard) TakeLease(now time.Time, round time.Duration) bool {
	v, cas, err := b.store.Get(b.leaseKey)
	if err == nil && len(v) == leaseSize {
		holder, until := binary.LittleEndian.Uint64(v), int64(binary.LittleEndian.Uint64(v[8:]))
		if holder != b.me && now.UnixMilli() < until {
			return false
		}
	}
	buf := b.lease[:]
	binary.LittleEndian.PutUint64(buf, b.me)
	binary.LittleEndian.PutUint64(buf[8:], uint64(now.Add(round+round/2).UnixMilli()))
	return b.store.Set(b.leaseKey, buf, cas) == nil
}

// Failed classifies one upstream response for passive health: its status is
// a failure status, or it is a 5xx that Envoy answered itself because the
// connection to the upstream failed or broke (connectionFailed, called only
// for a 5xx so that a healthy response costs no property read).
func (p *PassiveHealth) Failed(status int, connectionFailed func() bool) bool {
	return p.FailureStatuses.Contains(status) || status >= 500 && connectionFailed()
}

// Observe records one response as Response does, except that the last
// selectable service is never ejected (last: no other service is
// selectable): a half-working backend serves better than a 503 for everyone,
// and Envoy's outlier detection bounds ejections the same way. Its failure
// count restarts instead.
func (p *PassiveHealth) Observe(s *ServiceHealth, failed, last bool, now time.Time) (ejected bool) {
	if failed && last {
		s.Failures = 0
		return false
	}
	return p.Response(s, failed, now)
}

// OnlySelectable reports whether service i is selectable and no other is.
func (b *Balancer) OnlySelectable(i int) bool {
	for j := range b.services {
		if j != i && b.selectable(j) {
			return false
		}
	}
	return b.selectable(i)
}

// Transition is what a Change did to a service, for logs and metrics.
type Transition uint8

// The transitions.
const (
	// NoTransition: nothing an operator needs to hear about.
	NoTransition Transition = iota
	// WentDown: active checks marked the service DOWN.
	WentDown
	// Ejected: passive health ejected the service.
	Ejected
	// CameBack: the service is selectable again (it passed its health
	// checks, or its ejection ended).
	CameBack
	// PassedStillEjected: active checks marked the service UP, but a passive
	// ejection still runs: not selectable yet, and not a new ejection.
	PassedStillEjected
	// EjectionEndedStillDown: the ejection ended, but active checks still
	// hold the service DOWN.
	EjectionEndedStillDown
)

// Transition classifies the change at now.
func (c *Change) Transition(now time.Time) Transition {
	b, a := &c.Before, &c.After
	switch {
	case !c.Changed:
		return NoTransition
	case a.Down && !b.Down:
		return WentDown
	case a.EjectedUntil > b.EjectedUntil && !a.Selectable(now):
		return Ejected
	case a.Selectable(now):
		return CameBack
	case b.Down && !a.Down:
		return PassedStillEjected
	case a.Down:
		return EjectionEndedStillDown
	}
	return NoTransition
}
