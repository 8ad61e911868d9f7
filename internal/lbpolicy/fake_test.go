package lbpolicy

import "fmt"

// fakeHost is one host of a fake cluster.
type fakeHost struct {
	addr, hashID, name string
	weight             int
	health             Health
	active             int64
}

// fakeHosts is a host set as Envoy's callbacks present it: the healthy
// hosts are the hosts in order, without those not healthy.
type fakeHosts struct {
	hs      []fakeHost
	healthy []int
	reads   int // Health calls, to see scans
}

func newFakeHosts(n int) *fakeHosts {
	f := &fakeHosts{}
	for i := range n {
		f.hs = append(f.hs, fakeHost{addr: fmt.Sprintf("10.%d.%d.%d:8080", i>>16&255, i>>8&255, i&255), weight: 1})
	}
	f.sync()
	return f
}

func (f *fakeHosts) sync() {
	f.healthy = f.healthy[:0]
	for i, h := range f.hs {
		if h.health == Healthy {
			f.healthy = append(f.healthy, i)
		}
	}
}

func (f *fakeHosts) Count() int           { return len(f.hs) }
func (f *fakeHosts) Address(i int) string { return f.hs[i].addr }
func (f *fakeHosts) Weight(i int) int     { return f.hs[i].weight }
func (f *fakeHosts) Health(i int) Health  { f.reads++; return f.hs[i].health }
func (f *fakeHosts) HealthyCount() int    { return len(f.healthy) }
func (f *fakeHosts) HealthyAddress(i int) string {
	return f.hs[f.healthy[i]].addr
}
func (f *fakeHosts) ActiveRequests(i int) int64 { return f.hs[i].active }
func (f *fakeHosts) Metadata(i int, key string) string {
	switch key {
	case "hashId":
		return f.hs[i].hashID
	case "name":
		return f.hs[i].name
	}
	return ""
}

// fakeCtx is a request: its headers, and the hosts a retry avoids.
type fakeCtx struct {
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
func (c *fakeCtx) ShouldSelectAnotherHost(i int) bool { return c.avoid[i] }
