package fleet

import (
	"slices"
	"strconv"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// Client is the fleet protocol of one worker as a deterministic state
// machine (docs/persistence.md#fleet-wide-persistence-through-etcd): events
// go in (a local miss, a local hit, an etcd answer, a call without one, a
// tick, each with the clock), and what to do comes out (Take): the etcd
// calls to send, the waiting transactions settled, the local entries to
// correct, the lines to log. It sends nothing and reads no clock itself;
// the filter wires host calls to it, and tests drive it without a host.
//
// The rules:
//   - A miss sends create-if-absent with the method's proposal; the stored
//     service wins. A stale one is replaced with a compare on mod_revision
//     (at most twice). A live one this proxy cannot use (unknown, or not
//     selectable here) is left for the others: the key's second choice
//     (AltSuffix) is served, and the local entry goes back to the fleet's
//     service one tick after it is selectable here again (divert).
//   - Nothing is written naming a service not selectable here.
//   - A miss that cannot ask etcd (etcd down, the call failed or timed out,
//     retries ran out) is decided with its proposal, and its key is queued
//     for reconciliation: once etcd answers, the tick sends create-if-absent
//     with that decision; if the fleet holds another live service the local
//     entry follows it (Remember), once.
//   - After FailLimit failed calls in a row etcd is down: misses are
//     decided at once, and the tick probes etcd every ProbeEvery; the
//     first answer ends it. A hit of a key last used before that moment
//     asks etcd as a miss does, proposing its entry (etcd may have lost the
//     key, or another proxy placed it meanwhile).
//   - A hit in a later slot than its previous use refreshes the stamp: the
//     same create-if-absent, then a replace on mod_revision; one that loses
//     follows the winner.
//   - "lease not found" on any put forgets that lease and grants a new one;
//     "invalid auth token" authenticates again. Neither is a failure of
//     etcd (retryable), on any path. At most one grant and one
//     authenticate are in flight: transactions wait on them (waitRoot).
//   - Budgets, probes, backoffs and deadlines run on a monotonic clock made
//     of the wall clock's forward steps (clock); stamps and slots on the
//     wall clock.
//   - Creates are limited to lbcore.Fleet.CreatesPerSecond per worker (a
//     token is taken when the call is sent and given back when the key
//     turned out to exist; refreshes of keys in use take none): over it a
//     key is only read, and followed when etcd holds it; one etcd does not
//     hold is decided locally (Throttled) and queued to be created from the
//     tick once the budget allows, as the keys placed again after a data
//     loss are; those syncs leave half the budget to misses. So etcd's key
//     count grows by at most the budget per worker and second, plus the
//     keys in use that a refresh finds gone.
//   - With credentials, every call carries the token of
//     /v3/auth/authenticate, the worker's one in flight.
type Client struct {
	cfg      *lbcore.Fleet
	svcs     Services
	prefix   string
	expire   time.Duration
	slotSecs int64
	user     string
	password string

	lastID uint32
	ops    map[uint64]*fleetOp // by lbcore.PersistKeyHash
	byID   map[uint32]*fleetOp
	calls  map[uint32]*fleetCall

	// Records and buffers reused, so that a transaction allocates nothing
	// in a steady state: settled transactions, answered calls, the etcd
	// key, a record's value and an answer's decoded value being written.
	freeOps   []*fleetOp
	freeCalls []*fleetCall
	keyBuf    []byte
	valueBuf  []byte
	decodeBuf []byte

	token                    string
	leases                   [2]struct{ slot, id int64 } // at index slot%2: this slot's and the next
	authing, granting, probe bool                        // root calls in flight
	authEnd, grantEnd        time.Time                   // when the authenticate or grant in flight ends at the latest
	authWait, grantWait      []uint32                    // transactions waiting on them
	spareWait                []uint32

	// The monotonic clock (clock): budgets, probes, backoffs, deadlines
	// and the heartbeat run on mono; stamps and slots on the wall clock.
	wall, mono time.Time

	fails     int
	down      bool
	probeAt   time.Time
	recovered int64 // Unix second after the last recovery: hits used before it sync their key

	queue   jobQueue
	budgetQ jobQueue            // keys to create once the budget allows: placed again after a data loss, or throttled
	queued  map[uint64]struct{} // the keys in queue and budgetQ
	syncing int

	tokens   float64 // the create budget
	budgetAt time.Time
	ledger   ledger

	lastOK    time.Time // etcd's last answer
	maxRev    int64     // the highest header.revision etcd answered with
	maxRevAt  time.Time // when it did
	clusterID string    // header.cluster_id of its answers
	known     []int32   // the ring's index by key: 1 + its index in ring, 0 for none (known.go)
	ring      []fleetKnown
	ringAt    int // the oldest of ring, once full
	resyncAt  time.Time

	aliveAt    time.Time // when the last heartbeat was sent (monotonic)
	aliveLease int64     // the lease aliveBody asks after
	aliveBody  []byte    // the heartbeat's body
	aliveCall  fleetCall // the heartbeat in flight (one at a time: probe)
	spare      Out       // buffers given back (Recycle)

	diverted map[uint64]diverted // keys served on their second choice (divert), by hash

	stopped bool    // handed over to a new configuration's client (HandOver)
	succ    *Client // that client, when compatible: what c still queues goes to it

	logged map[error]bool // errors logged once
	out    Out
	counts Counts
}

// Services is what the fleet protocol needs to know of the services
// (*lbcore.Balancer implements it).
type Services interface {
	// ServiceByKey returns the service whose identity in fleet records is key.
	ServiceByKey(key string) (int, bool)
	// FleetService is service i's identity in fleet records.
	FleetService(i int) string
	// Selectable reports whether service i may receive requests now.
	Selectable(i int) bool
}

var _ Services = (*lbcore.Balancer)(nil)

// Call is one call to etcd's JSON gateway to send now: POST Path with
// Body, at most Timeout; Token, when not "", goes in the Authorization
// header. Op is the transaction it belongs to, 0 for the worker's own work.
// Its answer goes to Client.Answer, or its absence to NoAnswer, with
// ID.
type Call struct {
	ID      uint32
	Op      uint32
	Path    string
	Body    []byte
	Timeout time.Duration
	Token   string
}

// Settled ends transaction Op: its requests are decided with Service
// (the fleet's, or their proposal when Fleet is false) after Waited.
type Settled struct {
	Op      uint32
	Service int
	Fleet   bool
	Waited  time.Duration
}

// Remember is a correction of the local table: the entry of the key
// whose lbcore.PersistKeyHash is Hash becomes Service, the fleet's
// (lbcore.Balancer.RememberHash).
type Remember struct {
	Hash    uint64
	Service int
}

// Log is a line to log, at warning level when Warn, else info.
type Log struct {
	Warn bool
	Msg  string
}

// Out is what the client asks for, in order.
type Out struct {
	Calls    []Call
	Settled  []Settled
	Remember []Remember
	Logs     []Log

	bodies []byte // the calls' bodies
}

// Empty reports whether o asks for nothing.
func (o *Out) Empty() bool {
	return len(o.Calls)+len(o.Settled)+len(o.Remember)+len(o.Logs) == 0
}

// Counts are the client's counters since it started (the metrics
// hashlb.persistence_fleet_*).
type Counts struct {
	Hit, Created, Replaced, Refreshed     uint64
	Timeout, Error, Skipped, Throttled    uint64
	Reconciled, Followed, QueueFull, Auth uint64
	Resynced                              uint64 // keys queued again after etcd lost its data
	Diverted                              uint64 // transactions served on the key's second choice (divert)
}

const (
	// FailLimit failed calls in a row mark etcd down.
	FailLimit = 3
	// ProbeEvery is how often the tick asks a down etcd.
	ProbeEvery = time.Second
	// HeartbeatEvery is how often the tick of a worker that placed
	// keys asks an etcd that is up whether it still knows the worker's
	// lease, busy or idle: its answer shows a loss of etcd's data
	// (known.go) even on a worker that only has hits, or whose
	// transactions only read keys, on an etcd wiped with its cluster_id
	// and written again by others past the revision it had.
	HeartbeatEvery = 3 * time.Second
	// QueueMax bounds the keys waiting to be synced (reconciled or
	// refreshed); more are dropped and counted (QueueFull).
	QueueMax = 16384
	// SyncAtOnce bounds the syncs in flight.
	SyncAtOnce = 32

	fleetMaxReplaces = 2
	fleetMaxCalls    = 8 // per transaction
	fleetMaxTries    = 3 // per sync
	// fleetLostCall is how long past its timeout an unanswered call is
	// given up (a host always answers; this bounds what it may forget).
	fleetLostCall = 2 * time.Second
)

type callKind uint8

const (
	callAuth  callKind = iota + 1
	callGrant          // a lease grant
	callTxn            // create-if-absent (rev 0) or replace (rev)
	callRange          // a read (a transaction over the create budget)
	callProbe          // is a down etcd back?
	callAlive          // does an idle etcd still know this slot's lease?
)

// fleetOp is one transaction: the requests of one worker waiting for one key.
type fleetOp struct {
	id              uint32
	h               uint64 // the key's lbcore.PersistKeyHash
	proposal        int
	start, deadline time.Time
	readOnly        bool  // over the create budget: read, never create
	rev             int64 // replace at this mod_revision; 0: create-if-absent
	replaces, calls int
	creates, auths  int
	held            bool     // holds a create token (ledger): spent on a create, refunded when the key existed
	call            uint32   // in flight
	waiting         callKind // the root call it waits on (callAuth, callGrant), or 0
	alt             bool     // on the key's second choice (divert)
}

// fleetJob is one key to sync from the tick: reconcile a local decision, or
// refresh a stamp.
type fleetJob struct {
	h        uint64 // the key's lbcore.PersistKeyHash
	svc      int
	stamp    int64 // the Unix second of the use or decision it records
	rev      int64 // replace at this mod_revision; 0: create-if-absent
	replaces int8
	tries    int8
	retries  int8 // answers that asked for a retry (retryable)
	readOnly bool // over the create budget: read and follow, never create
	held     bool // holds a create token (ledger), as fleetOp.held
	resync   bool // placed again after etcd lost its data
}

type fleetCall struct {
	kind    callKind
	op      *fleetOp // nil: root work
	job     fleetJob // callTxn without op: a sync
	slot    int64    // callGrant: the slot the lease is for
	lease   int64    // the lease a put named
	probe   bool     // callAuth: the probe of a down etcd
	sent    time.Time
	timeout time.Duration
}

// NewClient starts the protocol for table persistence p (p.Fleet set)
// under prefix (Prefix), at now; user and password, when user is not
// "", authenticate to etcd.
func NewClient(p *lbcore.Persistence, prefix string, svcs Services, user, password string, now time.Time) *Client {
	return &Client{cfg: p.Fleet, svcs: svcs, prefix: prefix, expire: p.Expire,
		slotSecs: int64(Slot(p.Expire) / time.Second), user: user, password: password,
		ops: map[uint64]*fleetOp{}, byID: map[uint32]*fleetOp{}, calls: map[uint32]*fleetCall{},
		queued: map[uint64]struct{}{}, logged: map[error]bool{},
		tokens: float64(p.Fleet.CreatesPerSecond), budgetAt: now, wall: now, mono: now, aliveAt: now}
}

// Take returns what the client asks for since the last Take, and forgets it.
func (c *Client) Take() Out {
	o := c.out
	s := c.spare
	c.out = Out{Calls: s.Calls[:0], Settled: s.Settled[:0], Remember: s.Remember[:0], Logs: s.Logs[:0],
		bodies: s.bodies[:0]}
	c.spare = Out{}
	return o
}

// Recycle gives back what Take returned, once the caller is done with it
// (the calls' bodies included): the next Take but one writes into its
// buffers, so that a worker's steady work allocates nothing.
func (c *Client) Recycle(o Out) { c.spare = o }

// Pending reports whether the client asks for something (Take).
func (c *Client) Pending() bool { return !c.out.Empty() }

// Counts are the client's counters.
func (c *Client) Counts() Counts { return c.counts }

// Down reports whether etcd is considered down (misses do not ask it).
func (c *Client) Down() bool { return c.down }

// Queued is how many keys wait to be synced.
func (c *Client) Queued() int { return c.queue.n + c.budgetQ.n }

// Miss starts or joins the transaction for persistence key key, whose
// method proposed service proposal. wait false means: decide with the
// proposal now (etcd is down); else the request waits for op's
// Settled.
func (c *Client) Miss(now time.Time, key []byte, proposal int) (op uint32, wait bool) {
	c.clock(now)
	k := lbcore.PersistKeyHash(key)
	if o := c.ops[k]; o != nil {
		return o.id, true
	}
	create := c.spend(now)
	if c.down {
		c.counts.Skipped++
		if !create {
			c.counts.Throttled++
		}
		if create {
			c.enqueue(fleetJob{h: k, svc: proposal, stamp: now.Unix(), held: true})
		} else {
			c.enqueueBudgeted(fleetJob{h: k, svc: proposal, stamp: now.Unix()})
		}
		return 0, false
	}
	return c.start(now, k, proposal, !create), true
}

// Hit reports a local hit of key on service svc, whose previous use was
// Unix second prevUse. An entry last used before etcd last recovered may
// be stale (decided while etcd could not be asked, or lost by etcd): the
// request waits (wait) for the fleet to confirm or correct it, as a miss
// proposing svc, when the create budget allows; else, and for the first
// hit of a slot (which renews the fleet's stamp), the key is synced from
// the tick and the request is served at once.
func (c *Client) Hit(now time.Time, key []byte, svc int, prevUse int64) (op uint32, wait bool) {
	c.clock(now)
	stale := prevUse < c.recovered
	if c.down || (!stale && c.slotOf(prevUse) >= c.slotOf(now.Unix())) {
		return 0, false
	}
	k := lbcore.PersistKeyHash(key)
	if o := c.ops[k]; o != nil {
		return o.id, true
	}
	if !stale { // a refresh: the key is in use, it spends no create
		c.enqueue(fleetJob{h: k, svc: svc, stamp: now.Unix()})
		return 0, false
	}
	if c.spend(now) {
		return c.start(now, k, svc, false), true
	}
	c.enqueueBudgeted(fleetJob{h: k, svc: svc, stamp: now.Unix()})
	return 0, false
}

// start sends the first call of a new transaction for the key of hash k.
func (c *Client) start(now time.Time, k uint64, proposal int, readOnly bool) uint32 {
	o := c.newOp()
	*o = fleetOp{id: c.newID(), h: k, proposal: proposal, start: c.mono,
		deadline: c.mono.Add(c.cfg.Timeout), readOnly: readOnly, held: !readOnly}
	c.ops[k], c.byID[o.id] = o, o
	c.next(o, now)
	return o.id
}

// Abandon settles transaction op locally, for a caller whose host will
// deliver no answer to it. Its key is reconciled later.
func (c *Client) Abandon(now time.Time, op uint32) {
	c.clock(now)
	if o := c.byID[op]; o != nil {
		c.settleLocal(o, now)
	}
}

// Answer delivers the answer to call id: its status and body, size its
// length (the body is not read when size is over MaxAnswerBytes).
func (c *Client) Answer(now time.Time, id uint32, status int, body []byte, size int) {
	c.clock(now)
	cl := c.calls[id]
	if cl == nil {
		return
	}
	if envoyReply(status, body) {
		c.NoAnswer(now, id)
		return
	}
	delete(c.calls, id)
	err := checkAnswer(body, size)
	if err == nil && status != 200 {
		if err = answerError(body); err == nil {
			err = statusError(status)
		}
	}
	if err == nil {
		c.lastOK = c.mono
		c.sawHeader(now, cl.sent, body)
	}
	c.handle(cl, now, body, err)
	c.freeCall(cl)
}

// NoAnswer reports that call id ended without an answer: its timeout
// passed, the connection failed, or it could not be sent.
func (c *Client) NoAnswer(now time.Time, id uint32) {
	c.clock(now)
	if cl := c.calls[id]; cl != nil {
		delete(c.calls, id)
		err := errNoAnswer
		if !c.mono.Before(cl.sent.Add(cl.timeout - time.Millisecond)) {
			err = errTimeout // no answer within its timeout
		}
		c.handle(cl, now, nil, err)
		c.freeCall(cl)
	}
}

// Tick runs the worker's own work: it gives up calls the host forgot,
// probes a down etcd (and an idle one, HeartbeatEvery), authenticates,
// grants leases ahead, and sends queued syncs.
func (c *Client) Tick(now time.Time) {
	c.clock(now)
	var lost []uint32
	for id, cl := range c.calls {
		if c.mono.Sub(cl.sent) > cl.timeout+fleetLostCall {
			lost = append(lost, id)
		}
	}
	slices.Sort(lost) // deterministic
	for _, id := range lost {
		c.NoAnswer(now, id)
	}
	if c.stopped {
		return
	}
	if len(c.diverted) > 0 {
		c.undivert(now)
	}
	if c.down {
		if !c.probe && !c.mono.Before(c.probeAt) {
			switch {
			case c.needAuth() && !c.authing:
				c.probe = true
				c.authIn(now, c.cfg.Timeout).probe = true
			case !c.needAuth():
				c.probe = true
				c.rootCall(callProbe, "/v3/kv/range", c.rangeBody(c.prefixKey()), now)
			}
		}
		return
	}
	slot := c.slotOf(now.Unix())
	if !c.probe && !c.needAuth() && len(c.ring) > 0 && c.mono.Sub(c.aliveAt) >= HeartbeatEvery {
		c.probe, c.aliveAt = true, c.mono
		l := c.leaseFor(slot)
		if l == 0 {
			l = c.leaseFor(slot - 1) // it outlives its slot by expire + slot
		}
		if l != 0 {
			if c.aliveLease != l { // the body is made once per lease
				c.aliveLease, c.aliveBody = l, timeToLiveRequest(l)
			}
			c.rootCall(callAlive, "/v3/lease/timetolive", c.aliveBody, now).lease = l
		} else {
			c.rootCall(callProbe, "/v3/kv/range", c.rangeBody(c.prefixKey()), now)
		}
	}
	if !c.granting && !c.needAuth() && c.leaseFor(slot) != 0 && c.leaseFor(slot+1) == 0 &&
		(slot+1)*c.slotSecs-now.Unix() < c.slotSecs/4+1 {
		c.grantIn(slot+1, now, c.cfg.Timeout)
	}
	c.pump(now)
}

// envoyReply reports whether an answer is Envoy's own, not etcd's: a call
// that etcd never answered (connection refused or reset, the call's
// timeout) reaches the module as a response of Envoy's router, 503 or 504
// with a text/plain body ("upstream connect error or disconnect/reset
// before headers. …", "upstream request timeout"), measured in Envoy 1.36.4
// and 1.40.0 (docs/envoy-host.md#http-callouts). etcd's JSON gateway
// answers JSON, errors included. Such an answer is no answer (errNoAnswer),
// as a host that delivers a failed call without headers reports it.
func envoyReply(status int, body []byte) bool {
	if status < 500 {
		return false
	}
	for _, b := range body {
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return b != '{'
	}
	return true
}

type statusError int

func (e statusError) Error() string { return "status " + strconv.Itoa(int(e)) }

type fleetError string

func (e fleetError) Error() string { return string(e) }

const (
	errNoAnswer = fleetError("no answer (connection failure or unknown cluster)")
	errTimeout  = fleetError("timeout")
)

func (c *Client) newID() uint32 {
	c.lastID++
	if c.lastID == 0 {
		c.lastID++
	}
	return c.lastID
}

// clock advances the monotonic clock to the event at wall-clock time now:
// by how much now is later than the last event's wall-clock time, by
// nothing when it is earlier. The host gives wasm no monotonic clock (only
// the wall clock), so a step back of the wall clock stops none of the
// budget, probes, backoffs and deadlines (they run on c.mono), while a step
// forward advances them by the step. Stamps and slots stay on the wall
// clock: they must agree across proxies.
func (c *Client) clock(now time.Time) {
	if d := now.Sub(c.wall); d > 0 {
		c.mono = c.mono.Add(d)
	}
	c.wall = now
}

// Mono is the client's monotonic clock (clock).
func (c *Client) Mono() time.Time { return c.mono }

// spend takes one create from the budget: CreatesPerSecond, a burst of one
// second's worth.
func (c *Client) spend(now time.Time) bool {
	c.refill()
	if c.tokens < 1 {
		return false
	}
	c.tokens--
	c.ledger.spent++
	return true
}

// refill adds the tokens earned since the last refill.
func (c *Client) refill() {
	rate := float64(c.cfg.CreatesPerSecond)
	if dt := c.mono.Sub(c.budgetAt); dt > 0 {
		c.tokens = min(rate, c.tokens+rate*dt.Seconds())
		c.budgetAt = c.mono
	}
}

// The create tokens' ledger: each token spent (spend) is held by one
// transaction or sync (fleetOp.held, fleetJob.held) until it is, exactly
// once, refunded (the key existed: nothing grew etcd), consumed (the
// create was applied) or dropped (its outcome is unknown, or it was given
// up: counted as grown). So spent = refunded + consumed + dropped + held.
type ledger struct{ spent, refunded, consumed, dropped uint64 }

// refund gives back the token *held holds, if it holds one.
func (c *Client) refund(held *bool) {
	if *held {
		*held = false
		c.ledger.refunded++
		c.tokens = min(float64(c.cfg.CreatesPerSecond), c.tokens+1)
	}
}

// consume marks the token *held holds as spent on a create applied.
func (c *Client) consume(held *bool) {
	if *held {
		*held = false
		c.ledger.consumed++
	}
}

// drop gives up the token *held holds: it stays spent.
func (c *Client) drop(held *bool) {
	if *held {
		*held = false
		c.ledger.dropped++
	}
}

func (c *Client) slotOf(t int64) int64 { return t / c.slotSecs }

func (c *Client) needAuth() bool { return c.user != "" && c.token == "" }

// leaseFor is the lease of slot, 0 when this worker has none.
func (c *Client) leaseFor(slot int64) int64 {
	if l := c.leases[slot&1]; l.slot == slot {
		return l.id
	}
	return 0
}

func (c *Client) setLease(slot, id int64) { c.leases[slot&1] = struct{ slot, id int64 }{slot, id} }

// lostLease handles "lease not found" for lease id. Its TTL outlives every
// slot it is used in (leaseTTL), so etcd lost it with its data, or an
// operator revoked it: keys used before now may be gone from etcd too.
func (c *Client) lostLease(id int64, now time.Time) {
	c.recovered = now.Unix() + 1
	for _, l := range c.leases {
		if l.id == id && id != 0 {
			c.dataLost(now, "it does not know the lease it granted")
			return
		}
	}
}

func (c *Client) logOnce(err error, warn bool, msg string) {
	if !c.logged[err] {
		c.logged[err] = true
		c.out.Logs = append(c.out.Logs, Log{Warn: warn, Msg: msg})
	}
}

func (c *Client) cluster() string { return strconv.Quote(c.cfg.Cluster) }

// Records are reused: an op once settled, a call once answered (or given
// up), is no longer reachable from c.ops, c.byID or c.calls.

// takeFree returns a record from free, or a new one.
func takeFree[T any](free *[]*T) *T {
	if n := len(*free); n > 0 {
		r := (*free)[n-1]
		*free = (*free)[:n-1]
		return r
	}
	return new(T)
}

func (c *Client) newOp() *fleetOp { return takeFree(&c.freeOps) }

func (c *Client) freeOp(o *fleetOp) { c.freeOps = append(c.freeOps, o) }

func (c *Client) newCall() *fleetCall { return takeFree(&c.freeCalls) }

func (c *Client) freeCall(cl *fleetCall) {
	if cl != &c.aliveCall {
		*cl = fleetCall{}
		c.freeCalls = append(c.freeCalls, cl)
	}
}

// The calls' bodies are written into the output's buffer (Out.bodies),
// which the caller gives back with Recycle once it sent them.

// body returns what was appended to the bodies since len start.
func (c *Client) body(start int) []byte {
	return c.out.bodies[start:len(c.out.bodies):len(c.out.bodies)]
}

// fleetKey is the etcd key of the key of hash h, in a buffer reused.
func (c *Client) fleetKey(h uint64) []byte {
	c.keyBuf = appendKey(c.keyBuf[:0], c.prefix, h)
	return c.keyBuf
}

// txnBody is the body of a create-if-absent (rev 0) or replace (at
// mod_revision rev) of the key of hash h with a record of stamp and service
// svc.
func (c *Client) txnBody(h uint64, rev, stamp int64, svc int, lease int64) []byte {
	return c.txnBodyAt(c.fleetKey(h), rev, stamp, svc, lease)
}

// txnBodyAt is txnBody for etcd key k.
func (c *Client) txnBodyAt(k []byte, rev, stamp int64, svc int, lease int64) []byte {
	c.valueBuf = appendRecord(c.valueBuf[:0], stamp, c.svcs.FleetService(svc))
	start := len(c.out.bodies)
	c.out.bodies = appendTxn(c.out.bodies, k, rev, c.valueBuf, lease)
	return c.body(start)
}

// opKey is the etcd key o works on: its key's, or its second choice's
// (AltSuffix), in the key's buffer.
func (c *Client) opKey(o *fleetOp) []byte {
	k := c.fleetKey(o.h)
	if o.alt {
		k = append(k, AltSuffix...)
		c.keyBuf = k
	}
	return k
}

// prefixKey is the table's prefix, in the key's buffer.
func (c *Client) prefixKey() []byte {
	c.keyBuf = append(c.keyBuf[:0], c.prefix...)
	return c.keyBuf
}

// rangeBody is the body of a read of etcd key k.
func (c *Client) rangeBody(k []byte) []byte {
	start := len(c.out.bodies)
	c.out.bodies = appendRange(c.out.bodies, k)
	return c.body(start)
}

func (c *Client) grantBody(ttl int64) []byte {
	start := len(c.out.bodies)
	c.out.bodies = appendLeaseGrant(c.out.bodies, ttl)
	return c.body(start)
}

func (c *Client) authBody() []byte {
	start := len(c.out.bodies)
	c.out.bodies = appendAuthenticate(c.out.bodies, c.user, c.password)
	return c.body(start)
}

// jobQueue is the sync queue: a ring of jobs that grows (doubling, up to
// QueueMax) and never shrinks, so that keys going through it allocate
// nothing once it is as large as the worker's backlog has been.
type jobQueue struct {
	jobs    []fleetJob
	head, n int
}

func (q *jobQueue) grow() {
	size := max(2*len(q.jobs), 64)
	if limit := QueueMax + SyncAtOnce; size > limit { // requeued syncs may pass QueueMax
		size = max(limit, q.n+1)
	}
	jobs := make([]fleetJob, size)
	for i := range q.n {
		jobs[i] = q.jobs[(q.head+i)%len(q.jobs)]
	}
	q.jobs, q.head = jobs, 0
}

func (q *jobQueue) push(j fleetJob) {
	if q.n == len(q.jobs) {
		q.grow()
	}
	q.jobs[(q.head+q.n)%len(q.jobs)] = j
	q.n++
}

func (q *jobQueue) pushFront(j fleetJob) {
	if q.n == len(q.jobs) {
		q.grow()
	}
	q.head = (q.head + len(q.jobs) - 1) % len(q.jobs)
	q.jobs[q.head] = j
	q.n++
}

func (q *jobQueue) pop() fleetJob {
	j := q.jobs[q.head]
	q.head = (q.head + 1) % len(q.jobs)
	q.n--
	return j
}

// all is the queue's jobs, in order.
func (q *jobQueue) all() []fleetJob {
	out := make([]fleetJob, q.n)
	for i := range out {
		out[i] = q.jobs[(q.head+i)%len(q.jobs)]
	}
	return out
}
