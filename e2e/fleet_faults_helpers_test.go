package e2e

// Helpers of the fleet fault tests: Debian's etcd as a process
// the test can kill, freeze and restart, a TCP front per proxy that can
// refuse, reset, delay or cut that proxy off, and a steady load that records
// every request.

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/fleetsplit"
	"github.com/hashlb/hashlb/internal/fleettest"
	"github.com/hashlb/hashlb/internal/lateness"
	"github.com/hashlb/hashlb/lbcore/fleet"
)

// etcdProc is one etcd binary process on its own free ports.
type etcdProc struct {
	t      testing.TB
	bin    string
	addr   string
	cmd    *exec.Cmd
	exited chan struct{}
	out    *envoyrun.SyncBuffer
}

// startEtcdProc runs bin (etcd 3.4's flags) with its data in dir and waits
// until its gateway answers. It is killed at t's cleanup.
func startEtcdProc(t testing.TB, bin, dir string) *etcdProc {
	t.Helper()
	for try := 1; ; try++ {
		cmd, client := etcdCommand(t, bin, dir)
		e := &etcdProc{t: t, bin: bin, addr: client[len("http://"):], cmd: cmd, exited: make(chan struct{}), out: &envoyrun.SyncBuffer{}}
		cmd.Stdout, cmd.Stderr = e.out, e.out
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting %s: %v", bin, err)
		}
		go func() { cmd.Wait(); close(e.exited) }()
		t.Cleanup(e.kill)
		err := fleettest.WaitGateway(e.addr, 60*time.Second, e.exited)
		if err == nil {
			return e
		}
		e.kill()
		if try < etcdStartTries && portTaken(e.out.String()) {
			t.Logf("%s: another process took a port between its pick and etcd's bind; started again on others", bin)
			continue
		}
		t.Fatalf("%s: %v\n%s", bin, err, e.out.String())
	}
}

// kill ends the process with SIGKILL (after SIGCONT, should it be frozen).
func (e *etcdProc) kill() {
	select {
	case <-e.exited:
		return
	default:
	}
	e.cmd.Process.Signal(syscall.SIGCONT)
	e.cmd.Process.Kill()
	<-e.exited
}

func (e *etcdProc) signal(s os.Signal) {
	if err := e.cmd.Process.Signal(s); err != nil {
		e.t.Errorf("etcd: %v: %v", s, err)
	}
}

// front modes: what it does to calls.
const (
	frontPass    int32 = iota
	frontRefuse        // every connection closed at once (etcd not listening)
	frontReset30       // 30 % of the requests reset before they reach etcd
	frontDelay         // every chunk held delay in each direction
	frontLate          // requests pass at once, answers held delay
)

// front is a TCP forwarder in front of etcd for one proxy.
type front struct {
	addr   string
	target atomic.Pointer[string]
	mode   atomic.Int32
	delay  atomic.Int64
	cut    atomic.Bool // this proxy is partitioned from etcd
	mu     sync.Mutex
	conns  map[net.Conn]bool
	done   chan struct{}
}

// newFront forwards to target until t ends.
func newFront(t testing.TB, target string) *front {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &front{addr: ln.Addr().String(), conns: map[net.Conn]bool{}, done: make(chan struct{})}
	f.target.Store(&target)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	t.Cleanup(func() {
		close(f.done)
		ln.Close()
		f.dropAll()
	})
	return f
}

func (f *front) setTarget(addr string) { f.target.Store(&addr); f.dropAll() }

// set changes the mode (and delay), dropping open connections so that the
// next calls see it.
func (f *front) set(mode int32, delay time.Duration) {
	f.delay.Store(int64(delay))
	f.mode.Store(mode)
	f.dropAll()
}

func (f *front) setCut(cut bool) { f.cut.Store(cut); f.dropAll() }

func (f *front) dropAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		reset(c)
	}
}

// reset closes c with an RST.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

func (f *front) track(c net.Conn, add bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if add {
		f.conns[c] = true
	} else {
		delete(f.conns, c)
	}
}

func (f *front) serve(in net.Conn) {
	if f.cut.Load() || f.mode.Load() == frontRefuse {
		reset(in)
		return
	}
	out, err := net.DialTimeout("tcp", *f.target.Load(), time.Second)
	if err != nil {
		reset(in)
		return
	}
	f.track(in, true)
	f.track(out, true)
	defer f.track(in, false)
	defer f.track(out, false)
	go f.pipe(in, out, false)
	f.pipe(out, in, true)
}

// pipe copies src to dst; toEtcd is the request direction.
func (f *front) pipe(dst, src net.Conn, toEtcd bool) {
	defer reset(dst)
	defer reset(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			mode, d := f.mode.Load(), time.Duration(f.delay.Load())
			if toEtcd && mode == frontReset30 && rand.IntN(10) < 3 {
				return
			}
			if mode == frontDelay || (mode == frontLate && !toEtcd) {
				select {
				case <-time.After(d):
				case <-f.done:
					return
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// loadRec is one request of a steady load.
type loadRec struct {
	at     time.Time // when it was decided
	key    string
	host   int
	worker int
	svc    string
	wait   time.Duration
	paused bool
}

// steadyLoad sends requests for random keys to random workers of random
// hosts, rate per second in all, and fires the hosts' ticks as they fall
// due, until stop is called; stop returns every request's record. A
// request that fails fails the test.
//
// late reports the most a 10 ms timer of this process fired late meanwhile
// (lateness.Meter).
func steadyLoad(t *testing.T, hosts []*hostsim.Host, keys []string, rate int) (stop func() []loadRec, late func() time.Duration) {
	m := lateness.Start()
	stopLoad := (&swapLoad{hosts: hosts}).run(t, keys, rate, 19)
	stop = func() []loadRec {
		recs := stopLoad()
		m.Stop()
		return recs
	}
	return stop, m.Late
}

// swapLoad is a steady load's proxies, which may be restarted meanwhile
// (swap): a request holds its proxy until it has left the filter.
type swapLoad struct {
	mu    sync.RWMutex
	hosts []*hostsim.Host
}

func (l *swapLoad) swap(i int, h *hostsim.Host) {
	l.mu.Lock()
	old := l.hosts[i]
	l.hosts[i] = h
	l.mu.Unlock()
	old.Close(context.Background())
}

// run sends rate requests a second for random keys (drawn from seed) to
// random workers of random proxies, and ticks the proxies every 50 ms,
// until stop.
func (l *swapLoad) run(t *testing.T, keys []string, rate int, seed uint64) (stop func() []loadRec) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var recs []loadRec
	var wg sync.WaitGroup
	const senders = 4
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), seed))
			every := time.Second * senders / time.Duration(rate)
			next := time.Now()
			for ctx.Err() == nil {
				next = next.Add(every)
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				key := keys[rng.IntN(len(keys))]
				l.mu.RLock()
				hi := rng.IntN(len(l.hosts))
				h := l.hosts[hi]
				wi := rng.IntN(h.Workers())
				rep, err := fleetRoundTrip(h, wi, key)
				l.mu.RUnlock()
				if err != nil {
					t.Errorf("request for %s through proxy %d: %v", key, hi, err)
					continue
				}
				mu.Lock()
				recs = append(recs, loadRec{at: time.Now(), key: key, host: hi, worker: wi, svc: rep.service, wait: rep.waited, paused: rep.paused})
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			l.mu.RLock()
			for _, h := range l.hosts {
				h.Tick()
			}
			l.mu.RUnlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return func() []loadRec {
		cancel()
		wg.Wait()
		return recs
	}
}

// lastSplit is fleetsplit.Last over the load's requests: each
// proxy is a host.
func lastSplit(recs []loadRec, from time.Time) (last time.Time, example string) {
	ps := make([]fleetsplit.Placement, len(recs))
	for i, r := range recs {
		ps[i] = fleetsplit.Placement{At: r.at, Key: r.key, Proxy: r.host, Service: r.svc}
	}
	return fleetsplit.Last(ps, from)
}

// splitAfter counts the keys that got two services through different
// proxies among the requests after from.
func splitAfter(recs []loadRec, from time.Time) (n int, example string) {
	got := map[string]map[string]int{}
	for _, r := range recs {
		if r.at.After(from) {
			if got[r.key] == nil {
				got[r.key] = map[string]int{}
			}
			got[r.key][r.svc]++
		}
	}
	for k, svcs := range got {
		if len(svcs) > 1 {
			n++
			example = fmt.Sprintf("%s → %v", k, svcs)
		}
	}
	return n, example
}

// keyHistory is every request for key, one per line, with its time from
// zero: proxy, worker, service, how long it waited and whether it paused
// for etcd (what a failed convergence is read from).
func keyHistory(recs []loadRec, key string, zero time.Time) string {
	var b strings.Builder
	for _, r := range recs {
		if r.key == key {
			fmt.Fprintf(&b, "\n\t%+8v proxy %d worker %d → %s, waited %v (paused %v)",
				r.at.Sub(zero).Round(time.Millisecond), r.host, r.worker, r.svc, r.wait.Round(time.Millisecond), r.paused)
		}
	}
	return b.String()
}

// fleetEtcdKey is the etcd key of the load's persistence key k.
func fleetEtcdKey(k string) string { return fleet.Key("/hashlb/"+persistRootID+"/", []byte(k)) }

// agreement judges the requests made after from, less those decided
// locally by design (localByDesign): split is how many keys got two
// services, and story, when there is one, the first such key's services,
// its requests and every call about it (times from zero); local and judged
// count the requests excused and held to agreement.
func (l *calloutLog) agreement(recs []loadRec, hosts []*hostsim.Host, from, zero time.Time) (split int, story string, local, judged int) {
	var after []loadRec
	for _, r := range recs {
		if r.at.After(from) {
			after = append(after, r)
		}
	}
	held, local := l.localByDesign(after, hosts)
	split, ex := splitAfter(held, from)
	if split > 0 {
		key, _, _ := strings.Cut(ex, " → ")
		story = fmt.Sprintf("%s; its requests:%s\nand the proxies' calls to etcd about it:%s",
			ex, keyHistory(recs, key, zero), l.story(fleetEtcdKey(key), zero))
	}
	return split, story, local, len(held)
}

// calloutLog keeps every callout of a set of proxies to etcd, to tell a
// key's story when a fault test fails (what each proxy asked and was
// answered about it).
type calloutLog struct {
	mu   sync.Mutex
	recs []proxyCallout
}

type proxyCallout struct {
	proxy int
	hostsim.CalloutRecord
}

// hook is hostsim.Config.OnCallout for proxy i.
func (l *calloutLog) hook(i int) func(hostsim.CalloutRecord) {
	return func(r hostsim.CalloutRecord) {
		l.mu.Lock()
		l.recs = append(l.recs, proxyCallout{i, r})
		l.mu.Unlock()
	}
}

// etcdBase64 finds the base64 fields of etcd's JSON API (keys, values),
// which story decodes.
var etcdBase64 = regexp.MustCompile(`"(key|value|range_end)":"([A-Za-z0-9+/]+=*)"`)

// story is every callout whose request or answer names etcdKey, one per
// line, times from zero, base64 fields decoded.
func (l *calloutLog) story(etcdKey string, zero time.Time) string {
	enc := base64.StdEncoding.EncodeToString([]byte(etcdKey))
	decode := func(b []byte) string {
		return etcdBase64.ReplaceAllStringFunc(string(b), func(m string) string {
			sm := etcdBase64.FindStringSubmatch(m)
			d, err := base64.StdEncoding.DecodeString(sm[2])
			if err != nil {
				return m
			}
			return fmt.Sprintf("%q:%q", sm[1], d)
		})
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, r := range l.recs {
		if !bytes.Contains(r.Req.Body, []byte(enc)) && (r.Resp == nil || !bytes.Contains(r.Resp.Body, []byte(enc))) {
			continue
		}
		var body []byte
		if r.Resp != nil {
			body = r.Resp.Body
		}
		fmt.Fprintf(&b, "\n\t%+8v → %+8v proxy %d worker %d %s %s\n\t\t→ %s %s",
			r.Sent.Sub(zero).Round(time.Millisecond), r.Answered.Sub(zero).Round(time.Millisecond), r.proxy, r.Req.Worker,
			r.Req.Header(":path"), decode(r.Req.Body), r.status(), decode(body))
		if r.Err != nil {
			fmt.Fprintf(&b, " (%v)", r.Err)
		}
	}
	return b.String()
}

// unanswered reports whether proxy's last call about etcdKey whose outcome
// reached it before at got no answer from etcd in time (a timeout, a
// refused or reset connection, an error status) less than unansweredFor
// before at: the proxy then decides the key locally, by design (a request
// never waits past the timeout), and retries the call at its next tick.
func (l *calloutLog) unanswered(proxy int, etcdKey string, at time.Time) bool {
	enc := []byte(base64.StdEncoding.EncodeToString([]byte(etcdKey)))
	l.mu.Lock()
	defer l.mu.Unlock()
	var last *proxyCallout
	for i := range l.recs {
		r := &l.recs[i]
		if r.proxy == proxy && r.Answered.Before(at) && bytes.Contains(r.Req.Body, enc) &&
			(last == nil || r.Answered.After(last.Answered)) {
			last = r
		}
	}
	return last != nil && at.Sub(last.Answered) <= unansweredFor && last.status() != "200"
}

// unansweredPath counts the calls to path that got no answer from etcd in
// time.
func (l *calloutLog) unansweredPath(path string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i := range l.recs {
		if r := &l.recs[i]; r.Req.Header(":path") == path && r.status() != "200" {
			n++
		}
	}
	return n
}

// mark is where the calls recorded so far end, for everUnanswered.
func (l *calloutLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recs)
}

// everUnanswered reports whether a proxy's call about etcdKey since mark
// got no answer from etcd in time (a timeout, a refused or reset
// connection, an error status).
func (l *calloutLog) everUnanswered(etcdKey string, mark int) bool {
	enc := []byte(base64.StdEncoding.EncodeToString([]byte(etcdKey)))
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := mark; i < len(l.recs); i++ {
		if r := &l.recs[i]; bytes.Contains(r.Req.Body, enc) && r.status() != "200" {
			return true
		}
	}
	return false
}

// unansweredSince counts the calls since mark that got no answer from etcd
// in time.
func (l *calloutLog) unansweredSince(mark int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i := mark; i < len(l.recs); i++ {
		if l.recs[i].status() != "200" {
			n++
		}
	}
	return n
}

// status is the :status the module was handed for the call ("" for none).
func (r *proxyCallout) status() string {
	if r.Resp == nil {
		return ""
	}
	for _, h := range r.Resp.Headers {
		if h[0] == ":status" {
			return h[1]
		}
	}
	return ""
}

// unansweredFor is how long after a call about a key went unanswered a
// proxy's local decision for it is excused: the sync is retried at the
// next tick (50 ms), or at the next probe (every second) when the worker
// holds etcd down, which etcdDown sees.
const unansweredFor = 2 * time.Second

// downSpan is a time a proxy's worker held etcd down: from its warning
// that etcd failed FailLimit times in a row to its "answers again"; to is
// zero while it is still down.
type downSpan struct{ from, to time.Time }

// etcdDown reads h's down spans from its logs.
func etcdDown(h *hostsim.Host) []downSpan {
	var spans []downSpan
	open := map[int]int{} // worker → index of its open span
	for _, e := range h.Logs() {
		if !strings.HasPrefix(e.Message, "hashlb: fleet: etcd on cluster ") {
			continue
		}
		i, isOpen := open[e.Worker]
		switch {
		case strings.Contains(e.Message, " times in a row ") && !isOpen:
			open[e.Worker] = len(spans)
			spans = append(spans, downSpan{from: e.At})
		case strings.Contains(e.Message, " answers again;") && isOpen:
			spans[i].to = e.At
			delete(open, e.Worker)
		}
	}
	return spans
}

// firstUp is the first time from since at which no worker of hosts held
// etcd down (each that did had logged that it answers again); ok is false
// while there is none yet.
func firstUp(hosts []*hostsim.Host, since time.Time) (at time.Time, ok bool) {
	var spans []downSpan
	for _, h := range hosts {
		spans = append(spans, etcdDown(h)...)
	}
	candidates := []time.Time{since}
	for _, s := range spans {
		if s.to.After(since) {
			candidates = append(candidates, s.to)
		}
	}
	slices.SortFunc(candidates, time.Time.Compare)
	for _, c := range candidates {
		if !slices.ContainsFunc(spans, func(s downSpan) bool { return !c.Before(s.from) && (s.to.IsZero() || c.Before(s.to)) }) {
			return c, true
		}
	}
	return time.Time{}, false
}

// localByDesign is recs without the requests a proxy decided locally by
// design: while one of its workers held etcd down, or less than
// unansweredFor after (the keys decided then are reconciled from the
// ticks that follow), or with its last call about the key unanswered
// (unanswered); and how many those were.
func (l *calloutLog) localByDesign(recs []loadRec, hosts []*hostsim.Host) (kept []loadRec, local int) {
	down := make([][]downSpan, len(hosts))
	for i, h := range hosts {
		down[i] = etcdDown(h)
	}
	isDown := func(proxy int, at time.Time) bool {
		for _, s := range down[proxy] {
			if !at.Before(s.from) && (s.to.IsZero() || at.Before(s.to.Add(unansweredFor))) {
				return true
			}
		}
		return false
	}
	for _, r := range recs {
		if isDown(r.host, r.at) || l.unanswered(r.host, fleetEtcdKey(r.key), r.at) {
			local++
			continue
		}
		kept = append(kept, r)
	}
	return kept, local
}
