package lbpolicy

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// Health is a host's health as Envoy reports it (coarse health).
type Health uint8

// The health states, in the ABI's order.
const (
	Healthy Health = iota
	Degraded
	Unhealthy
)

// Hosts is the cluster's host set at priority 0 as one worker sees it, read
// through the ABI's load-balancer callbacks. Strings may alias Envoy's
// memory: they are valid until the hook that got them returns.
type Hosts interface {
	// Count is the number of hosts; Address, Weight, Health, Metadata and
	// ActiveRequests take an index below it.
	Count() int
	Address(i int) string
	Weight(i int) int
	Health(i int) Health
	// Metadata is the string value of key in the host's endpoint metadata
	// under the filter name "hashlb", or "".
	Metadata(i int, key string) string
	// ActiveRequests is the host's rq_active stat (every worker's).
	ActiveRequests(i int) int64
	// HealthyCount is the number of healthy hosts; HealthyAddress takes an
	// index below it. Envoy's chooseHost answer is such an index.
	HealthyCount() int
	HealthyAddress(i int) string
}

// Context is the request Envoy is choosing a host for.
type Context interface {
	// Header returns the i-th value of the downstream request header name
	// (lower-case; pseudo-headers such as :path included) and how many
	// values it has (0: none; always 0 for a TCP connection).
	Header(name string, i int) (value string, n int)
	// ShouldSelectAnotherHost is Envoy's retry predicate for host i (an
	// index of Hosts): true for a host a retry should avoid.
	ShouldSelectAnotherHost(i int) bool
}

// Failure says why a choice returned no host.
type Failure uint8

// The failures.
const (
	// NoFailure: a host was chosen.
	NoFailure Failure = iota
	// NoHost: the cluster has no healthy host, or the host set could not be
	// made into services (Worker.Update's error).
	NoHost
	// Inconsistent: the host set changed under the worker and a rescan did
	// not settle it.
	Inconsistent
)

// Worker is the policy on one Envoy worker thread: the cluster's hosts as
// lbcore services and the Balancers that decide over them. Not safe for
// concurrent use; Envoy calls each worker's load balancer on its thread.
type Worker struct {
	pol *Policy
	ns  string // the persistence namespace: hashlb/<cluster>
	st  *workerStore

	n      int
	addrs  []string // host i's address (a copy)
	hidx   []int32  // host i's index among the healthy hosts, or -1
	nh     int      // healthy hosts at the last scan
	since  int      // choices since the last scan
	actAt  int      // choices since active requests were read
	bal    *lbcore.Balancer
	ranked *lbcore.Balancer

	// OnHealth, when set, is told of a change of the healthy count a choice
	// found (not of the scan of an update): one no membership hook told.
	OnHealth func(healthy, total int)

	gen  uint32 // bumped on every change of the view of the hosts (View)
	last struct {
		host, healthy int
		ok            bool
	} // the last Choose, for Remembered

	req     lbcore.Request
	backups int // choices left in which a backup decision was recent (readActive)
	d       lbcore.Decision
	dr      lbcore.Decision
}

// rescanEvery is how many choices pass, while some host is not healthy,
// between two reads of every host's health. Envoy 1.40 runs the membership
// hook on health changes too (Update rescans then); the choice's own checks
// (the healthy count, the chosen host's place among the healthy hosts, and
// this rescan) keep the worker right should a change reach it otherwise.
const rescanEvery = 4096

// NewWorker returns the policy's worker for the cluster named cluster.
func (p *Policy) NewWorker(cluster string) *Worker {
	return &Worker{
		pol: p,
		ns:  "hashlb/" + cluster,
		st:  newWorkerStore(processStore),
		req: lbcore.Request{Headers: make([][2]string, 0, 8)},
	}
}

// Update rebuilds the services from the host set: each host is a service
// whose identity is its metadata hashlb.hashId, else hashlb.name, else its
// address; its name hashlb.name, else the identity; its weight its LB
// weight. warnings are things the operator should know (a weight clamped);
// an error leaves the worker without services: every choice fails until the
// next update.
func (w *Worker) Update(h Hosts) (warnings []string, err error) {
	w.bal, w.ranked = nil, nil
	w.gen++
	n := h.Count()
	w.n = n
	w.addrs = w.addrs[:0]
	w.hidx = w.hidx[:0]
	w.nh = -1
	if n == 0 {
		return nil, nil
	}
	svcs := make([]lbcore.Service, n)
	for i := range n {
		addr := strings.Clone(h.Address(i))
		w.addrs = append(w.addrs, addr)
		w.hidx = append(w.hidx, -1)
		s := &svcs[i]
		s.Address, s.Enabled = addr, true
		s.HashID = strings.Clone(h.Metadata(i, "hashId"))
		name := strings.Clone(h.Metadata(i, "name"))
		if s.HashID == "" {
			s.HashID = name
		}
		switch {
		case name != "":
			s.Name = name
		case s.HashID != "":
			s.Name = s.HashID
		default:
			s.Name = addr
		}
		s.Weight = h.Weight(i)
		if s.Weight > 100 {
			warnings = append(warnings, fmt.Sprintf("host %s: LB weight %d is over hashlb's 100, ranked as 100", addr, s.Weight))
			s.Weight = 100
		}
		if s.Weight < 1 {
			s.Weight = 1
		}
	}
	c, err := w.pol.Config.WithServices(svcs)
	if err != nil {
		return warnings, fmt.Errorf("the cluster's hosts cannot be hashlb's services: %v", err)
	}
	r, err := w.pol.ranked.WithServices(svcs)
	if err != nil {
		return warnings, err
	}
	seed := rand.Uint64()
	w.bal = lbcore.NewBalancer(c, seed)
	w.bal.EnablePersistence(w.st, w.ns)
	w.ranked = lbcore.NewBalancer(r, seed)
	w.scan(h)
	return warnings, nil
}

// scan reads every host's health: a host that is not healthy is down for
// lbcore (Envoy hands out healthy hosts only, so a degraded host is down
// too).
func (w *Worker) scan(h Hosts) {
	w.gen++
	k := int32(0)
	for i := range w.n {
		up := h.Health(i) == Healthy
		if up {
			w.hidx[i] = k
			k++
		} else {
			w.hidx[i] = -1
		}
		w.bal.SetDown(i, !up)
		w.ranked.SetDown(i, !up)
	}
	w.nh = int(k)
	w.since = 0
}

// backupWindow is how many choices after a backup decision the active
// requests stay read for a least-connection backup: a hash method's backup
// decides only for requests without the method's input, and reading the
// hosts' rq_active for every request that has it would be spent for nothing.
// The first backup decision after a long time without one sees the counts
// of the last read.
const backupWindow = 64

// readActive gives lbcore every host's active requests, at most every
// ⌈n/8⌉ choices so that a large cluster costs at most about 8 reads per
// choice (every choice up to 8 hosts).
func (w *Worker) readActive(h Hosts) {
	if w.actAt++; w.actAt < (w.n+7)/8 {
		return
	}
	w.actAt = 0
	for i := range w.n {
		a := h.ActiveRequests(i)
		w.bal.SetActive(i, a)
		w.ranked.SetActive(i, a)
	}
}

// Choose picks the host for a request: lbcore's first-ranked service, or,
// when Envoy's retry predicate rejects it, the next rank it accepts. It
// returns the host's index among the healthy hosts, which Envoy asks for.
func (w *Worker) Choose(h Hosts, c Context, now time.Time) (int, Failure) {
	w.last.ok = false
	hi, f := w.choose(h, c, now)
	// Nothing may keep Envoy's memory past the hook.
	clear(w.req.Headers)
	w.req = lbcore.Request{Headers: w.req.Headers[:0]}
	return hi, f
}

func (w *Worker) choose(h Hosts, c Context, now time.Time) (int, Failure) {
	if w.bal == nil {
		return 0, NoHost
	}
	hc := h.HealthyCount()
	if hc == 0 {
		return 0, NoHost
	}
	if hc != w.nh || (hc < w.n && w.since >= rescanEvery) {
		was := w.nh
		w.scan(h)
		if w.nh != was && w.OnHealth != nil {
			w.OnHealth(w.nh, w.n)
		}
	}
	w.since++
	if w.pol.active || w.backups > 0 {
		w.readActive(h)
	}
	req := w.fill(c)
	for attempt := 0; ; attempt++ {
		w.bal.DecideInto(&w.d, req, now)
		if w.backups > 0 {
			w.backups--
		}
		if w.pol.activeBackup && w.d.Reason == lbcore.ReasonBackup {
			w.backups = backupWindow
		}
		if w.d.Len() == 0 {
			return 0, NoHost
		}
		i := w.d.At(0)
		hi, ok := w.healthyIndex(h, i, hc)
		if !ok {
			if attempt > 0 {
				return 0, Inconsistent
			}
			w.scan(h)
			continue
		}
		if !c.ShouldSelectAnotherHost(i) {
			w.last.host, w.last.healthy, w.last.ok = i, hi, w.d.Reason == lbcore.ReasonHash
			return hi, NoFailure
		}
		return w.walk(h, c, req, now, i, hi, hc), NoFailure
	}
}

// walk is a retry: the first rank after i that is healthy and that Envoy's
// retry predicate accepts, in lbcore's failover order; the first choice
// again when every rank was tried.
func (w *Worker) walk(h Hosts, c Context, req *lbcore.Request, now time.Time, i, hi, hc int) int {
	w.ranked.DecideInto(&w.dr, req, now)
	for r := range w.dr.Len() {
		j := w.dr.At(r)
		if j == i {
			continue
		}
		if hj, ok := w.healthyIndex(h, j, hc); ok && !c.ShouldSelectAnotherHost(j) {
			return hj
		}
	}
	return hi
}

// healthyIndex maps host i to its index among the healthy hosts, checking
// that Envoy's list still has it there (the list is the hosts in order,
// without those not healthy).
func (w *Worker) healthyIndex(h Hosts, i, hc int) (int, bool) {
	if hc == w.n {
		return i, true // every host is healthy: the lists are the same
	}
	k := int(w.hidx[i])
	if k < 0 || k >= hc {
		return 0, false
	}
	return k, h.HealthyAddress(k) == w.addrs[i]
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
// the healthy hosts it counted.
func (w *Worker) View() (gen uint32, healthy int) {
	if w.gen == 0 {
		w.gen = 1
	}
	return w.gen, w.nh
}

// Remembered reports whether the last Choose may be remembered for its
// :path key (Policy.PathKey): a hash decision's first rank, taken (no retry
// walk, no backup method), under the current View; then host is its index
// among the hosts and healthy among the healthy hosts (Choose's answer).
func (w *Worker) Remembered() (host, healthy int, ok bool) {
	return w.last.host, w.last.healthy, w.last.ok
}

// Decision is the lbcore decision of the last Choose (its first rank; a
// retry walk is not in it), for tests and explanations.
func (w *Worker) Decision() *lbcore.Decision { return &w.d }

// Services returns the services the worker decides over, in host order.
func (w *Worker) Services() []lbcore.Service {
	if w.bal == nil {
		return nil
	}
	return w.bal.Config().Services
}
