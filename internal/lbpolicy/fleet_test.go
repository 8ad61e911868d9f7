package lbpolicy

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hashlb/hashlb/internal/fleettest"
	"github.com/hashlb/hashlb/internal/lateness"
	"github.com/hashlb/hashlb/lbcore/fleet"
)

// fleetJS is a ROUNDROBIN policy persisting x-user through the fleet at
// addr: round robin makes two proxies disagree on every new key unless the
// fleet settles it.
func fleetJS(addr, timeout string) string { return fleetJSOf([]string{addr}, timeout) }

// fleetJSOf is fleetJS over the etcd members eps.
func fleetJSOf(eps []string, timeout string) string {
	list, _ := json.Marshal(eps)
	return fmt.Sprintf(`{"lbMethod":"ROUNDROBIN","persistence":{"keys":["${request.header.x-user}"],"expire":"1h",`+
		`"fleet":{"endpoints":%s,"prefix":"/hashlb/test/","timeout":%q,"createsPerSecond":100000}}}`, list, timeout)
}

// fleetProxy is one Envoy process of a test: its own store, one worker
// per entry of ws, over hosts f.
type fleetProxy struct {
	p  *Policy
	f  *fakeHosts
	ws []*Worker
}

func newFleetProxy(t *testing.T, js string, f *fakeHosts, workers int) *fleetProxy {
	t.Helper()
	p := mustPolicy(t, js)
	p.store = newSharedStore()
	x := &fleetProxy{p: p, f: f}
	for range workers {
		w := p.NewWorker("fleet")
		if _, err := w.Update(f); err != nil {
			t.Fatal(err)
		}
		x.ws = append(x.ws, w)
	}
	return x
}

func (x *fleetProxy) close() {
	for _, w := range x.ws {
		w.Close()
	}
	x.ws = nil
}

// choose is worker i's choice for user u: the host's address.
func (x *fleetProxy) choose(t *testing.T, i int, u string) string {
	t.Helper()
	_, hi, fail := x.ws[i].Choose(x.f, &fakeCtx{headers: [][2]string{{"x-user", u}}}, time.Now())
	if fail != NoFailure {
		t.Fatal(fail)
	}
	return x.f.HealthyAddress(0, hi)
}

// settled waits until every proposal of x was answered (placed, followed
// or failed), at most limit.
func (x *fleetProxy) settled(t *testing.T, limit time.Duration) FleetStats {
	t.Helper()
	end := time.Now().Add(limit)
	for {
		s := x.ws[0].FleetStats()
		if s.Placed+s.Followed+s.Failed+s.OverBudget >= s.Proposed || time.Now().After(end) {
			return s
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reversed is f's hosts in the opposite order: another proxy's view of
// the same cluster, whose round robin goes the other way.
func reversed(f *fakeHosts) *fakeHosts {
	r := &fakeHosts{hs: slices.Clone(f.hs)}
	slices.Reverse(r.hs)
	r.sync()
	return r
}

// twoProxies starts an embedded etcd and two proxies over it (closed at
// t's cleanup), a over f and b over f reversed, each with workers workers,
// and lets their watches open.
func twoProxies(t *testing.T, f *fakeHosts, workers int) (addr, js string, a, b *fleetProxy) {
	addr, _ = fleettest.StartEmbedded(t, t.TempDir(), "")
	js = fleetJS(addr, "2s")
	a = newFleetProxy(t, js, f, workers)
	t.Cleanup(a.close)
	b = newFleetProxy(t, js, reversed(f), workers)
	t.Cleanup(b.close)
	time.Sleep(200 * time.Millisecond)
	return addr, js, a, b
}

// A key one proxy placed is served by another proxy at the same host,
// though its own round robin would choose otherwise: through the watch for
// a proxy running when the key was placed, and through the records it
// reads, page after page, as its watch starts for one that starts later (a
// proxy restarted), from its first request.
func TestFleetSharesPlacements(t *testing.T) {
	page := fleetLoadPage
	fleetLoadPage = 7 // c reads etcd's records in pages
	t.Cleanup(func() { fleetLoadPage = page })
	f := newFakeHosts(5)
	_, js, a, b := twoProxies(t, f, 2)
	const keys = 60
	placed := map[string]string{}
	for k := range keys {
		u := fmt.Sprint("u", k)
		placed[u] = a.choose(t, k%2, u)
	}
	if s := a.settled(t, 20*time.Second); s.Placed != keys {
		t.Fatalf("proxy a: %+v, want %d keys placed", s, keys)
	}
	// b learns them from its watch.
	end := time.Now().Add(20 * time.Second)
	for b.ws[0].FleetStats().Watched < keys && time.Now().Before(end) {
		time.Sleep(10 * time.Millisecond)
	}
	disagree := 0
	for u, host := range placed {
		if got := b.choose(t, 1, u); got != host {
			disagree++
			t.Errorf("%s: proxy b serves %s, proxy a placed it on %s", u, got, host)
		}
	}
	if s := b.ws[0].FleetStats(); s.Proposed != 0 {
		t.Errorf("proxy b proposed %d keys it had learned: %+v", s.Proposed, s)
	}
	// c starts after the placements: no watch event tells it, it reads
	// etcd's records as its watch starts, and its first choice of every
	// key is a's, with nothing proposed.
	c := newFleetProxy(t, js, reversed(f), 1)
	defer c.close()
	end = time.Now().Add(20 * time.Second)
	for c.ws[0].FleetStats().Loaded < keys && time.Now().Before(end) {
		time.Sleep(10 * time.Millisecond)
	}
	for u, host := range placed {
		if got := c.choose(t, 0, u); got != host {
			t.Errorf("%s: proxy c, started after the placements, serves %s; proxy a placed it on %s", u, got, host)
		}
	}
	if s := c.ws[0].FleetStats(); s.Loaded != keys || s.Proposed != 0 {
		t.Errorf("proxy c: %+v, want %d keys loaded and none proposed", s, keys)
	}
	// A key c meets before any proxy placed it is c's own choice, proposed.
	c.choose(t, 0, "late")
	if s := c.settled(t, 20*time.Second); s.Placed != 1 {
		t.Errorf("proxy c: %+v, want its new key placed", s)
	}
}

// Two proxies placing the same new keys at once, each its own way: etcd's
// first writer wins, and both end up serving its choice, which is etcd's
// record.
func TestFleetFirstWriterWins(t *testing.T) {
	addr, _, a, b := twoProxies(t, newFakeHosts(4), 1)
	const keys = 300
	var wg sync.WaitGroup
	for _, x := range []*fleetProxy{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				x.choose(t, 0, fmt.Sprint("race", k))
			}
		}()
	}
	wg.Wait()
	sa, sb := a.settled(t, 30*time.Second), b.settled(t, 30*time.Second)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// The watch may still be delivering: poll until both agree with etcd.
	end := time.Now().Add(20 * time.Second)
	var split []string
	for {
		split = split[:0]
		for k := range keys {
			u := fmt.Sprint("race", k)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := cli.Get(ctx, fleet.Key("/hashlb/test/", []byte(u)))
			cancel()
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("%s: etcd holds no record (%v)", u, err)
			}
			r, _ := fleet.ParseRecord(string(resp.Kvs[0].Value))
			ha, hb := a.choose(t, 0, u), b.choose(t, 0, u)
			if ha != r.Service || hb != r.Service {
				split = append(split, fmt.Sprintf("%s: etcd %s, a %s, b %s", u, r.Service, ha, hb))
			}
		}
		if len(split) == 0 || time.Now().After(end) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(split) > 0 {
		t.Errorf("%d of %d keys split (a %+v, b %+v); first: %s", len(split), keys, sa, sb, split[0])
	}
	if sa.Followed+sb.Followed == 0 && sa.Watched+sb.Watched == 0 {
		t.Errorf("no proxy followed the other: a %+v, b %+v", sa, sb)
	}
}

// chooseWorst is the slowest of n choices of new keys by x's worker.
func chooseWorst(t *testing.T, x *fleetProxy, tag string, n int) time.Duration {
	var worst time.Duration
	for k := range n {
		t0 := time.Now()
		x.choose(t, 0, fmt.Sprint(tag, k))
		worst = max(worst, time.Since(t0))
	}
	return worst
}

// With etcd stopped, a choice never waits: the slowest choice of new keys
// is that of the same policy without a fleet, give or take the lateness the
// machine showed meanwhile, far under the fleet's call timeout; proposals
// over the queue's bound are dropped and counted.
func TestFleetEtcdDownNeverBlocks(t *testing.T) {
	addr, stop := fleettest.StartEmbedded(t, t.TempDir(), "")
	const timeout = 5 * time.Second
	f := newFakeHosts(8)
	x := newFleetProxy(t, fleetJS(addr, "5s"), f, 1)
	defer x.close()
	local := newFleetProxy(t, `{"lbMethod":"ROUNDROBIN","persistence":{"keys":["${request.header.x-user}"],"expire":"1h"}}`, f, 1)
	defer local.close()
	x.choose(t, 0, "warm")
	x.settled(t, 10*time.Second)
	stop()
	const n = 3 * fleetQueue
	meter := lateness.Start()
	base := chooseWorst(t, local, "local", n)
	down := chooseWorst(t, x, "down", n)
	meter.Stop()
	late := meter.Late()
	bound := 4*base + 2*late
	t.Logf("slowest choice: %v with etcd down, %v without a fleet; timers up to %v late", down, base, late)
	if down > bound || down >= timeout/2 {
		t.Errorf("slowest choice with etcd down %v, over %v (4 × %v without a fleet + 2 × %v of lateness measured): a choice waited on etcd",
			down, bound, base, late)
	}
	if s := x.ws[0].FleetStats(); s.Dropped == 0 || s.Proposed > uint64(n) || s.Proposed+s.Dropped != uint64(n)+1 {
		t.Errorf("%d proposals with etcd down: %+v, want some dropped, every one counted once", n, s)
	}
}

// The last worker's Close stops the fleet member: no goroutine of it is
// left, with etcd up, or with nothing listening at its endpoint.
func TestFleetStopLeavesNoGoroutine(t *testing.T) {
	addr, _ := fleettest.StartEmbedded(t, t.TempDir(), "")
	f := newFakeHosts(4)
	for _, down := range []bool{false, true} {
		at := addr
		if down {
			at = fleettest.FreeAddr(t)
		}
		before := runtime.NumGoroutine()
		x := newFleetProxy(t, fleetJS(at, "1s"), f, 4)
		for k := range 100 {
			x.choose(t, k%4, fmt.Sprint("g", k))
		}
		if !down {
			x.settled(t, 10*time.Second)
		}
		during := runtime.NumGoroutine()
		x.close()
		end := time.Now().Add(10 * time.Second)
		after := runtime.NumGoroutine()
		for after > before && time.Now().Before(end) {
			time.Sleep(20 * time.Millisecond)
			after = runtime.NumGoroutine()
		}
		if during <= before {
			t.Errorf("etcd down %v: %d goroutines while running, %d before: the member ran none", down, during, before)
		}
		if after > before {
			buf := make([]byte, 1<<20)
			t.Errorf("etcd down %v: %d goroutines after the last Close, %d before:\n%s", down, after, before, buf[:runtime.Stack(buf, true)])
		}
	}
}

// A choice of a policy with a fleet allocates nothing in steady state
// (keys the local table holds, including the refresh of a stamp in a new
// slot, which only queues a proposal).
func TestFleetChooseAllocatesNothing(t *testing.T) {
	f := newFakeHosts(10)
	x := newFleetProxy(t, fleetJS(fleettest.FreeAddr(t), "1s"), f, 1)
	defer x.close()
	ctxs := make([]*fakeCtx, 64)
	for i := range ctxs {
		ctxs[i] = &fakeCtx{headers: [][2]string{{"x-user", fmt.Sprint("a", i)}}}
	}
	now := time.Now()
	w := x.ws[0]
	for _, c := range ctxs {
		w.Choose(f, c, now)
	}
	k := 0
	if n := testing.AllocsPerRun(1000, func() {
		w.Choose(f, ctxs[k%len(ctxs)], now)
		k++
	}); n != 0 {
		t.Errorf("%v allocations per choice", n)
	}
	later := now.Add(time.Duration(w.slot) * time.Second) // every key's first use in a new slot
	k = 0
	if n := testing.AllocsPerRun(len(ctxs)-1, func() {
		w.Choose(f, ctxs[k%len(ctxs)], later)
		k++
	}); n != 0 {
		t.Errorf("%v allocations per choice that refreshes a stamp", n)
	}
	if s := w.FleetStats(); s.Proposed+s.Dropped < uint64(2*len(ctxs)) {
		t.Errorf("%+v: want every new key and every refresh proposed", s)
	}
}

// Over a three-member etcd that loses quorum (two members killed), two
// proxies whose round robins go opposite ways each place the same new keys
// their own way, and serve them at once; once the two members are back,
// the proposals etcd could not answer are sent again, the first writer
// wins, and within a bound both proxies serve every key where etcd's
// record says.
func TestFleetQuorumLostThenAgrees(t *testing.T) {
	c := fleettest.StartCluster(t, 3)
	f := newFakeHosts(4)
	js := fleetJSOf(c.Endpoints(), "1s")
	a := newFleetProxy(t, js, f, 1)
	defer a.close()
	b := newFleetProxy(t, js, reversed(f), 1)
	defer b.close()
	time.Sleep(200 * time.Millisecond) // the watches open
	lead := c.Leader()
	other := (lead + 1) % 3
	c.Kill(lead)
	c.Kill(other)
	const keys = 100
	apart := 0
	for k := range keys {
		u := fmt.Sprint("q", k)
		if a.choose(t, 0, u) != b.choose(t, 0, u) {
			apart++
		}
	}
	if apart == 0 {
		t.Fatal("without etcd the two proxies placed every key alike: the test cannot tell agreement from etcd")
	}
	time.Sleep(3 * time.Second)
	for _, i := range []int{lead, other} {
		if err := c.Restart(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Wait(fleettest.ClusterStart); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	m := lateness.Start()
	defer m.Stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// A send stuck in its call when quorum returned fails at its timeout,
	// is kept, and goes again at the next retry: timeout + retry + a call.
	bound := 3*time.Second + 2*fleetRetry
	var split []string
	for {
		split = split[:0]
		for k := range keys {
			u := fmt.Sprint("q", k)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := cli.Get(ctx, fleet.Key("/hashlb/test/", []byte(u)))
			cancel()
			want := "no record"
			if err == nil && len(resp.Kvs) == 1 {
				r, _ := fleet.ParseRecord(string(resp.Kvs[0].Value))
				want = r.Service
			}
			if ha, hb := a.choose(t, 0, u), b.choose(t, 0, u); ha != want || hb != want {
				split = append(split, fmt.Sprintf("%s: etcd %s, a %s, b %s", u, want, ha, hb))
			}
		}
		if len(split) == 0 || time.Since(back) > lateness.Widen(bound, m.Late(), 4)+10*time.Second {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	took, late := time.Since(back), m.Late()
	t.Logf("%d of %d keys placed apart while quorum was lost; all agree with etcd %v after it returned (a %+v, b %+v)",
		apart, keys, took.Round(time.Millisecond), a.ws[0].FleetStats(), b.ws[0].FleetStats())
	if len(split) > 0 {
		t.Fatalf("%d of %d keys still split %v after quorum returned; first: %s", len(split), keys, took.Round(time.Millisecond), split[0])
	}
	if limit := lateness.Widen(bound, late, 4); took > limit {
		t.Errorf("the proxies agreed %v after quorum returned, over %v %s", took.Round(time.Millisecond), limit,
			lateness.Note(late, "the bound is widened by 4 × that"))
	}
}
