package lbpolicy

// Hosts is the cluster's host set as one worker sees it, through the ABI's
// load-balancer callbacks: its priority levels, each with its hosts and the
// healthy ones among them. Everything it returns comes from the worker's
// snapshot of the cluster, which Envoy replaces as a whole on the worker
// thread (a membership or health change reaches it together with the
// membership hook); nothing reads a host's live health flags, which can be
// ahead of that snapshot by up to the cluster's update_merge_window.
// Strings may alias Envoy's memory: they are valid until the hook that got
// them returns.
type Hosts interface {
	// Levels is the number of priority levels (Envoy's priority set size).
	Levels() int
	// Count is the number of hosts at priority p; Address, Weight,
	// Metadata and ActiveRequests take an index below it.
	Count(p int) int
	Address(p, i int) string
	Weight(p, i int) int
	// Metadata is the string value of key in the host's endpoint metadata
	// under the filter name "hashlb", or "".
	Metadata(p, i int, key string) string
	// ActiveRequests is the host's rq_active stat (every worker's).
	ActiveRequests(p, i int) int64
	// HealthyCount is the number of healthy hosts at priority p;
	// HealthyAddress takes an index below it. Envoy's chooseHost answer is
	// a priority and such an index.
	HealthyCount(p int) int
	HealthyAddress(p, i int) string
}

// Context is the request Envoy is choosing a host for.
type Context interface {
	// Header returns the i-th value of the downstream request header name
	// (lower-case; pseudo-headers such as :path included) and how many
	// values it has (0: none; always 0 for a TCP connection).
	Header(name string, i int) (value string, n int)
	// ShouldSelectAnotherHost is Envoy's retry predicate for host i of
	// priority p (an index of Hosts.Count(p)): true for a host a retry
	// should avoid.
	ShouldSelectAnotherHost(p, i int) bool
}

// level is one priority level of the worker's view.
type level struct {
	first   int // the index of its first host among all hosts
	count   int // its hosts
	healthy int // its healthy hosts in the view
}

// view is the worker's picture of the host set: every level's hosts one
// after the other (host i of all is host i-first of its level), each host's
// place among its level's healthy hosts, and the level served. It is built
// from Envoy's snapshot alone: the healthy hosts Envoy lists are the hosts
// hashlb may choose, and the index Envoy asks for is their position in that
// list. The hosts themselves are a hostSet the workers share; what depends
// on health is the worker's.
type view struct {
	hs     *hostSet
	levels []level // hs's levels, with the worker's healthy counts
	hidx   []int32 // host i's index among its level's healthy hosts, or -1
	serve  int     // the level served: the lowest with a healthy host; -1 none
}

// reset makes the view hs's, with no host placed yet.
func (v *view) reset(hs *hostSet) {
	v.hs = hs
	v.levels = append(v.levels[:0], hs.levels...)
	v.hidx = v.hidx[:0]
	for range hs.addrs {
		v.hidx = append(v.hidx, -1)
	}
	v.serve = -1
}

// hosts is the number of hosts of every level.
func (v *view) hosts() int {
	if v.hs == nil {
		return 0
	}
	return len(v.hs.addrs)
}

// scan reads every level's healthy hosts from h and places each host among
// them. It returns false when h lists a healthy host the view does not have
// at that level: the host set changed without the view being rebuilt.
func (v *view) scan(h Hosts) bool {
	for i := range v.hidx {
		v.hidx[i] = -1
	}
	v.serve = -1
	for p := range v.levels {
		l := &v.levels[p]
		l.healthy = 0
		if p >= h.Levels() {
			return false
		}
		hc := h.HealthyCount(p)
		for k := range hc {
			i := v.find(p, h.HealthyAddress(p, k))
			if i < 0 {
				return false
			}
			v.hidx[i] = int32(k)
		}
		l.healthy = hc
		if hc > 0 && v.serve < 0 {
			v.serve = p
		}
	}
	return true
}

// find is the first host of level p with address addr not yet placed among
// the healthy hosts, or -1.
func (v *view) find(p int, addr string) int {
	hs := v.hs
	j, ok := hs.byAddr[addr]
	if !ok {
		return -1
	}
	for ; j >= 0; j = hs.dup[j] {
		if hs.lvl[j] == int32(p) && v.hidx[j] < 0 {
			return int(j)
		}
	}
	return -1
}

// serving reports whether host i may be chosen: healthy at the level served.
func (v *view) serving(i int) bool {
	return v.serve >= 0 && v.hs.lvl[i] == int32(v.serve) && v.hidx[i] >= 0
}

// local is host i's priority and index within its level.
func (v *view) local(i int) (p, k int) {
	p = int(v.hs.lvl[i])
	return p, i - v.levels[p].first
}

// stale reports, at the cost of a callback or a few, whether Envoy's
// snapshot differs from the view in a way a choice can see: the served
// level's healthy count changed, or a lower level (or, with nothing served,
// any level) has healthy hosts again.
func (v *view) stale(h Hosts) bool {
	if v.serve < 0 {
		for p := range v.levels {
			if h.HealthyCount(p) > 0 {
				return true
			}
		}
		return false
	}
	for p := 0; p < v.serve; p++ {
		if h.HealthyCount(p) > 0 {
			return true
		}
	}
	return h.HealthyCount(v.serve) != v.levels[v.serve].healthy
}

// healthyIndex is host i's index among its level's healthy hosts, checked
// against Envoy's list (one callback), unless every host of the level is
// healthy: then the lists are the same.
func (v *view) healthyIndex(h Hosts, i int) (int, bool) {
	k := int(v.hidx[i])
	if k < 0 {
		return 0, false
	}
	p := int(v.hs.lvl[i])
	l := &v.levels[p]
	if l.healthy == l.count {
		return k, true
	}
	return k, h.HealthyAddress(p, k) == v.hs.addrs[i]
}
