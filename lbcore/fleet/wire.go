package fleet

// What goes on the wire: the transactions and calls in flight (registry),
// and what the client asks for with the buffers it writes it in (outbox).

// registry holds a Client's transactions and calls in flight, and reuses
// their records: an op once settled, a call once answered (or given up),
// is no longer reachable from ops, byID or calls, so that a transaction
// allocates nothing in a steady state.
type registry struct {
	lastID    uint32
	ops       map[uint64]*fleetOp // by lbcore.PersistKeyHash
	byID      map[uint32]*fleetOp
	calls     map[uint32]*fleetCall
	freeOps   []*fleetOp
	freeCalls []*fleetCall
}

func newRegistry() registry {
	return registry{ops: map[uint64]*fleetOp{}, byID: map[uint32]*fleetOp{}, calls: map[uint32]*fleetCall{}}
}

// newID is the next id of a transaction or call, never 0.
func (r *registry) newID() uint32 {
	r.lastID++
	if r.lastID == 0 {
		r.lastID++
	}
	return r.lastID
}

// takeFree returns a record from free, or a new one.
func takeFree[T any](free *[]*T) *T {
	if n := len(*free); n > 0 {
		rec := (*free)[n-1]
		*free = (*free)[:n-1]
		return rec
	}
	return new(T)
}

func (r *registry) newOp() *fleetOp { return takeFree(&r.freeOps) }

func (r *registry) freeOp(o *fleetOp) { r.freeOps = append(r.freeOps, o) }

func (r *registry) newCall() *fleetCall { return takeFree(&r.freeCalls) }

func (r *registry) freeCall(cl *fleetCall) {
	*cl = fleetCall{}
	r.freeCalls = append(r.freeCalls, cl)
}

// outbox is what a Client asks for until the next Take (Out), and the
// buffers reused to write it: the calls' bodies go into Out.bodies, which
// the caller gives back with Recycle once it sent them (spare); the etcd
// key, a record's value and an answer's decoded value into their own.
type outbox struct {
	Out
	spare     Out // buffers given back (Recycle)
	prefix    string
	keyBuf    []byte
	valueBuf  []byte
	decodeBuf []byte
	logged    map[error]bool // errors logged once
}

func newOutbox(prefix string) outbox { return outbox{prefix: prefix, logged: map[error]bool{}} }

// take returns what was asked for since the last take, and writes on into
// the buffers given back.
func (b *outbox) take() Out {
	o, s := b.Out, b.spare
	b.Out = Out{Calls: s.Calls[:0], Settled: s.Settled[:0], Remember: s.Remember[:0], Logs: s.Logs[:0],
		bodies: s.bodies[:0]}
	b.spare = Out{}
	return o
}

func (b *outbox) log(warn bool, msg string) { b.Logs = append(b.Logs, Log{Warn: warn, Msg: msg}) }

// logOnce logs msg the first time err is logged.
func (b *outbox) logOnce(err error, warn bool, msg string) {
	if !b.logged[err] {
		b.logged[err] = true
		b.log(warn, msg)
	}
}

// body returns what was appended to the bodies since len start.
func (b *outbox) body(start int) []byte {
	return b.bodies[start:len(b.bodies):len(b.bodies)]
}

// fleetKey is the etcd key of the key of hash h, in a buffer reused.
func (b *outbox) fleetKey(h uint64) []byte {
	b.keyBuf = AppendKey(b.keyBuf[:0], b.prefix, h)
	return b.keyBuf
}

// altKey is the etcd key of the second choice (AltSuffix) of the key of
// hash h, in the key's buffer.
func (b *outbox) altKey(h uint64) []byte {
	b.keyBuf = append(b.fleetKey(h), AltSuffix...)
	return b.keyBuf
}

// prefixKey is the table's prefix, in the key's buffer.
func (b *outbox) prefixKey() []byte {
	b.keyBuf = append(b.keyBuf[:0], b.prefix...)
	return b.keyBuf
}

// txnBody is the body of a create-if-absent (rev 0) or replace (at
// mod_revision rev) of etcd key k with a record of stamp and service
// identity svc, attached to lease.
func (b *outbox) txnBody(k []byte, rev, stamp int64, svc string, lease int64) []byte {
	b.valueBuf = appendRecord(b.valueBuf[:0], stamp, svc)
	start := len(b.bodies)
	b.bodies = appendTxn(b.bodies, k, rev, b.valueBuf, lease)
	return b.body(start)
}

// rangeBody is the body of a read of etcd key k.
func (b *outbox) rangeBody(k []byte) []byte {
	start := len(b.bodies)
	b.bodies = appendRange(b.bodies, k)
	return b.body(start)
}

func (b *outbox) grantBody(ttl int64) []byte {
	start := len(b.bodies)
	b.bodies = appendLeaseGrant(b.bodies, ttl)
	return b.body(start)
}

func (b *outbox) authBody(user, password string) []byte {
	start := len(b.bodies)
	b.bodies = appendAuthenticate(b.bodies, user, password)
	return b.body(start)
}
