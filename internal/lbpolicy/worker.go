package lbpolicy

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/hashlb/hashlb/lbcore/fleet"
)

// Failure says why a choice returned no host.
type Failure uint8

// The failures.
const (
	// NoFailure: a host was chosen.
	NoFailure Failure = iota
	// NoHost: the cluster has no healthy host at any priority, or the host
	// set could not be made into services (Worker.Update's error).
	NoHost
	// Inconsistent: the host set changed under the worker and a rebuild of
	// its view did not settle it.
	Inconsistent
)

// Worker is the policy on one Envoy worker thread: the cluster's hosts as
// lbcore services and the Balancer that decides over them. Not safe for
// concurrent use; Envoy calls each worker's load balancer on its thread.
//
// Every priority level's hosts are services of one Balancer; the hosts of
// every level but the one served (the lowest with a healthy host) are down,
// so a key is ranked over that level's healthy hosts alone, and comes back
// to its host of a lower level when that level has healthy hosts again.
type Worker struct {
	pol *Policy
	ns  string // the persistence namespace: hashlb/<cluster>
	st  *workerStore

	// fleet is the process's fleet member for the namespace (fleet.go),
	// nil without persistence.fleet; slot is its refresh slot in seconds.
	fleet *fleetMember
	slot  int64

	hosts *sharedHosts // the host set the cluster's workers share

	v     view
	svcs  []lbcore.Service
	seed  uint64
	actAt int // choices since active requests were read
	bal   *lbcore.Balancer

	// OnHealth, when set, is told of a change of the healthy hosts a choice
	// found (not of an update's): one no membership hook told.
	OnHealth func()

	gen  uint32 // bumped on every change of the view of the hosts (View)
	last struct {
		host, healthy int
		ok            bool
	} // the last Choose, for Remembered

	// The choice cache's carry over a change of the view (carry.go): the
	// view the cache was last given, the identity map the last Update
	// made from the hosts of lastFrom, and the carry CarryFrom returns.
	base      carryBase
	lastCarry lbcore.Carry
	lastFrom  *hostSet
	cc        CacheCarry

	req     lbcore.Request
	backups int // choices left in which a backup decision was recent (readActive)
	d       lbcore.Decision
	dr      lbcore.Decision
}

// NewWorker returns the policy's worker for the cluster named cluster.
func (p *Policy) NewWorker(cluster string) *Worker {
	ns := "hashlb/" + cluster
	s := p.store
	if s == nil {
		s = processStore
	}
	t := s.acquire(ns)
	w := &Worker{
		pol:   p,
		ns:    ns,
		st:    newWorkerStore(s, t),
		hosts: &t.hosts,
		req:   lbcore.Request{Headers: make([][2]string, 0, 8)},
	}
	if per := p.Config.Persistence; per != nil && per.Fleet != nil {
		w.fleet = acquireFleet(s, t, ns, cluster, per, p.etcd)
		w.slot = int64(fleet.Slot(per.Expire) / time.Second)
	}
	return w
}

// Close gives the worker's persistence namespace back: the table is freed
// when no worker of any policy has used it for a while (store.go). The
// last worker of a fleet member stops it and waits for its goroutines.
func (w *Worker) Close() {
	if w.st != nil {
		w.st.s.release(w.ns)
		w.st = nil
	}
	if w.fleet != nil {
		w.fleet.release()
		w.fleet = nil
	}
}

// FleetStats returns the counters of the worker's fleet member; zero
// without persistence.fleet.
func (w *Worker) FleetStats() FleetStats {
	if w.fleet == nil {
		return FleetStats{}
	}
	return w.fleet.Stats()
}

// settleFleet completes a decision of a policy with persistence.fleet,
// without waiting: a key the local table does not hold (Decision.Ask) takes
// the method's choice into the local table at once and is proposed to etcd
// in the background, unless its entry was on a service not selectable
// here (which the fleet keeps for the proxies that can use it); a hit that
// is the key's first use in a new slot proposes a refresh of its stamp.
func (w *Worker) settleFleet(now time.Time) {
	d := &w.d
	switch {
	case d.Ask:
		if d.Len() == 0 {
			return
		}
		i := d.At(0)
		h := lbcore.PersistKeyHash(w.bal.AskKey())
		w.bal.RememberHash(h, now, i)
		if !d.Persist.Rechosen {
			w.fleet.propose(proposal{h: h, svc: w.bal.FleetService(i), stamp: now.Unix(), create: true})
		}
	case d.Persist.Hit && d.Len() > 0 && int64(d.Persist.PrevUse)/w.slot < now.Unix()/w.slot:
		w.fleet.propose(proposal{h: lbcore.PersistKeyHash(w.bal.AskKey()), svc: w.bal.FleetService(d.At(0)), stamp: now.Unix()})
	}
}

// Update is what Update found out of the ordinary in a host set.
type UpdateNotes struct {
	// Clamped is how many hosts have an LB weight over hashlb's 100
	// (ranked as 100); Example is one of them, for the log.
	Clamped int
	Example string
}

// Update rebuilds the services from the host set: each host is a service
// whose identity is its metadata hashlb.hashId, else hashlb.name, else its
// address; its name hashlb.name, else the identity; its weight its LB
// weight. An error leaves the worker without services: every choice fails
// until the next update.
func (w *Worker) Update(h Hosts) (notes UpdateNotes, err error) {
	prev, prevHosts := w.bal, w.v.hs
	w.bal, w.svcs = nil, nil
	w.gen++
	hs := w.hosts.get(h, w.pol)
	w.v.reset(hs)
	if hs.err != nil {
		return hs.notes, hs.err
	}
	if hs.cfg == nil { // no hosts
		return hs.notes, nil
	}
	w.svcs = hs.svcs
	w.seed = rand.Uint64()
	w.bal = lbcore.NewBalancer(hs.cfg, w.seed)
	if prev != nil {
		// Slow start: ramps go on, and a host this update adds (or raises
		// from weight 0) starts one; mark below ends the ramp of a host
		// that is not healthy, which starts again when it is.
		carry := prev.Carry(hs.svcs)
		w.bal.Continue(prev, &carry)
		w.lastCarry, w.lastFrom = carry, prevHosts
	}
	w.bal.EnablePersistence(w.st, w.ns)
	w.v.scan(h) // from the same snapshot: a host it lacks is not served
	w.mark()
	return hs.notes, nil
}

// scan places the hosts among Envoy's healthy hosts and marks down, for
// lbcore, every host not healthy at the level served. A snapshot listing a
// host the view lacks (the host set changed with no membership hook) is
// rebuilt from.
func (w *Worker) scan(h Hosts) {
	w.gen++
	if !w.v.scan(h) {
		w.Update(h) // an error leaves no services: counted at the next update
		return
	}
	w.mark()
}

// mark gives lbcore the view's health: a host is up when it is healthy at
// the level served.
func (w *Worker) mark() {
	for i := range w.v.hidx {
		up := w.v.serving(i)
		w.bal.SetDown(i, !up)
	}
}

// backupWindow is how many choices after a backup decision the active
// requests stay read for a least-connection backup: a hash method's backup
// decides only for requests without the method's input, and reading the
// hosts' rq_active for every request that has it would be spent for nothing.
// The first backup decision after a long time without one sees the counts
// of the last read.
const backupWindow = 64

// readActive gives lbcore the active requests of the level served, at most
// every ⌈n/8⌉ choices so that a large cluster costs at most about 8 reads
// per choice (every choice up to 8 hosts).
func (w *Worker) readActive(h Hosts) {
	if w.v.serve < 0 {
		return
	}
	l := w.v.levels[w.v.serve]
	if w.actAt++; w.actAt < (l.count+7)/8 {
		return
	}
	w.actAt = 0
	for k := range l.count {
		w.bal.SetActive(l.first+k, h.ActiveRequests(w.v.serve, k))
	}
}

// Choose picks the host for a request: lbcore's first-ranked service, or,
// when Envoy's retry predicate rejects it, the next rank it accepts. It
// returns the host's priority and its index among that priority's healthy
// hosts, which Envoy asks for.
func (w *Worker) Choose(h Hosts, c Context, now time.Time) (priority, index int, f Failure) {
	w.last.ok = false
	priority, index, f = w.choose(h, c, now)
	// Nothing may keep Envoy's memory past the hook.
	clear(w.req.Headers)
	w.req = lbcore.Request{Headers: w.req.Headers[:0]}
	return priority, index, f
}

func (w *Worker) choose(h Hosts, c Context, now time.Time) (int, int, Failure) {
	if w.bal == nil {
		return 0, 0, NoHost
	}
	if w.v.stale(h) {
		was := w.healthy()
		w.scan(h)
		if w.bal == nil {
			return 0, 0, NoHost
		}
		if w.healthy() != was && w.OnHealth != nil {
			w.OnHealth()
		}
	}
	if w.v.serve < 0 {
		return 0, 0, NoHost
	}
	if w.pol.active || w.backups > 0 {
		w.readActive(h)
	}
	req := w.fill(c)
	for attempt := 0; ; attempt++ {
		w.bal.DecideInto(&w.d, req, now)
		if w.fleet != nil {
			w.settleFleet(now)
		}
		if w.backups > 0 {
			w.backups--
		}
		if w.pol.activeBackup && w.d.Reason == lbcore.ReasonBackup {
			w.backups = backupWindow
		}
		if w.d.Len() == 0 {
			return 0, 0, NoHost
		}
		i := w.d.At(0)
		hi, ok := w.v.healthyIndex(h, i)
		if !ok {
			if attempt > 0 {
				return 0, 0, Inconsistent
			}
			w.scan(h)
			if w.bal == nil || w.v.serve < 0 {
				return 0, 0, NoHost
			}
			continue
		}
		p, k := w.v.local(i)
		if !c.ShouldSelectAnotherHost(p, k) {
			w.last.host, w.last.healthy, w.last.ok = i, hi, p == 0 && w.d.Reason == lbcore.ReasonHash && !w.bal.AnyRamping()
			return p, hi, NoFailure
		}
		return p, w.walk(h, c, req, i, hi), NoFailure
	}
}

// Summary describes the view for the log: hosts, healthy hosts, and the
// priority served when the cluster has several.
func (w *Worker) Summary() string {
	n, levels := w.v.hosts(), len(w.v.levels)
	switch {
	case levels <= 1:
		return fmt.Sprintf("%d hosts (%d healthy)", n, w.healthy())
	case w.v.serve < 0:
		return fmt.Sprintf("%d hosts at %d priorities, none healthy", n, levels)
	}
	return fmt.Sprintf("%d hosts at %d priorities (%d healthy), serving priority %d (%d of its %d hosts healthy)",
		n, levels, w.healthy(), w.v.serve, w.v.levels[w.v.serve].healthy, w.v.levels[w.v.serve].count)
}

// healthy is the number of hosts the view has healthy at any level.
func (w *Worker) healthy() int {
	n := 0
	for _, l := range w.v.levels {
		n += l.healthy
	}
	return n
}

// walk is a retry: the first rank after i that is healthy at the level
// served and that Envoy's retry predicate accepts, in lbcore's failover
// order; the first choice again when every rank was tried.
func (w *Worker) walk(h Hosts, c Context, req *lbcore.Request, i, hi int) int {
	w.bal.RankInto(&w.dr, req)
	for r := range w.dr.Len() {
		j := w.dr.At(r)
		if j == i {
			continue
		}
		if hj, ok := w.v.healthyIndex(h, j); ok {
			if p, k := w.v.local(j); !c.ShouldSelectAnotherHost(p, k) {
				return hj
			}
		}
	}
	return hi
}

// maxCopies bounds how many copies of one header a request is read with.
const maxCopies = 64

// fill builds the lbcore request from what the decisions read
// (lbcore.Config.Inputs), one header at a time.
func (w *Worker) fill(c Context) *lbcore.Request {
	in := &w.pol.in
	req := &w.req
	if !in.Target && !in.Authority && !in.Method && len(in.Headers) == 0 {
		return req
	}
	if in.Target {
		req.Target, _ = c.Header(":path", 0)
	}
	if in.Authority {
		req.Authority, _ = c.Header(":authority", 0)
	}
	if in.Method {
		req.Method, _ = c.Header(":method", 0)
	}
	for _, name := range in.Headers {
		v, n := c.Header(name, 0)
		if n == 0 {
			continue
		}
		req.Headers = append(req.Headers, [2]string{name, v})
		// Every copy where the decision reads them all (x-forwarded-for
		// right to left, cookie), in order, as the filter reads them.
		for i := 1; in.AllCopies && i < n && i < maxCopies; i++ {
			v, _ := c.Header(name, i)
			req.Headers = append(req.Headers, [2]string{name, v})
		}
	}
	return req
}

// View is the worker's view of the hosts: a generation that changes with
// every update and every rescan of their health (never 0 once made), and
// the healthy hosts at priority 0, which the choice cache compares with
// Envoy's count.
func (w *Worker) View() (gen uint32, healthy int) {
	if w.gen == 0 {
		w.gen = 1
	}
	if len(w.v.levels) == 0 {
		return w.gen, 0
	}
	return w.gen, w.v.levels[0].healthy
}

// Remembered reports whether the last Choose may be remembered for its
// :path key (Policy.PathKey): a hash decision's first rank at priority 0,
// taken (no retry walk, no backup method), under the current View, with no
// service in a slow-start ramp (the decision then changes with time); then
// host is its index among the hosts of priority 0 and healthy among their
// healthy hosts (Choose's answer).
func (w *Worker) Remembered() (host, healthy int, ok bool) {
	return w.last.host, w.last.healthy, w.last.ok
}

// Decision is the lbcore decision of the last Choose (its first rank; a
// retry walk is not in it), for tests and explanations.
func (w *Worker) Decision() *lbcore.Decision { return &w.d }

// Services returns the services the worker decides over: every level's
// hosts, priority 0's first, each level's in host order.
func (w *Worker) Services() []lbcore.Service {
	if w.bal == nil {
		return nil
	}
	return w.bal.Config().Services
}
