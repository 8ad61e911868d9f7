package lbcore

import (
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// Reason says why a decision came out as it did; it labels metrics and the
// debug header.
type Reason uint8

// The decision reasons.
// Each is exported with its type, whether or not a package outside names
// it.
const (
	// ReasonHash: the hash method's top-ranked selectable service.
	ReasonHash Reason = iota
	// ReasonBoundedLoad: the hash method, but a higher-ranked service was
	// skipped because it was over the hashBalanceFactor bound.
	ReasonBoundedLoad
	// ReasonPersistence: the persistence table had the key.
	ReasonPersistence
	// ReasonBackup: the hash method had no input; backupLBMethod chose
	// (URLHASH without a URL uses round robin, as Citrix does).
	ReasonBackup
	// ReasonLeastConnection: lbMethod LEASTCONNECTION chose.
	ReasonLeastConnection
	// ReasonRoundRobin: lbMethod ROUNDROBIN chose.
	ReasonRoundRobin
	// ReasonNoService: nothing is selectable; the request gets a 503.
	ReasonNoService
	// ReasonSession: the request's session named a selectable service.
	ReasonSession
)

var reasonNames = [...]string{"hash", "bounded_load", "persistence", "backup", "least_connection", "round_robin", "no_service", "session"}

// String returns the reason's metric label, for example "persistence".
func (r Reason) String() string { return nameOf(reasonNames[:], int(r)) }

// nameOf is names[i], or "unknown" outside the list: the String of each of
// lbcore's enumerations.
func nameOf(names []string, i int) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return "unknown"
}

// Reasons returns every reason label, in Reason order.
func Reasons() []string { return reasonNames[:] }

// Decision is the outcome for one request: services in rank order (the first
// is the choice, the rest the failover order), and why.
type Decision struct {
	// Reason says how the first service was chosen.
	Reason Reason
	// Method is the method that chose: lbMethod, or the backup method.
	Method Method
	// Persist is what the persistence table did, when it is configured.
	Persist Outcome
	// EmptyKey: persistence is on and every key expression was empty.
	EmptyKey bool
	// Capped: an input was longer or deeper than a cap of limits.go and was
	// cut (or read as empty) before deciding.
	Capped bool
	// Ask: the persistence key (Balancer.AskKey) has no live local entry and
	// the table has a fleet level; the decision is the method's proposal,
	// not stored. The caller asks the fleet, then calls DecideFleet with its
	// answer (or DecideLocal when it cannot).
	Ask bool
	// Session is what the request's session value came to (SessionOff
	// without a session block).
	Session SessionState
	// sessRefresh: a valid session due for the idle refresh; sessIssued is
	// its issue time; sessSvc the service a signed session named, or -1.
	sessRefresh bool
	sessIssued  uint32
	sessSvc     int32
	sessKey     int8 // the key a value verified under (SessionKey), or -1
	n           int
	ranked      [maxUpstreamCount]int32
}

// Len returns how many services the decision names (0 for ReasonNoService).
func (d *Decision) Len() int { return d.n }

// At returns the index in Config.Services of the i-th ranked service,
// 0 ≤ i < Len().
func (d *Decision) At(i int) int { return int(d.ranked[i]) }

// reset makes d read as a zero Decision, field by field: clearing its 96
// bytes at once is a bulk-memory call in Wasm. Ranked entries at Len and
// after are left, as At never reads them.
func (d *Decision) reset() {
	// One statement each: a tuple assignment would build the Outcome in a
	// temporary and copy it (a bulk copy in Wasm).
	d.Reason = 0
	d.Method = 0
	d.Persist = Outcome{}
	d.EmptyKey = false
	d.Capped = false
	d.Ask = false
	d.Session = SessionOff
	d.sessRefresh = false
	d.sessIssued = 0
	d.sessSvc = -1
	d.sessKey = -1
	d.n = 0
}

func (d *Decision) add(idx int) {
	if d.n < len(d.ranked) {
		d.ranked[d.n] = int32(idx)
		d.n++
	}
}

// Balancer makes decisions for one worker. It holds the worker's scratch
// space, round-robin state and its view of health and active requests, so
// it is not safe for concurrent use: one Balancer per proxy-wasm VM, which is
// single-threaded.
type Balancer struct {
	cfg      *Config
	services []Service
	method   *methodSpec // lbMethod
	backup   *methodSpec // chooses when the hash method has no input
	keyer    keyer
	uniform  bool // all weights equal: rank by raw scores, no logarithms
	want     int  // how many services a decision names: min(UpstreamCount, len(services))
	unitPass bool // one service, no bounded load, equal weights: decide ranks in one pass

	down   []bool  // health: true when active or passive checks took it out
	active []int64 // active requests per service (this worker's, or device-wide when the filter syncs them)
	rr     []int64 // smooth weighted round robin: current weights
	seq    uint64  // decision counter; breaks least-connection ties
	cand   []candidate
	buf    []byte
	x      evalCtx // the decision's evaluation context: trusted hops, caps hit

	table    *Table
	askFleet bool           // a local miss is the fleet's to settle (Decision.Ask): the table has a fleet level
	pkey     []byte         // the persistence key of the last decision (AskKey); its buffer is reused
	pkeyIP   bool           // the persistence key is ${client.ip} alone, from the connection's source
	ids      map[uint64]int // service identity → index, for the persistence table

	rank []rankEntry // per service, what ranking reads (hrw.go)

	sess *sessionKeys // session persistence; nil without a session block or before EnableSession

	cache     *rankCache // ranking prefixes of recent keys; nil for a small pool (rankcache.go) or while a service ramps
	selN      int        // pickable services (selectable, weight above 0)
	selActive int64      // active requests over the pickable services

	// Slow start (slowstart.go): per service, the fraction of its weight it
	// ranks with (1 when not ramping) and its ramp; nil without slowStart.
	frac      []float64
	ramp      []rampState
	ramps     []int32    // the ramping services
	baseUnit  bool       // unitPass when no service ramps
	baseCache *rankCache // cache when no service ramps
	seq0      uint64     // seq when built: a Balancer whose seq moved has decided
	lived     bool       // the Balancer it continues had decided (Continue)
}

// NewBalancer returns a Balancer for c. seed varies the tie-breaking and
// round-robin starting point per worker, so workers do not move in lockstep.
func NewBalancer(c *Config, seed uint64) *Balancer {
	n := len(c.Services)
	b := &Balancer{
		cfg:      c,
		services: c.Services,
		method:   c.LBMethod.spec(),
		backup:   c.BackupLBMethod.spec(),
		keyer:    keyerFor(c),
		uniform:  true,
		want:     min(c.UpstreamCount, n),
		down:     make([]bool, n),
		active:   make([]int64, n),
		rr:       make([]int64, n),
		seq:      mix(seed),
		rank:     newRank(c.Services),
		cand:     make([]candidate, 0, n),
		buf:      make([]byte, 0, 512),
		pkey:     make([]byte, 0, 256),
		x:        evalCtx{hops: c.TrustedForwardedHops},
		ids:      c.byIDFor(), // shared with every Balancer of c: never written
	}
	shared := b.ids != nil
	if !shared {
		b.ids = make(map[uint64]int, n)
	}
	if b.method == nil { // not from ParseConfig: an unknown method
		b.method = MethodRoundRobin.spec()
	}
	if b.method.ownBackup {
		b.backup = b.method.backup.spec()
	}
	if b.backup == nil || b.backup.pick == nil { // not from ParseConfig
		b.backup = MethodLeastConnection.spec()
	}
	total := 0
	for i := range c.Services {
		if c.Services[i].Weight != c.Services[0].Weight {
			b.uniform = false
		}
		if !shared {
			b.ids[c.Services[i].ID] = i
		}
		total += c.Services[i].Weight
	}
	for i := range c.Services {
		if b.pickable(i) {
			b.selN++
		}
	}
	if b.keyer != nil {
		b.cache = newRankCache(b)
	}
	b.unitPass = b.want == 1 && c.HashBalanceFactor == 0 && b.uniform && b.cache == nil
	b.baseUnit, b.baseCache, b.seq0 = b.unitPass, b.cache, b.seq
	if c.SlowStart != nil {
		b.frac, b.ramp = make([]float64, n), make([]rampState, n)
		for i := range b.frac {
			b.frac[i] = 1
		}
	}
	// Start each worker's round robin at a different point of the same
	// sequence, so that workers do not all send their first request to the
	// first service: advance by seed mod Σweight picks (capped; a rotation of
	// a longer cycle is as good).
	if total > 0 {
		b.rrAdvance(b.seq % uint64(min(total, 1024)))
	}
	return b
}

// Config returns the configuration the Balancer was built from.
func (b *Balancer) Config() *Config { return b.cfg }

// SetDown marks service i DOWN (not selectable) or UP.
func (b *Balancer) SetDown(i int, down bool) {
	was := b.pickable(i)
	b.down[i] = down
	b.rank[i].mask = 0
	if b.pickable(i) {
		b.rank[i].mask = ^uint64(0)
	}
	switch now := b.pickable(i); {
	case now && !was:
		b.selN++
		b.selActive += b.active[i]
		if b.frac != nil && b.started() {
			b.startRamp(i)
		}
	case was && !now:
		b.selN--
		b.selActive -= b.active[i]
		b.stopRamp(i)
	}
}

// SetActive sets service i's active request count, as least connection and
// bounded load see it.
func (b *Balancer) SetActive(i int, n int64) {
	n = max(n, 0)
	if b.pickable(i) {
		b.selActive += n - b.active[i]
	}
	b.active[i] = n
}

// Active returns service i's active request count.
func (b *Balancer) Active(i int) int64 { return b.active[i] }

// Selectable reports whether service i may be chosen: enabled and not DOWN.
func (b *Balancer) Selectable(i int) bool { return b.selectable(i) }

func (b *Balancer) selectable(i int) bool { return b.services[i].Enabled && !b.down[i] }

// pickable reports whether service i may take new keys and picks:
// selectable with a weight above 0. A service of weight 0 keeps the
// sessions and persistence entries it has (selectable) and gets nothing new.
func (b *Balancer) pickable(i int) bool { return b.selectable(i) && b.services[i].Weight > 0 }

// Decide chooses services for r. It never fails: with no selectable service
// the decision is ReasonNoService and names none. now is used by the
// persistence table, sessions and slow start. r is only read.
func (b *Balancer) Decide(r *Request, now time.Time) (d Decision) {
	b.DecideInto(&d, r, now)
	return d
}

// DecideInto is Decide writing the decision into *d, whatever d held: for a
// caller that keeps one Decision for every request (returning 96 bytes costs
// a bulk clear and copy in Wasm: RATIONALE.md, "Cost per request"). Its
// steps: the request's session, else the persistence table (asking the
// fleet on a local miss when it has one), else the method.
func (b *Balancer) DecideInto(d *Decision, r *Request, now time.Time) {
	if len(b.ramps) != 0 {
		b.SetTime(now)
	}
	b.begin(d)
	switch {
	case b.sess != nil && b.sessionDecide(d, r, now):
	case b.table != nil:
		b.decidePersistent(d, r, now, b.askFleet)
	default:
		b.decideMethod(d, r)
		return
	}
	d.Capped = b.x.capped
}

// RankInto writes into *d the method's order for r over as many services
// as a Decision holds (upstreamCount's maximum), without session or
// persistence: the failover order a host's retry walks (the load-balancing
// policy asks for it only when Envoy's retry predicate refuses the first
// choice). It reads the Balancer's health and active requests, so a host
// keeps one Balancer for choices and retries alike, and advances a round
// robin as a decision does. The rank cache is not used: it keeps the
// prefixes that upstreamCount asks for.
func (b *Balancer) RankInto(d *Decision, r *Request) {
	want, unit, cache := b.want, b.unitPass, b.cache
	b.want, b.unitPass, b.cache = min(maxUpstreamCount, len(b.services)), false, nil
	b.begin(d)
	b.decideMethod(d, r)
	b.want, b.unitPass, b.cache = want, unit, cache
}

// begin starts a decision: d reads as zero, the evaluation context's caps
// are cleared and the decision counter advances.
func (b *Balancer) begin(d *Decision) {
	// Only capped: hops is the config's (NewBalancer), and rewriting b.x
	// whole would store the jwt buffer's pointer again (a write barrier).
	b.x.capped, b.x.m.steps, b.x.work = false, 0, 0
	b.seq++
	d.reset()
}

// decideMethod is the method's decision over the ranking, without session
// or persistence, filling d, which must read as zero: lbMethod, falling
// back to backupLBMethod when it has no input.
//
// The pieces below are inline rather than functions of their own because
// a call costs more than the work in Go's Wasm code (RATIONALE.md, "Cost
// per request").
func (b *Balancer) decideMethod(d *Decision, r *Request) {
	if b.keyer == nil {
		d.Reason, d.Method = b.method.reason, b.method.method
		*d = b.method.pick(b, *d)
		return
	}
	var key string
	var ok bool
	if k, in, inPlace := keyInRequest(b.keyer, r); inPlace {
		// URLHASH's and CALLIDHASH's keys are part of the request: hash
		// them where they are (a copy is a call to memmove, and in Wasm one
		// more into the engine; a Call-ID, uncut, would grow b.buf to its
		// size for good).
		key, ok = k, in
	} else {
		var kb []byte
		kb, ok = b.keyer.AppendKey(b.buf[:0], r, &b.x)
		b.buf = kb[:0]
		d.Capped = b.x.capped
		key = unsafe.String(unsafe.SliceData(kb), len(kb)) // b.buf's bytes, unchanged until the next decision
	}
	if !ok {
		b.backupInto(d)
		return
	}
	var k uint64
	if inlineHash && len(key) < 32 {
		// xxhash.Sum64String without the call (xxh64.go), unrolled: a
		// fall-through is cheaper than a loop's back edge in Go's Wasm code.
		h := xxhStart(len(key))
		if len(key) >= 8 {
			h = xxhLane8(h, key)
			if len(key) >= 16 {
				h = xxhLane8(h, key[8:])
				if len(key) >= 24 {
					h = xxhLane8(h, key[16:])
				}
			}
		}
		t := key[len(key)&^7:]
		if len(t) >= 4 {
			h = xxhLane4(h, t)
			t = t[4:]
		}
		if len(t) >= 1 {
			h = xxhLane1(h, t[0])
			if len(t) >= 2 {
				h = xxhLane1(h, t[1])
				if len(t) >= 3 {
					h = xxhLane1(h, t[2])
				}
			}
		}
		k = xxhAvalanche(h)
	} else {
		k = xxhash.Sum64String(key)
	}
	d.Reason, d.Method = ReasonHash, b.cfg.LBMethod
	if b.unitPass {
		// The unit-weight pass for one service: it calls nothing and
		// branches only to loop, four services at a time (b.rank is padded
		// to a multiple of four with entries that are never selectable): an
		// unselectable service scores 0, and scan's comparisons compile to
		// selects (RATIONALE.md, "Cost per request"). It settles the decision unless the best
		// score is 0 or shared (no selectable service, or a tie that only
		// identity breaks): hashBest decides those.
		es := b.rank
		best, top, tie := -1, uint64(0), uint64(0)
		for i := 0; len(es) >= 4; i += 4 {
			s0, s1 := mix(k^es[0].id)&es[0].mask, mix(k^es[1].id)&es[1].mask
			s2, s3 := mix(k^es[2].id)&es[2].mask, mix(k^es[3].id)&es[3].mask
			top, tie, best = scan(top, tie, best, s0, i)
			top, tie, best = scan(top, tie, best, s1, i+1)
			top, tie, best = scan(top, tie, best, s2, i+2)
			top, tie, best = scan(top, tie, best, s3, i+3)
			es = es[4:]
		}
		if top != 0 && tie == 0 {
			d.add(best)
			return
		}
	}
	b.hashRank(d, k)
}

// backupInto has backupLBMethod decide: the hash method had no input.
func (b *Balancer) backupInto(d *Decision) {
	d.Reason, d.Method = ReasonBackup, b.backup.method
	*d = b.backup.pick(b, *d)
}

// hashRank fills d with the rendezvous ranking for key hash k, honouring
// hashBalanceFactor.
func (b *Balancer) hashRank(d *Decision, k uint64) {
	if b.cache != nil && b.cachedRank(d, k) {
		return
	}
	if b.want == 1 && b.cfg.HashBalanceFactor == 0 {
		b.hashBest(d, k)
		return
	}
	n := b.fill(k)
	if n == 0 {
		d.Reason = ReasonNoService
		return
	}
	first, sorted := 0, 0 // cand[:sorted] is in rank order
	if b.cfg.HashBalanceFactor > 0 {
		bound := b.loadBound(n)
		for first = 0; first < n; first++ {
			b.next(first)
			sorted = first + 1
			if b.active[b.cand[first].idx]+1 <= bound {
				break
			}
		}
		if first == n { // cannot happen (bound·n > total), but never go without a choice
			first = 0
		} else if first > 0 {
			d.Reason = ReasonBoundedLoad
		}
	} else {
		b.next(0)
		sorted = 1
	}
	// The choice first, then every other candidate in rank order.
	d.add(b.cand[first].idx)
	for j := 0; d.n < b.want && j < n; j++ {
		if j >= sorted {
			b.next(j)
		}
		if j != first {
			d.add(b.cand[j].idx)
		}
	}
}

// loadBound is the bounded-load capacity per service: factor/100 × the mean
// active requests per selectable service, counting this request, rounded up
// and at least 1 (Mirrokni, Thorup and Zadimoghaddam, 2018).
func (b *Balancer) loadBound(n int) int64 {
	var total int64
	for _, c := range b.cand[:n] {
		total += b.active[c.idx]
	}
	f := int64(b.cfg.HashBalanceFactor)
	return max(1, (f*(total+1)+100*int64(n)-1)/(100*int64(n)))
}
