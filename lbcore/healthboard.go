package lbcore

import (
	"encoding/binary"
	"errors"
	"strconv"
	"time"
)

// HealthBoard keeps the health records of one configuration's services in
// the shared Store and the lease that makes one worker at a time the prober
// ("<namespace>/h/lease"). Every worker of a proxy has its own HealthBoard
// over the same keys, so a probe made by one worker, or a failure seen by
// another, decides for all of them. A record lives in the slot the plugin's
// slot table gives its service's identity (healthslots.go), so a reload that
// keeps a service keeps its record, and the keys stay as many as the largest
// services list the plugin had.
type HealthBoard struct {
	store    Store
	table    string
	leaseKey string
	marker   string
	me       uint64
	// keys[i] is service i's slot key ("" when no slot could be claimed:
	// it then reads as healthy and keeps no record); ids[i] and gens[i] are
	// what its record must carry to be its own; lost[i] is set once the slot
	// is found given to another service (this configuration was replaced).
	keys  []string
	slots []int
	ids   []uint64
	gens  []uint32
	lost  []bool
	// seen[i] is the last record of service i's own this board read or
	// wrote: what a slot that stopped being its own reads as.
	seen []ServiceHealth
	err  error
	// record and lease are Update's and TakeLease's encodings, reused: the
	// Store may be an interface the compiler cannot see through, so a
	// buffer on the stack would move to the heap on every call.
	record [slotHead + healthSize]byte
	lease  [leaseSize]byte
	after  ServiceHealth // Update's record, which f sees
}

// NewHealthBoard returns the board of services under namespace in s, with a
// slot claimed for every service; me identifies this worker for the lease
// (for example a random number drawn at start). When the slot table cannot
// be written (Err), every service reads as healthy and keeps no record.
func NewHealthBoard(s Store, namespace string, services []Service, me uint64) *HealthBoard {
	prefix := namespace + "/h/"
	b := &HealthBoard{store: s, table: prefix + "t", leaseKey: prefix + "lease", marker: prefix + "c", me: me | 1}
	b.ids = make([]uint64, len(services))
	for i := range services {
		b.ids[i] = services[i].ID
	}
	b.keys, b.lost, b.seen = make([]string, len(services)), make([]bool, len(services)), make([]ServiceHealth, len(services))
	b.slots, b.gens, b.err = claimSlots(s, b.table, b.marker, b.ids)
	if b.err != nil {
		b.gens = make([]uint32, len(services))
		return b
	}
	for i, n := range b.slots {
		b.keys[i] = prefix + strconv.Itoa(n)
	}
	return b
}

// Err reports why no slots could be claimed, or nil.
func (b *HealthBoard) Err() error { return b.err }

// own reports whether v is a record written for service i's slot.
func (b *HealthBoard) own(i int, v []byte) bool {
	return len(v) == slotHead+healthSize && binary.LittleEndian.Uint64(v) == b.ids[i] && binary.LittleEndian.Uint32(v[8:]) == b.gens[i]
}

// Read returns service i's record. A missing or unreadable one reads as a
// healthy service; another service's (the slot was reused: this
// configuration was replaced, or its own record is not written yet) as the
// last record of its own this board saw, so a draining configuration keeps
// its view of a service that left, and a new one that saw none reads it as
// healthy.
func (b *HealthBoard) Read(i int) ServiceHealth {
	if b.keys[i] == "" {
		return ServiceHealth{}
	}
	v, _, err := b.store.Get(b.keys[i])
	if err != nil && !errors.Is(err, ErrNotFound) {
		return ServiceHealth{}
	}
	if err != nil || !b.own(i, v) {
		return b.seen[i]
	}
	s, _ := decodeHealth(v[slotHead:])
	b.seen[i] = s
	return s
}

// encode is service i's record s with its slot's head, in b.record.
func (b *HealthBoard) encode(i int, s *ServiceHealth) []byte {
	v := binary.LittleEndian.AppendUint64(b.record[:0], b.ids[i])
	v = binary.LittleEndian.AppendUint32(v, b.gens[i])
	return encodeHealth(v, s)
}

// Admit gives service i, which a reconfiguration added, a Pending record
// (DOWN until its first probe) unless it has a record: a service that was
// in the pool before keeps what the workers knew of it. It reports whether
// it wrote one. Workers admitting one service at once write the same record.
func (b *HealthBoard) Admit(i int) bool {
	if b.keys[i] == "" {
		return false
	}
	v, cas, err := b.store.Get(b.keys[i])
	if err == nil && b.own(i, v) || err != nil && !errors.Is(err, ErrNotFound) {
		return false
	}
	rec := b.encode(i, &ServiceHealth{Down: true, Pending: true})
	if err != nil { // missing: two workers must not both create it
		return createKey(b.store, b.marker, b.keys[i], rec) == nil
	}
	return b.store.Set(b.keys[i], rec, cas) == nil
}

// Change is one update of a service's record: the record before and after,
// and whether the update reported a transition.
//
// Its fields are exported as one record, whether or not a package outside
// reads each one.
type Change struct {
	Before, After ServiceHealth
	Changed       bool
}

// Update applies f to service i's record with CAS, retrying on conflict a
// bounded number of times; f reports whether it made a transition. ok is
// false when the record could not be written, and the observation is lost
// (the next one repeats it). A slot still holding its previous owner's
// record starts from a healthy one, once the table confirms the slot is
// service i's; a slot given to another service is never written.
func (b *HealthBoard) Update(i int, f func(*ServiceHealth) bool) (c Change, ok bool) {
	if b.keys[i] == "" || b.lost[i] {
		return c, false
	}
	for attempt := 0; attempt < casAttempts; attempt++ {
		v, cas, err := b.store.Get(b.keys[i])
		if err != nil && !errors.Is(err, ErrNotFound) {
			return c, false
		}
		b.after = ServiceHealth{}
		if err == nil && b.own(i, v) {
			b.after, _ = decodeHealth(v[slotHead:])
		} else if !slotHeld(b.store, b.table, b.slots[i], b.ids[i], b.gens[i]) {
			b.lost[i] = true
			return c, false
		}
		c.Before = b.after
		c.Changed = f(&b.after)
		c.After = b.after
		// A missing record is created with cas 0: two workers creating one
		// record at once may lose one observation, which the next probe or
		// response repeats; health records never carry mappings that matter.
		if err := b.store.Set(b.keys[i], b.encode(i, &b.after), cas); err == nil {
			b.seen[i] = b.after
			return c, true
		} else if !errors.Is(err, ErrCASMismatch) {
			return c, false
		}
	}
	return c, false
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
	return p.FailureStatuses.contains(status) || status >= 500 && connectionFailed()
}

// Observe records one response as response does, except that the last
// selectable service is never ejected (last: no other service is
// selectable): a half-working backend serves better than a 503 for everyone,
// and Envoy's outlier detection bounds ejections the same way. Its failure
// count restarts instead.
func (p *PassiveHealth) Observe(s *ServiceHealth, failed, last bool, now time.Time) (ejected bool) {
	if failed && last {
		s.Failures = 0
		return false
	}
	return p.response(s, failed, now)
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
// Exported as the type of Change.Transition's result.
type Transition uint8

// The transitions.
// Each is exported with its type, whether or not a package outside names
// it.
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
