package lbpolicy

import (
	"fmt"
	"strings"
	"sync"

	"github.com/hashlb/hashlb/lbcore"
)

// hostSet is a cluster's host set made hashlb's: every host's address,
// level and what its metadata and weight make of it, the lbcore
// configuration over them, and the index of the addresses. It depends on the
// hosts alone, not on their health, and is never changed once made, so the
// workers of one process that see the same hosts share one: Envoy tells
// the main thread and every worker of a change, each on its own thread, and
// the first to see a host set makes it while the others compare what they
// read with it. ring_hash builds its ring once per process for the same
// reason (docs/deploy.md, "What an update costs").
type hostSet struct {
	pol    *Policy
	levels []level // first and count of each level; healthy is the worker's
	addrs  []string
	lvl    []int32
	byAddr map[string]int32 // the first host with an address
	dup    []int32          // the next host with host i's address, or -1
	read   []hostRead       // what was read of host i besides its address
	svcs   []lbcore.Service
	cfg    *lbcore.Config
	notes  UpdateNotes
	err    error
}

// hostRead is what a host's weight and metadata were when read.
type hostRead struct {
	weight       int
	hashID, name string
}

// sharedHosts is the last host set the workers of one namespace made, for
// the next worker to compare with.
type sharedHosts struct {
	mu   sync.Mutex
	last *hostSet
}

// get returns the host set h lists for policy p: the last one made when
// it lists the same hosts with the same weights and metadata, else a new
// one, made from h and kept for the next worker. A worker waits while
// another makes one: it would make the same.
func (s *sharedHosts) get(h Hosts, p *Policy) *hostSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hs := s.last; hs != nil && hs.pol == p && hs.same(h) {
		return hs
	}
	hs := newHostSet(h, p)
	s.last = hs
	return hs
}

// drop forgets the last host set: no worker uses the namespace.
func (s *sharedHosts) drop() {
	s.mu.Lock()
	s.last = nil
	s.mu.Unlock()
}

// same reports whether h lists hs's hosts, in order, with their weights
// and metadata: what newHostSet reads.
func (hs *hostSet) same(h Hosts) bool {
	if h.Levels() != len(hs.levels) {
		return false
	}
	for p, l := range hs.levels {
		if h.Count(p) != l.count {
			return false
		}
		for i := range l.count {
			k, r := l.first+i, &hs.read[l.first+i]
			if h.Address(p, i) != hs.addrs[k] || h.Weight(p, i) != r.weight ||
				h.Metadata(p, i, "hashId") != r.hashID || h.Metadata(p, i, "name") != r.name {
				return false
			}
		}
	}
	return true
}

// newHostSet reads h's hosts into a host set for p: each host a service
// (ServiceOf), the configuration over them, or the error that says why
// they cannot be services.
func newHostSet(h Hosts, p *Policy) *hostSet {
	levels := h.Levels()
	n := 0
	for l := range levels {
		n += h.Count(l)
	}
	hs := &hostSet{pol: p, byAddr: make(map[string]int32, n), levels: make([]level, 0, levels),
		addrs: make([]string, 0, n), lvl: make([]int32, 0, n), dup: make([]int32, 0, n), read: make([]hostRead, 0, n)}
	if n == 0 {
		return hs
	}
	svcs := make([]lbcore.Service, 0, n)
	for l := range levels {
		c := h.Count(l)
		hs.levels = append(hs.levels, level{first: len(svcs), count: c})
		for i := range c {
			r := hostRead{weight: h.Weight(l, i), hashID: strings.Clone(h.Metadata(l, i, "hashId")), name: strings.Clone(h.Metadata(l, i, "name"))}
			addr := strings.Clone(h.Address(l, i))
			hs.add(l, addr, r)
			s, clamped := ServiceOf(HostInfo{Address: addr, Weight: r.weight, HashID: r.hashID, Name: r.name})
			if clamped {
				if hs.notes.Clamped == 0 {
					hs.notes.Example = fmt.Sprintf("%s (weight %d)", addr, r.weight)
				}
				hs.notes.Clamped++
			}
			svcs = append(svcs, s)
		}
	}
	c, err := p.Config.WithServices(svcs)
	if err != nil {
		hs.err = fmt.Errorf("the cluster's hosts cannot be hashlb's services: %v", err)
		return hs
	}
	hs.svcs, hs.cfg = svcs, c
	return hs
}

// add appends host addr of level p.
func (hs *hostSet) add(p int, addr string, r hostRead) {
	i := int32(len(hs.addrs))
	hs.addrs = append(hs.addrs, addr)
	hs.lvl = append(hs.lvl, int32(p))
	hs.dup = append(hs.dup, -1)
	hs.read = append(hs.read, r)
	if j, ok := hs.byAddr[addr]; ok {
		for hs.dup[j] >= 0 {
			j = hs.dup[j]
		}
		hs.dup[j] = i
		return
	}
	hs.byAddr[addr] = i
}
