package lbpolicy

import "fmt"

// Health is a fake host's health.
type Health uint8

// The health states.
const (
	Healthy Health = iota
	Degraded
	Unhealthy
)

// fakeHost is one host of a fake cluster.
type fakeHost struct {
	addr, hashID, name string
	weight             int
	health             Health
	active             int64
	prio               int
}

// fakeHosts is a host set as Envoy's callbacks present it: each level's
// hosts in order (the hosts of hs at that priority), and its healthy hosts,
// the snapshot sync took: a health change is seen only after sync, as
// Envoy's worker sees it only after the host set's update.
type fakeHosts struct {
	hs      []fakeHost
	levels  [][]int // per priority, indices of hs
	healthy []int   // priority 0's healthy hosts, as indices of hs
	hlevels [][]int // per priority, its healthy hosts as indices of hs
}

func newFakeHosts(n int) *fakeHosts {
	f := &fakeHosts{}
	for i := range n {
		f.hs = append(f.hs, fakeHost{addr: fmt.Sprintf("10.%d.%d.%d:8080", i>>16&255, i>>8&255, i&255), weight: 1})
	}
	f.sync()
	return f
}

// sync takes the snapshot: Envoy's update of the worker's host set.
func (f *fakeHosts) sync() {
	top := 0
	for _, h := range f.hs {
		top = max(top, h.prio)
	}
	f.levels = make([][]int, top+1)
	f.hlevels = make([][]int, top+1)
	for i, h := range f.hs {
		f.levels[h.prio] = append(f.levels[h.prio], i)
		if h.health == Healthy {
			f.hlevels[h.prio] = append(f.hlevels[h.prio], i)
		}
	}
	f.healthy = f.hlevels[0]
}

// host is the index in hs of host i of priority p.
func (f *fakeHosts) host(p, i int) *fakeHost { return &f.hs[f.levels[p][i]] }

func (f *fakeHosts) Levels() int             { return len(f.levels) }
func (f *fakeHosts) Count(p int) int         { return len(f.levels[p]) }
func (f *fakeHosts) Address(p, i int) string { return f.host(p, i).addr }
func (f *fakeHosts) Weight(p, i int) int     { return f.host(p, i).weight }
func (f *fakeHosts) HealthyCount(p int) int  { return len(f.hlevels[p]) }
func (f *fakeHosts) HealthyAddress(p, i int) string {
	return f.hs[f.hlevels[p][i]].addr
}
func (f *fakeHosts) ActiveRequests(p, i int) int64 { return f.host(p, i).active }
func (f *fakeHosts) Metadata(p, i int, key string) string {
	switch key {
	case "hashId":
		return f.host(p, i).hashID
	case "name":
		return f.host(p, i).name
	}
	return ""
}

// fakeCtx is a request: its headers, and the hosts a retry avoids (indices
// of hs).
type fakeCtx struct {
	f       *fakeHosts
	headers [][2]string
	avoid   map[int]bool
}

func (c *fakeCtx) Header(name string, i int) (string, int) {
	v, n := "", 0
	for _, kv := range c.headers {
		if kv[0] == name {
			if n == i {
				v = kv[1]
			}
			n++
		}
	}
	return v, n
}
func (c *fakeCtx) ShouldSelectAnotherHost(p, i int) bool {
	if c.f == nil {
		return c.avoid[i]
	}
	return c.avoid[c.f.levels[p][i]]
}
