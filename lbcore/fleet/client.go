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
//     first answer ends it. Calls under way together that fail at once
//     count as one failure (health). A hit of a key last used before that moment
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
	cfg    *lbcore.Fleet
	svcs   Services
	expire time.Duration

	clk      clock    // the monotonic clock of budgets, probes, backoffs and deadlines
	reg      registry // the transactions and calls in flight
	out      outbox   // what the client asks for, and the buffers it writes it with
	root     roots    // the token and the leases, and the calls that get them (root.go)
	health   health   // etcd up or down, and the probes and heartbeats that tell (health.go)
	budget   budget   // the create budget (budget.go)
	syncs    syncQueue
	known    knownKeys // the keys placed, and the signs that etcd lost them (known.go)
	diverted divertSet // keys served on their second choice (divert.go)

	stopped bool    // handed over to a new configuration's client (HandOver)
	succ    *Client // that client, when compatible: what c still queues goes to it
	counts  Counts
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
	return &Client{cfg: p.Fleet, svcs: svcs, expire: p.Expire,
		clk: clock{wall: now, mono: now}, reg: newRegistry(), out: newOutbox(prefix),
		root: roots{user: user, password: password}, health: health{beatAt: now},
		budget: newBudget(p.Fleet.CreatesPerSecond, now), syncs: newSyncQueue()}
}

// Take returns what the client asks for since the last Take, and forgets it.
func (c *Client) Take() Out { return c.out.take() }

// Recycle gives back what Take returned, once the caller is done with it
// (the calls' bodies included): the next Take but one writes into its
// buffers, so that a worker's steady work allocates nothing.
func (c *Client) Recycle(o Out) { c.out.spare = o }

// Pending reports whether the client asks for something (Take).
func (c *Client) Pending() bool { return !c.out.Empty() }

// Counts are the client's counters.
func (c *Client) Counts() Counts { return c.counts }

// Down reports whether etcd is considered down (misses do not ask it).
func (c *Client) Down() bool { return c.health.down }

// Queued is how many keys wait to be synced.
func (c *Client) Queued() int { return c.syncs.len() }

// Miss starts or joins the transaction for persistence key key, whose
// method proposed service proposal. wait false means: decide with the
// proposal now (etcd is down); else the request waits for op's
// Settled.
func (c *Client) Miss(now time.Time, key []byte, proposal int) (op uint32, wait bool) {
	c.clock(now)
	k := lbcore.PersistKeyHash(key)
	if o := c.reg.ops[k]; o != nil {
		return o.id, true
	}
	create := c.budget.spend(c.clk.mono)
	if c.health.down {
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
	stale := prevUse < c.health.recovered
	if c.health.down || (!stale && c.slotOf(prevUse) >= c.slotOf(now.Unix())) {
		return 0, false
	}
	k := lbcore.PersistKeyHash(key)
	if o := c.reg.ops[k]; o != nil {
		return o.id, true
	}
	if !stale { // a refresh: the key is in use, it spends no create
		c.enqueue(fleetJob{h: k, svc: svc, stamp: now.Unix()})
		return 0, false
	}
	if c.budget.spend(c.clk.mono) {
		return c.start(now, k, svc, false), true
	}
	c.enqueueBudgeted(fleetJob{h: k, svc: svc, stamp: now.Unix()})
	return 0, false
}

// start sends the first call of a new transaction for the key of hash k.
func (c *Client) start(now time.Time, k uint64, proposal int, readOnly bool) uint32 {
	o := c.reg.newOp()
	*o = fleetOp{id: c.reg.newID(), h: k, proposal: proposal, start: c.clk.mono,
		deadline: c.clk.mono.Add(c.cfg.Timeout), readOnly: readOnly, held: !readOnly}
	c.reg.ops[k], c.reg.byID[o.id] = o, o
	c.next(o, now)
	return o.id
}

// Abandon settles transaction op locally, for a caller whose host will
// deliver no answer to it. Its key is reconciled later.
func (c *Client) Abandon(now time.Time, op uint32) {
	c.clock(now)
	if o := c.reg.byID[op]; o != nil {
		c.settleLocal(o, now)
	}
}

// Answer delivers the answer to call id: its status and body, size its
// length (the body is not read when size is over MaxAnswerBytes).
func (c *Client) Answer(now time.Time, id uint32, status int, body []byte, size int) {
	c.clock(now)
	cl := c.reg.calls[id]
	if cl == nil {
		return
	}
	if envoyReply(status, body) {
		c.NoAnswer(now, id)
		return
	}
	delete(c.reg.calls, id)
	err := checkAnswer(body, size)
	if err == nil && status != 200 {
		if err = answerError(body); err == nil {
			err = statusError(status)
		}
	}
	if err == nil {
		c.sawHeader(now, cl.sent, body)
	}
	c.handle(cl, now, body, err)
	c.freeCall(cl)
}

// NoAnswer reports that call id ended without an answer: its timeout
// passed, the connection failed, or it could not be sent.
func (c *Client) NoAnswer(now time.Time, id uint32) {
	c.clock(now)
	if cl := c.reg.calls[id]; cl != nil {
		delete(c.reg.calls, id)
		err := errNoAnswer
		if !c.clk.mono.Before(cl.sent.Add(cl.timeout - time.Millisecond)) {
			err = errTimeout // no answer within its timeout
		}
		c.handle(cl, now, nil, err)
		c.freeCall(cl)
	}
}

// Tick runs the worker's own work: it gives up calls the host forgot,
// probes a down etcd (and an idle one, HeartbeatEvery), places the known
// keys again after a data loss whose resync was deferred, authenticates,
// grants leases ahead, and sends queued syncs (the queue's rest after an
// unanswered sync ends here).
func (c *Client) Tick(now time.Time) {
	c.clock(now)
	var lost []uint32
	for id, cl := range c.reg.calls {
		if c.clk.mono.Sub(cl.sent) > cl.timeout+fleetLostCall {
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
	if c.health.down {
		c.probe(now)
		return
	}
	if why := c.known.resyncDeferred(c.clk.mono); why != "" {
		c.resync(now, why)
	}
	c.heartbeat(now)
	c.grantAhead(now)
	c.syncs.resting = false
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

// clock is the monotonic clock made of the wall clock's forward steps:
// the host gives wasm no monotonic clock (only the wall clock), so a step
// back of the wall clock stops none of the budget, probes, backoffs and
// deadlines (they run on mono), while a step forward advances them by the
// step. Stamps and slots stay on the wall clock: they must agree across
// proxies.
type clock struct{ wall, mono time.Time }

// advance moves the clock to an event at wall-clock time now: mono by how
// much now is later than the last event's wall-clock time, by nothing when
// it is earlier.
func (k *clock) advance(now time.Time) {
	if d := now.Sub(k.wall); d > 0 {
		k.mono = k.mono.Add(d)
	}
	k.wall = now
}

// clock advances c's clock to the event at wall-clock time now.
func (c *Client) clock(now time.Time) { c.clk.advance(now) }

// Mono is the client's monotonic clock (clock).
func (c *Client) Mono() time.Time { return c.clk.mono }

func (c *Client) slotOf(t int64) int64 { return SlotOf(t, c.expire) }

func (c *Client) slotSecs() int64 { return int64(Slot(c.expire) / time.Second) }

// alive reports whether a key used at Unix second used has not expired.
func (c *Client) alive(used int64, now time.Time) bool {
	return Record{Stamp: used}.Alive(now, c.expire)
}

func (c *Client) cluster() string { return strconv.Quote(c.cfg.Cluster) }

func (c *Client) logOnce(err error, warn bool, msg string) { c.out.logOnce(err, warn, msg) }
