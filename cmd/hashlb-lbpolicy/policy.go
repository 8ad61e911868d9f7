package main

import (
	"os"
	"time"

	"github.com/hashlb/hashlb/internal/lbpolicy"
	"github.com/hashlb/hashlb/internal/lbpolicy/abi"
)

// module is the policy as the binding serves it (abi.Module).
type module struct{}

func init() { abi.Serve(module{}) }

// The policy's counters, in Envoy's stats under the policy's namespace,
// beside the binding's own (panic, cached).
const (
	cNoHost = iota
	cInconsistent
	cUpdateError
	cWeightClamped
	numCounters
)

var counterNames = [numCounters]string{"no_host", "inconsistent", "update_error", "weight_clamped"}

// NewConfig parses a configuration (lbpolicy.ParseConfig, whose error
// refuses it), reads its fleet's etcd credentials from Envoy's environment
// and defines its counters.
func (module) NewConfig(name string, data []byte, stats abi.Stats) (abi.Config, error) {
	pol, err := lbpolicy.ParseConfig(data)
	if err != nil {
		return nil, err
	}
	// The fleet's etcd credentials, from Envoy's environment: a partial or
	// unreadable set refuses the configuration.
	if err := pol.LoadEtcdCredentials(os.Getenv); err != nil {
		return nil, err
	}
	c := &config{pol: pol}
	for i, n := range counterNames {
		c.ctrs[i] = stats.Counter(n)
	}
	abi.Logf(abi.LogInfo, "policy %q: %s", name, pol.Config.LBMethod)
	return c, nil
}

// config is one configuration: the policy and its counters.
type config struct {
	pol  *lbpolicy.Policy
	ctrs [numCounters]abi.Counter
}

func (c *config) count(ctr int) { c.ctrs[ctr].Add(1) }

// CacheKey is the policy's :path key (lbpolicy.Policy.PathKey); none in a
// test build whose choices are not lbcore's.
func (c *config) CacheKey() (n int, prefix, ok bool) {
	if testPanic != "" {
		return 0, false, false
	}
	return c.pol.PathKey()
}

// NewLB makes the worker of one Envoy thread and reads the host set.
func (c *config) NewLB(cluster string, hosts *abi.Hosts, cache *abi.Cache) abi.LB {
	l := &lb{cluster: cluster, cfg: c, w: c.pol.NewWorker(cluster), hosts: hosts, cache: cache}
	l.w.OnHealth = func() {
		abi.Logf(abi.LogInfo, "cluster %s: %s (seen by a choice)", cluster, l.w.Summary())
	}
	l.Update(0, 0)
	return l
}

// lb is one Envoy thread's load balancer.
type lb struct {
	cluster string
	cfg     *config
	w       *lbpolicy.Worker
	hosts   *abi.Hosts
	cache   *abi.Cache // nil when choices cannot be remembered
}

// Update rebuilds the worker's services from the host set; added and
// removed are what Envoy says changed (both 0 for a health change).
func (l *lb) Update(added, removed int) {
	start := time.Now()
	notes, err := l.w.Update(l.hosts)
	l.syncCache()
	took := time.Since(start)
	abi.Logf(abi.LogInfo, "cluster %s: %s; %d added, %d removed; %d ms", l.cluster, l.w.Summary(), added, removed, took.Milliseconds())
	if notes.Clamped > 0 {
		l.cfg.ctrs[cWeightClamped].Add(uint64(notes.Clamped))
		abi.Logf(abi.LogWarn, "cluster %s: %d hosts have an LB weight over hashlb's 100 and rank as 100, e.g. %s", l.cluster, notes.Clamped, notes.Example)
	}
	if err != nil {
		l.cfg.count(cUpdateError)
		abi.Logf(abi.LogError, "%v; every request gets no host until the cluster changes", err)
	}
}

// syncCache gives the cache the worker's view of the hosts, with the
// choices that still hold in it when the view changed
// (lbpolicy.Worker.CarryFrom).
func (l *lb) syncCache() {
	if l.cache == nil {
		return
	}
	gen, healthy := l.w.View()
	from := l.cache.Gen()
	if from == gen {
		l.cache.SetView(gen, healthy)
		return
	}
	var keep func(string, int) (int, int, bool)
	if c := l.w.CarryFrom(from); c != nil {
		keep = c.Keep
	}
	l.cache.Carry(gen, healthy, keep)
}

// Choose is lbcore's decision, remembered in the cache when it may be.
func (l *lb) Choose(ctx *abi.Context, now time.Time) (priority, index int, ok bool) {
	if testPanic != "" {
		return testChoose(l.hosts, ctx)
	}
	p, i, f := l.w.Choose(l.hosts, ctx, now)
	l.remember(ctx)
	switch f {
	case lbpolicy.NoFailure:
		return p, i, true
	case lbpolicy.Inconsistent:
		l.cfg.count(cInconsistent)
	default:
		l.cfg.count(cNoHost)
	}
	return 0, 0, false
}

// remember puts the last choice in the cache when it may be remembered
// (lbpolicy.Worker.Remembered), under the view it was made in.
func (l *lb) remember(ctx *abi.Context) {
	if l.cache == nil {
		return
	}
	l.syncCache()
	host, healthy, ok := l.w.Remembered()
	if !ok {
		return
	}
	path, _ := ctx.Header(":path", 0)
	l.cache.Put(path, host, healthy)
}

// Destroy gives the worker's persistence namespace back.
func (l *lb) Destroy() { l.w.Close() }
