package lbpolicy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/hashlb/hashlb/lbcore/fleet"
)

// Fleet-wide persistence for the policy (docs/persistence.md, "The fleet
// with the load-balancing policy"): one fleetMember per Envoy process,
// persistence namespace and fleet configuration, shared by the workers
// that use them. It speaks the Wasm filter's protocol (lbcore/fleet's key
// layout and record: first writer wins, create-if-absent on a lease per
// slot), so filters and policies of one fleet share placements, with
// etcd's own Go client on goroutines of its own:
//
//   - the choose path never waits: a new key is decided and stored in the
//     local table at once, then handed over (Worker.propose) through a
//     bounded queue; a full queue drops the proposal and counts it;
//   - fleetProposers goroutines send each proposal as a transaction
//     (create if absent, else read); a live record of another service is
//     followed (the local table takes it), a stale one or a stamp of an
//     older slot is replaced on its mod_revision;
//   - one goroutine reads the live records of the fleet's prefix (at most
//     the table's size, in pages) into the process's table when it
//     starts, then watches the prefix and puts every live record written
//     after into it, so a proxy that starts serves the keys placed before
//     it as the fleet does, and each proxy learns the others' placements
//     as they are made;
//   - a proposal etcd did not answer (a leader election, a member gone,
//     quorum lost) is kept, up to fleetQueue of them, and sent again every
//     fleetRetry until etcd answers it: two proxies that placed a key each
//     their own way while etcd could not decide agree once it can again;
//   - the last worker's Close stops them all and closes the client.

// fleetQueue is how many proposals wait for the proposers at most.
const fleetQueue = 4096

// fleetProposers is how many goroutines send proposals.
const fleetProposers = 2

// fleetDial bounds making the client: connecting and, with a user,
// authenticating, which costs etcd a bcrypt of the password and can take
// far longer than one call's fleet.timeout on a loaded etcd. Nothing waits
// on it but the fleet's own goroutines.
const fleetDial = 10 * time.Second

// fleetLoadPage is how many records one read of the watch's start asks
// etcd for (a variable for the tests' small pages).
var fleetLoadPage int64 = 10000

// fleetRetry is how long the watch waits before it is opened again after
// it failed, and how often proposals etcd did not answer are sent again.
const fleetRetry = time.Second

// proposal is a key this process placed (or used in a new slot), for etcd:
// its hash, the service's identity in fleet records and the stamp.
type proposal struct {
	h      uint64
	svc    string
	stamp  int64
	create bool // a new key, which spends the create budget; else a refresh or a retry
}

// FleetStats counts what the fleet member did, for tests and the log.
type FleetStats struct {
	// Proposed: proposals queued; Dropped: proposals lost to a full queue;
	// OverBudget: creates over createsPerSecond, kept local.
	Proposed, Dropped, OverBudget uint64
	// Placed: keys etcd took as proposed (created or refreshed);
	// Followed: keys etcd held on another live service, which the local
	// table took; Failed: sends etcd did not answer (each is kept and sent
	// again: Retried); Lost: failed proposals over the fleetQueue kept.
	Placed, Followed, Failed, Retried, Lost uint64
	// Loaded: records the watch's start put into the local table (those
	// etcd held); Watched: records its events put there.
	Loaded, Watched uint64
}

// fleetMember is the fleet level of one process's persistence namespace
// under one fleet configuration.
type fleetMember struct {
	id     string // the key of store.fleets
	refs   int    // workers using it; under store.fleetMu
	ns     string
	f      lbcore.Fleet
	prefix string
	expire time.Duration
	size   int
	creds  etcdCredentials

	store *sharedStore
	table *nsTable
	q     chan proposal

	cancel context.CancelFunc
	wg     sync.WaitGroup

	stats struct {
		proposed, dropped, overBudget, placed, followed, failed, retried, lost, loaded, watched atomic.Uint64
	}
	retry retrySet
	lease leaseSlot
	rate  createBudget
}

// retrySet holds the proposals etcd did not answer until they are sent
// again, at most fleetQueue of them.
type retrySet struct {
	mu sync.Mutex
	ps []proposal
}

// leaseSlot is the lease of the current slot that puts are attached to,
// shared by the proposers.
type leaseSlot struct {
	mu   sync.Mutex
	slot int64
	id   clientv3.LeaseID
}

// createBudget is createsPerSecond as a token bucket of one second's burst.
type createBudget struct {
	mu     sync.Mutex
	tokens float64
	at     time.Time
}

// fleetPrefix is the policy's etcd prefix: persistence.fleet.prefix, else
// /hashlb/<Envoy cluster>/.
func fleetPrefix(f *lbcore.Fleet, cluster string) string {
	return fleet.Prefix(f, cluster)
}

// acquireFleet returns the member for the workers of namespace ns (table t
// of store s) under persistence p with credentials creds, started for the
// first of them.
func acquireFleet(s *sharedStore, t *nsTable, ns, cluster string, p *lbcore.Persistence, creds etcdCredentials) *fleetMember {
	prefix := fleetPrefix(p.Fleet, cluster)
	id := memberID(ns, prefix, p, creds)
	s.fleetMu.Lock()
	defer s.fleetMu.Unlock()
	if m := s.fleets[id]; m != nil {
		m.refs++
		return m
	}
	if s.fleets == nil {
		s.fleets = map[string]*fleetMember{}
	}
	m := &fleetMember{id: id, refs: 1, ns: ns, f: *p.Fleet, prefix: prefix, expire: p.Expire, size: p.TableSize,
		creds: creds, store: s, table: t, q: make(chan proposal, fleetQueue)}
	m.rate.tokens, m.rate.at = float64(m.f.CreatesPerSecond), time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.wg.Add(1)
	go m.run(ctx)
	s.fleets[id] = m
	return m
}

// memberID names a member of a store: the namespace, what the fleet
// configuration says of etcd and the table, and who the client is (the
// user, whether it speaks TLS).
func memberID(ns, prefix string, p *lbcore.Persistence, creds etcdCredentials) string {
	b := make([]byte, 0, 128)
	b = append(b, ns...)
	b = append(b, 0)
	b = append(b, prefix...)
	for _, e := range p.Fleet.Endpoints {
		b = append(append(b, 0), e...)
	}
	b = append(b, 0)
	b = append(b, lbcore.FormatDuration(p.Expire)...)
	b = append(b, 0)
	b = appendInt(b, int64(p.TableSize))
	b = append(b, 0)
	b = appendInt(b, int64(p.Fleet.CreatesPerSecond))
	b = append(b, 0)
	b = appendInt(b, int64(p.Fleet.Timeout))
	b = append(append(b, 0), creds.user...)
	if creds.tls != nil {
		b = append(b, 0, 't')
	}
	return string(b)
}

func appendInt(b []byte, n int64) []byte {
	if n < 0 {
		b, n = append(b, '-'), -n
	}
	var d [20]byte
	i := len(d)
	for {
		i--
		d[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			break
		}
	}
	return append(b, d[i:]...)
}

// release is a worker of m closing; the last one stops m and waits for its
// goroutines.
func (m *fleetMember) release() {
	s := m.store
	s.fleetMu.Lock()
	m.refs--
	last := m.refs == 0
	if last {
		delete(s.fleets, m.id)
	}
	s.fleetMu.Unlock()
	if last {
		m.cancel()
		m.wg.Wait()
	}
}

// propose queues p for etcd without waiting: a full queue drops it.
func (m *fleetMember) propose(p proposal) {
	select {
	case m.q <- p:
		m.stats.proposed.Add(1)
	default:
		m.stats.dropped.Add(1)
	}
}

// Stats returns the member's counters.
func (m *fleetMember) Stats() FleetStats {
	return FleetStats{
		Proposed: m.stats.proposed.Load(), Dropped: m.stats.dropped.Load(), OverBudget: m.stats.overBudget.Load(),
		Placed: m.stats.placed.Load(), Followed: m.stats.followed.Load(), Failed: m.stats.failed.Load(),
		Retried: m.stats.retried.Load(), Lost: m.stats.lost.Load(),
		Loaded: m.stats.loaded.Load(), Watched: m.stats.watched.Load(),
	}
}

// run makes the client and runs the watch and the proposers until ctx
// ends, then closes the client.
func (m *fleetMember) run(ctx context.Context) {
	defer m.wg.Done()
	cfg := clientv3.Config{
		Endpoints:   m.f.Endpoints,
		Username:    m.creds.user,
		Password:    m.creds.password,
		TLS:         m.creds.tls,
		DialTimeout: max(m.f.Timeout, fleetDial),
		Context:     ctx,
		Logger:      zap.NewNop(),
		// Keepalives find a dead member, so that the client moves to another.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
	}
	cli, err := clientv3.New(cfg)
	for err != nil {
		// With a user, the client authenticates as it is made: etcd not
		// reachable yet, or refusing the password, fails it. Proposals are
		// kept meanwhile (failed), and it is made again every fleetRetry.
		again := time.After(fleetRetry)
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case p := <-m.q:
				m.failed(p)
			case <-again:
				break wait
			}
		}
		cli, err = clientv3.New(cfg)
	}
	defer cli.Close()
	var wg sync.WaitGroup
	wg.Add(2 + fleetProposers)
	go func() {
		defer wg.Done()
		m.watch(ctx, cli)
	}()
	go func() {
		defer wg.Done()
		m.retrier(ctx)
	}()
	for range fleetProposers {
		go func() {
			defer wg.Done()
			m.proposer(ctx, cli)
		}()
	}
	wg.Wait()
}

// localTable is a goroutine's own handle on the process's table (a Table
// and a workerStore are not shared between goroutines).
func (m *fleetMember) localTable() *lbcore.Table {
	return lbcore.NewTable(newWorkerStore(m.store, m.table), m.ns, m.size, m.expire)
}

// watch puts every live record of the prefix into the local table: first
// those etcd holds when it starts (load), then every one written after,
// from the revision after the last one seen when it is opened again (or
// after a new load, should etcd have compacted past that revision).
func (m *fleetMember) watch(ctx context.Context, cli *clientv3.Client) {
	t := m.localTable()
	var rev int64
	for ctx.Err() == nil {
		if rev == 0 {
			rev = m.load(ctx, cli, t)
		}
		if rev > 0 {
			wctx := clientv3.WithRequireLeader(ctx)
			for resp := range cli.Watch(wctx, m.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
				if resp.CompactRevision > 0 {
					rev = 0 // compacted past it: load again
				}
				if resp.Err() != nil {
					break
				}
				now := time.Now()
				for _, ev := range resp.Events {
					if ev.Type == clientv3.EventTypePut && m.learn(t, ev.Kv, now) {
						m.stats.watched.Add(1)
					}
				}
				rev = max(rev, resp.Header.Revision)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(fleetRetry):
		}
	}
}

// load puts the live records etcd holds under the prefix into the local
// table, up to the table's size of them, read in pages of fleetLoadPage
// at one revision, and returns that revision; 0 when etcd did not answer
// (the watch then tries again). A proxy that starts, or restarts, so
// serves the keys the fleet placed before it without first deciding them
// its own way. Nothing waits on it but the watch, hence fleetDial.
func (m *fleetMember) load(ctx context.Context, cli *clientv3.Client, t *lbcore.Table) int64 {
	var rev int64
	key, end := m.prefix, clientv3.GetPrefixRangeEnd(m.prefix)
	for read := 0; read < m.size; {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(fleetLoadPage)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		cctx, cancel := context.WithTimeout(ctx, fleetDial)
		resp, err := cli.Get(cctx, key, opts...)
		cancel()
		if err != nil {
			return 0
		}
		rev = max(rev, resp.Header.Revision, 1)
		now := time.Now()
		for _, kv := range resp.Kvs {
			if m.learn(t, kv, now) {
				m.stats.loaded.Add(1)
			}
		}
		read += len(resp.Kvs)
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	return rev
}

// learn puts the record kv into the local table if it is a live record of
// the prefix, and reports whether it did.
func (m *fleetMember) learn(t *lbcore.Table, kv *mvccpb.KeyValue, now time.Time) bool {
	h, ok := fleet.KeyHash(m.prefix, string(kv.Key))
	r, live := fleet.ParseRecord(string(kv.Value))
	if !ok || !live || !r.Alive(now, m.expire) {
		return false
	}
	t.Put(h, now, xxhash.Sum64String(r.Service))
	return true
}

// failed keeps p, which etcd did not answer, to be sent again; over
// fleetQueue kept, it is lost (counted).
func (m *fleetMember) failed(p proposal) {
	m.stats.failed.Add(1)
	p.create = false // its create token is spent
	r := &m.retry
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ps) >= fleetQueue {
		m.stats.lost.Add(1)
		return
	}
	r.ps = append(r.ps, p)
}

// retrier puts the kept proposals back on the queue every fleetRetry, as
// many as it takes, until ctx ends.
func (m *fleetMember) retrier(ctx context.Context) {
	tick := time.NewTicker(fleetRetry)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r := &m.retry
		r.mu.Lock()
		n := 0
	put:
		for _, p := range r.ps {
			select {
			case m.q <- p:
				n++
				m.stats.retried.Add(1)
			default:
				break put
			}
		}
		r.ps = append(r.ps[:0], r.ps[n:]...)
		r.mu.Unlock()
	}
}

// proposer sends the queued proposals until ctx ends.
func (m *fleetMember) proposer(ctx context.Context, cli *clientv3.Client) {
	t := m.localTable()
	key := make([]byte, 0, len(m.prefix)+16)
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-m.q:
			if p.create && !m.rate.take(float64(m.f.CreatesPerSecond), time.Now()) {
				m.stats.overBudget.Add(1)
				continue
			}
			key = fleet.AppendKey(key[:0], m.prefix, p.h)
			m.send(ctx, cli, t, string(key), p)
		}
	}
}

// take spends one create token at now, if the bucket has one.
func (b *createBudget) take(rate float64, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(rate, b.tokens+now.Sub(b.at).Seconds()*rate)
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// send settles one proposal: create if absent (else read); a record that is
// not alive, or the same service stamped in an older slot, is replaced on
// its mod_revision (at most twice); another live service is followed.
func (m *fleetMember) send(ctx context.Context, cli *clientv3.Client, t *lbcore.Table, key string, p proposal) {
	now := time.Now()
	val := fleet.Record{Stamp: p.stamp, Service: p.svc}.String()
	lease, ok := m.leaseFor(ctx, cli, now)
	if !ok {
		m.failed(p)
		return
	}
	var rev int64 // 0: create if absent; else replace at this mod_revision
	for range 3 {
		cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if rev != 0 {
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", rev)
		}
		cctx, cancel := context.WithTimeout(ctx, m.f.Timeout)
		resp, err := cli.Txn(cctx).If(cmp).
			Then(clientv3.OpPut(key, val, clientv3.WithLease(lease))).
			Else(clientv3.OpGet(key)).Commit()
		cancel()
		if err != nil {
			m.failed(p)
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				m.lease.forget(lease)
			}
			return
		}
		if resp.Succeeded {
			m.stats.placed.Add(1)
			return
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			rev = 0 // deleted between the compare and the read
			continue
		}
		r, live := fleet.ParseRecord(string(kvs[0].Value))
		switch {
		case !live || !r.Alive(now, m.expire):
			rev = kvs[0].ModRevision
		case r.Service == p.svc && fleet.SlotOf(r.Stamp, m.expire) < fleet.SlotOf(p.stamp, m.expire):
			rev = kvs[0].ModRevision // in use in a new slot: refresh the stamp
		case r.Service == p.svc:
			m.stats.placed.Add(1)
			return
		default:
			t.Put(p.h, now, xxhash.Sum64String(r.Service))
			m.stats.followed.Add(1)
			return
		}
	}
	m.failed(p)
}

// leaseFor returns the lease of now's slot, granted once per slot.
func (m *fleetMember) leaseFor(ctx context.Context, cli *clientv3.Client, now time.Time) (clientv3.LeaseID, bool) {
	l := &m.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	slot := fleet.SlotOf(now.Unix(), m.expire)
	if l.id != 0 && l.slot == slot {
		return l.id, true
	}
	cctx, cancel := context.WithTimeout(ctx, m.f.Timeout)
	defer cancel()
	g, err := cli.Grant(cctx, fleet.LeaseTTL(slot, now.Unix(), m.expire))
	if err != nil {
		return 0, false
	}
	l.slot, l.id = slot, g.ID
	return l.id, true
}

// forget drops lease id, which etcd no longer knows: the next put grants
// another.
func (l *leaseSlot) forget(id clientv3.LeaseID) {
	l.mu.Lock()
	if l.id == id {
		l.id = 0
	}
	l.mu.Unlock()
}
