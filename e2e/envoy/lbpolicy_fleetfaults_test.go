package envoy

// The policy's fleet while its etcd cluster, or one of its proxies, fails
// under a steady load: members killed in the test process's cluster
// (TestLBPolicyFleetFaults), members that hang, lose quorum by hanging,
// or are wiped and added back, in processes of their own, and a proxy's
// Envoy restarted (TestLBPolicyFleetHangs).

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/fleettest"
	"github.com/hashlb/hashlb/internal/lateness"
)

// policyFleetFaultBound is how long after etcd serves again a quiet
// machine's fleet has settled every key placed during a fault: a call
// stuck in its 1 s timeout when etcd returned, the next retry (1 s), the
// watch opened again (1 s) and the calls themselves.
const policyFleetFaultBound = 5 * time.Second

// fleetFault is one fault under load: hit starts it (l is the load, to
// take an Envoy out of service) and returns heal, which ends it and
// returns once etcd, or the Envoy, serves again; the fault lasts outage
// between the two. apart: some new clients must be placed apart while it
// lasts (the fault reaches the fleet).
type fleetFault struct {
	name   string
	hit    func(l *fleetLoad) (heal func() error, err error)
	outage time.Duration
	apart  bool
}

// runFleetFaults runs faults one after another under a steady load of 120
// requests a second through the Envoys at urls (a fault may change one),
// sent with ask, while clients never seen before arrive with each fault.
// For each, every request is answered with a 2xx (no request fails for
// etcd), and from base (widened by the lateness the test measured) after
// the fault is healed, no client is answered by two backends through two
// Envoys: the load's last split is before that, and every client through
// every Envoy then is 0 split (clients first met after the heal race as
// in a healthy fleet, and are left to the sweep). The Envoys' p99 steady
// and during the fault is logged.
func runFleetFaults(t *testing.T, ask fleetAsker, urls []string, base time.Duration, faults []fleetFault) {
	t.Helper()
	m := lateness.Start()
	defer m.Stop()
	keys := fleetKeys("steady", 100)
	for _, fault := range faults {
		fresh := fleetKeys(strings.ReplaceAll(fault.name, " ", "-"), 150)
		load := startFleetLoad(ask, urls, keys, 120)
		start := time.Now()
		time.Sleep(3 * time.Second)
		hit, healed, err := fault.apply(load, func() {
			load.setKeys(append(slices.Clone(keys), fresh...))
			time.Sleep(fault.outage)
		})
		if err != nil {
			load.stop()
			t.Fatal(err)
		}
		bound := lateness.Widen(base, m.Late(), 4)
		time.Sleep(bound + 2*time.Second)
		recs, errs := load.stop()
		for i, err := range errs {
			if i < 5 {
				t.Errorf("%s: a request of the load failed: %v", fault.name, err)
			}
		}
		keys = append(keys, fresh...)
		seen := placedBy(recs)
		var asked []string
		for _, k := range keys {
			if _, ok := seen[k]; ok {
				asked = append(asked, k)
			}
		}
		sweep, err := fleetSend(ask, urls, everyEnvoy(asked, len(urls), 9), 12, 9)
		if err != nil {
			t.Errorf("%s: a request of the sweep: %v", fault.name, err)
		}
		n, ex := fleetSplitKeys(sweep)
		// Splits of the clients met during the fault; a client first met
		// after it races as any new client of a healthy fleet does
		// (TestLBPolicyFleet's settle).
		last, lastEx := fleetLastSplit(metBefore(recs, healed), hit)
		during, _ := fleetSplitKeys(filterRecs(recs, hit, healed))
		t.Logf("%s: %d requests (%d failed); healed %v after the fault began; clients split during it %d; last split %v after the heal (%s); sweep of %d clients %v later: %d split; p99 %v steady, %v during the fault",
			fault.name, len(recs), len(errs), healed.Sub(hit).Round(time.Millisecond), during, sinceOr(last, healed), lastEx, len(asked),
			time.Since(healed).Round(time.Millisecond), n, p99(recs, start, hit).Round(time.Millisecond), p99(recs, hit, healed).Round(time.Millisecond))
		if n > 0 {
			t.Errorf("%s: %d of %d clients split through the Envoys %v after the heal; e.g. %s", fault.name, n, len(asked),
				time.Since(healed).Round(time.Millisecond), ex)
		}
		if !last.IsZero() && last.Sub(healed) > bound {
			t.Errorf("%s: a client was split %v after the heal, over %v %s; %s", fault.name, last.Sub(healed).Round(time.Millisecond), bound,
				lateness.Note(m.Late(), "the bound is widened by 4 × that"), lastEx)
		}
		if fault.apart && during == 0 {
			t.Errorf("%s: no client was placed apart while it lasted: the fault did not reach the fleet", fault.name)
		}
	}
}

// apply hits f under l, runs during while the fault lasts, then heals it:
// when it was hit, and when etcd (or the Envoy) served again.
func (f fleetFault) apply(l *fleetLoad, during func()) (hit, healed time.Time, err error) {
	hit = time.Now()
	heal, err := f.hit(l)
	if err != nil {
		return hit, hit, fmt.Errorf("%s: %v", f.name, err)
	}
	during()
	if err := heal(); err != nil {
		return hit, time.Now(), fmt.Errorf("%s: %v", f.name, err)
	}
	return hit, time.Now(), nil
}

// TestLBPolicyFleetFaults: the etcd cluster (in the test process) of three
// Envoys with the policy fails under a steady load (runFleetFaults): the
// leader killed and restarted; one member killed for 10 s; two members
// killed for 10 s (quorum lost) and restarted. Losing quorum is a fault
// the fleet sees: some new clients are placed apart while it lasts.
func TestLBPolicyFleetFaults(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		f := startPolicyFleet(t, bin)
		c := f.etcd
		down := func(pick func(leader int) []int) func(*fleetLoad) (func() error, error) {
			return memberFault(c, pick, c.Kill, c.Restart)
		}
		runFleetFaults(t, policyFleetAsk, f.urls, policyFleetFaultBound, []fleetFault{
			{"leader killed", down(func(l int) []int { return []int{l} }), 2 * time.Second, false},
			{"one member killed 10s", down(func(l int) []int { return []int{(l + 1) % 3} }), 10 * time.Second, false},
			{"quorum lost 10s", down(func(l int) []int { return []int{l, (l + 1) % 3} }), 10 * time.Second, true},
		})
	})
}

// TestLBPolicyFleetHangs: the faults that need etcd's members in processes
// of their own (fleettest.ProcCluster: Debian's etcd 3.4 with
// HASHLB_ETCD_BIN, else go.mod's etcd in child processes), and one of a
// proxy, under a steady load (runFleetFaults): the leader stopped
// (SIGSTOP) 10 s, hanging with its connections open, then resumed; two
// members stopped 10 s (quorum lost: some new clients are placed apart)
// then resumed; 30 % of the connections to one member reset for 10 s
// (fleettest.ResetProxy between the Envoys and the member); a member
// wiped and added back (killed, removed from the cluster, its data
// deleted, added again and started empty on the cluster's data); one
// proxy's Envoy stopped and started again, out of the
// load meanwhile, its table empty: its clients come back from etcd.
func TestLBPolicyFleetHangs(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		c, rp, eps := startHangCluster(t)
		f := startPolicyFleetOn(t, bin, eps)
		restart := func(l *fleetLoad) (func() error, error) {
			const i = 2
			l.setURL(i, "")
			f.es[i].Stop()
			return func() error {
				e := startPolicy(t, bin, []policyCluster{f.c})
				f.es[i], f.urls[i] = e, "http://"+e.addr
				l.setURL(i, f.urls[i])
				return nil
			}, nil
		}
		runFleetFaults(t, policyFleetAsk, f.urls, policyFleetFaultBound, append(hangFaults(t, c, rp, 10*time.Second),
			fleetFault{"member wiped and re-added", wipeFault(c), 2 * time.Second, false},
			fleetFault{"proxy's Envoy restarted", restart, time.Second, false},
		))
	})
}

// startHangCluster starts a three-member etcd whose members are processes
// of their own (fleettest.ProcCluster), so that they can be stopped, and a
// fleettest.ResetProxy in front of member 1: eps are the endpoints the
// proxies are given, member 1's through rp.
func startHangCluster(t testing.TB) (c *fleettest.ProcCluster, rp *fleettest.ResetProxy, eps []string) {
	t.Helper()
	c = fleettest.StartProcCluster(t, 3)
	t.Logf("etcd: %s", fleettest.EtcdImpl())
	eps = c.Endpoints()
	rp = fleettest.StartResetProxy(t, eps[0])
	eps[0] = rp.Addr
	return c, rp, eps
}

// hangFaults are the faults of etcd's members that hang rather than die,
// each lasting outage, over startHangCluster's c and rp: the leader
// stopped (SIGSTOP) and resumed; two members stopped (quorum lost: some
// new clients are placed apart) and resumed; 30 % of the connections to
// member 1 reset.
func hangFaults(t testing.TB, c *fleettest.ProcCluster, rp *fleettest.ResetProxy, outage time.Duration) []fleetFault {
	return []fleetFault{
		{fmt.Sprintf("leader stopped %v", outage), stopMembers(c, func(l int) []int { return []int{l} }), outage, false},
		{fmt.Sprintf("quorum lost by stops %v", outage), stopMembers(c, func(l int) []int { return []int{l, (l + 1) % 3} }), outage, true},
		{fmt.Sprintf("30%% of connections to a member reset %v", outage), resetFault(t, c, rp), outage, false},
	}
}

// faultCluster is what a member's fault needs of an etcd cluster
// (fleettest's Cluster and ProcCluster).
type faultCluster interface {
	Leader() int
	Wait(limit time.Duration) error
}

// memberFault is the fault that hits (kills, stops) the members of c that
// pick names, given the leader's index, and its heal, which heals each
// (restarts, resumes) and waits until the cluster serves.
func memberFault(c faultCluster, pick func(leader int) []int, hit func(i int), heal func(i int) error) func(*fleetLoad) (func() error, error) {
	return func(*fleetLoad) (func() error, error) {
		l := c.Leader()
		if l < 0 {
			return nil, fmt.Errorf("no etcd member leads")
		}
		ms := pick(l)
		for _, i := range ms {
			hit(i)
		}
		return func() error {
			for _, i := range ms {
				if err := heal(i); err != nil {
					return err
				}
			}
			return c.Wait(fleettest.ClusterStart)
		}, nil
	}
}

// stopMembers is memberFault stopping (SIGSTOP) members of c and resuming
// them.
func stopMembers(c *fleettest.ProcCluster, pick func(leader int) []int) func(*fleetLoad) (func() error, error) {
	return memberFault(c, pick, c.Stop, func(i int) error { c.Cont(i); return nil })
}

// wipeFault is the fault that wipes a follower of c (or any member when
// none leads): killed, removed from the cluster, its data deleted; its
// heal adds it back, starts it empty on the cluster's data and waits until
// the cluster serves.
func wipeFault(c *fleettest.ProcCluster) func(*fleetLoad) (func() error, error) {
	return func(*fleetLoad) (func() error, error) {
		o := (c.Leader() + 1) % 3
		if err := c.Wipe(o); err != nil {
			return nil, err
		}
		return func() error {
			if err := c.Rejoin(o); err != nil {
				return err
			}
			return c.Wait(fleettest.ClusterStart)
		}, nil
	}
}

// resetFault is the fault that resets 30 % of the connections through rp
// (the proxies' way to one member of c); its heal stops the resets, fails
// when none happened (the fault did not reach the fleet) and waits until
// the cluster serves.
func resetFault(t testing.TB, c *fleettest.ProcCluster, rp *fleettest.ResetProxy) func(*fleetLoad) (func() error, error) {
	return func(*fleetLoad) (func() error, error) {
		before := rp.Resets()
		rp.SetRate(0.3)
		return func() error {
			rp.SetRate(0)
			n := rp.Resets() - before
			t.Logf("connections to etcd through %s reset: %d", rp.Addr, n)
			if n == 0 {
				return fmt.Errorf("no connection to etcd through %s was reset: the fault did not reach the fleet", rp.Addr)
			}
			return c.Wait(fleettest.ClusterStart)
		}, nil
	}
}

// p99 is the 99th percentile of the took of recs answered in [from, to).
func p99(recs []fleetRec, from, to time.Time) time.Duration {
	var ds []time.Duration
	for _, r := range recs {
		if !r.at.Before(from) && r.at.Before(to) {
			ds = append(ds, r.took)
		}
	}
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)*99/100]
}

// metBefore are the records of recs whose client was first answered
// before at.
func metBefore(recs []fleetRec, at time.Time) []fleetRec {
	first := map[string]time.Time{}
	for _, r := range recs {
		if f, ok := first[r.key]; !ok || r.at.Before(f) {
			first[r.key] = r.at
		}
	}
	var out []fleetRec
	for _, r := range recs {
		if first[r.key].Before(at) {
			out = append(out, r)
		}
	}
	return out
}

// filterRecs are the records of recs answered in [from, to).
func filterRecs(recs []fleetRec, from, to time.Time) []fleetRec {
	var out []fleetRec
	for _, r := range recs {
		if !r.at.Before(from) && r.at.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// sinceOr is how long after from at is, "none" for a zero at.
func sinceOr(at, from time.Time) string {
	if at.IsZero() {
		return "none"
	}
	return at.Sub(from).Round(time.Millisecond).String()
}
