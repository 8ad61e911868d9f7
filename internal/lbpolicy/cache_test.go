package lbpolicy

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// PathKey says which configurations a cache of choices by :path may serve:
// stateless decisions that read the :path only.
func TestPathKey(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		n            int
		prefix, ok   bool
	}{
		{"urlhash", `{"lbMethod":"URLHASH"}`, 80, true, true},
		{"urlhash short", `{"lbMethod":"URLHASH","hashLength":24}`, 24, true, true},
		{"urlhash longer than a key", `{"lbMethod":"URLHASH","hashLength":200}`, PathKeyMax, false, true},
		{"token over the url", `{"lbMethod":"TOKEN","token":"${request.url}"}`, PathKeyMax, false, true},
		{"token over the path", `{"lbMethod":"TOKEN","token":"${request.path|lower}"}`, PathKeyMax, false, true},
		{"token over a header", `{"lbMethod":"TOKEN","token":"${request.header.x-user}"}`, 0, false, false},
		{"domainhash", `{"lbMethod":"DOMAINHASH"}`, 0, false, false},
		{"persistence", `{"lbMethod":"URLHASH","persistence":{"keys":["${request.path}"]}}`, 0, false, false},
		{"bounded load", `{"lbMethod":"URLHASH","hashBalanceFactor":150}`, 0, false, false},
		{"round robin", `{"lbMethod":"ROUNDROBIN"}`, 0, false, false},
		{"least connection", `{"lbMethod":"LEASTCONNECTION"}`, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, prefix, ok := mustPolicy(t, tc.config).PathKey()
			if n != tc.n || prefix != tc.prefix || ok != tc.ok {
				t.Errorf("PathKey() = %d, %v, %v, want %d, %v, %v", n, prefix, ok, tc.n, tc.prefix, tc.ok)
			}
		})
	}
}

// Remembered: only a hash decision's first rank, taken as it is, may be
// remembered; a backup decision and a retry's walk may not; View changes
// with every update and health rescan.
func TestRemembered(t *testing.T) {
	f := newFakeHosts(5)
	_, w := urlWorker(t, "cache", f)
	gen, healthy := w.View()
	if gen == 0 || healthy != 5 {
		t.Fatalf("View() = %d, %d after the update, want a generation and 5 healthy", gen, healthy)
	}
	for k := range 20 {
		hdr := [][2]string{{":path", fmt.Sprintf("/m/%d", k)}}
		_, hi, fail := w.Choose(f, &fakeCtx{headers: hdr}, now)
		host, h, ok := w.Remembered()
		if fail != NoFailure || !ok || h != hi || f.healthy[hi] != host {
			t.Fatalf("key %d: Choose = %d, %v; Remembered() = %d, %d, %v, want host %d at %d, true", k, hi, fail, host, h, ok, f.healthy[hi], hi)
		}
		// A retry that rejects that host walks on: not remembered.
		if _, _, fail := w.Choose(f, &fakeCtx{headers: hdr, avoid: map[int]bool{host: true}}, now); fail != NoFailure {
			t.Fatal(fail)
		}
		if _, _, ok := w.Remembered(); ok {
			t.Fatalf("key %d: a retry's walk is remembered", k)
		}
	}
	// No :path: the backup method decides, not remembered.
	if _, _, fail := w.Choose(f, &fakeCtx{}, now); fail != NoFailure {
		t.Fatal(fail)
	}
	if _, _, ok := w.Remembered(); ok {
		t.Fatal("a backup decision is remembered")
	}
	// A host going down: a rescan, a new view.
	f.hs[2].health = Unhealthy
	f.sync()
	w.Choose(f, &fakeCtx{headers: [][2]string{{":path", "/x"}}}, now)
	if g, h := w.View(); g == gen || h != 4 {
		t.Errorf("View() = %d, %d after a host went down, want a new generation (not %d) and 4 healthy", g, h, gen)
	}
}

// cacheModel is the choice cache as cmd/hashlb-lbpolicy keeps it
// (internal/lbpolicy/abi's cache.h), without C: the choices remembered
// under one view, carried over each change of the view by CarryFrom.
type cacheModel struct {
	gen     uint32
	entries map[string][2]int // :path → host, healthy index
	kept    int               // entries carried over a change
	flushes int               // changes that kept nothing (CarryFrom nil)
}

// sync gives the cache the worker's view, as lb.syncCache does.
func (m *cacheModel) sync(w *Worker) {
	gen, _ := w.View()
	if gen == m.gen {
		return
	}
	c := w.CarryFrom(m.gen)
	m.gen = gen
	if c == nil {
		if len(m.entries) > 0 {
			m.flushes++
		}
		clear(m.entries)
		return
	}
	for path, e := range m.entries {
		host, healthy, ok := c.Keep(path, e[0])
		if !ok {
			delete(m.entries, path)
			continue
		}
		m.entries[path] = [2]int{host, healthy}
		m.kept++
	}
}

// A choice the cache keeps over a change of the hosts is the choice lbcore
// makes after it: over random adds, removals, health flips, hosts moving
// between priorities and weight changes, every remembered choice is
// compared with a fresh worker's, and most choices outlive a change that
// adds or removes one host.
func TestCacheCarriedChoicesAreLBCores(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		weights      bool
	}{
		{"urlhash", `{"lbMethod":"URLHASH","hashLength":12}`, false},
		{"token", `{"lbMethod":"TOKEN","token":"${request.path}"}`, false},
		{"weighted", `{"lbMethod":"URLHASH"}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPolicy(t, tc.config)
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			f := newFakeHosts(24)
			next := len(f.hs)
			if tc.weights {
				for i := range f.hs {
					f.hs[i].weight = 1 + rng.IntN(5)
				}
				f.sync()
			}
			w := p.NewWorker("carry-" + tc.name)
			defer w.Close()
			if _, err := w.Update(f); err != nil {
				t.Fatal(err)
			}
			m := &cacheModel{entries: map[string][2]int{}}
			paths := make([]string, 300)
			for k := range paths {
				paths[k] = fmt.Sprintf("/carry/%d/item", k)
			}
			carried, checked := 0, 0
			for step := range 400 {
				// The cache fills as requests come.
				for range 60 {
					path := paths[rng.IntN(len(paths))]
					if _, _, fail := w.Choose(f, &fakeCtx{headers: [][2]string{{":path", path}}}, now); fail != NoFailure {
						continue
					}
					m.sync(w)
					if host, healthy, ok := w.Remembered(); ok {
						m.entries[path] = [2]int{host, healthy}
					}
				}
				// A change of the hosts.
				op := rng.IntN(10)
				live := []int{}
				for i := range f.hs {
					if f.hs[i].health == Healthy && f.hs[i].prio == 0 {
						live = append(live, i)
					}
				}
				switch {
				case op < 3: // a host added
					f.hs = append(f.hs, fakeHost{addr: fmt.Sprintf("10.9.%d.%d:8080", next>>8&255, next&255), weight: 1})
					if tc.weights {
						f.hs[len(f.hs)-1].weight = 1 + rng.IntN(5)
					}
					next++
				case op < 6 && len(f.hs) > 4: // a host removed
					i := rng.IntN(len(f.hs))
					f.hs = append(f.hs[:i], f.hs[i+1:]...)
				case op < 8: // a host's health flips
					h := &f.hs[rng.IntN(len(f.hs))]
					if h.health == Healthy {
						h.health = Unhealthy
					} else {
						h.health = Healthy
					}
				case op < 9 && len(live) > 2: // a host to priority 1 and back
					h := &f.hs[rng.IntN(len(f.hs))]
					h.prio = 1 - h.prio
				default: // a host's weight
					f.hs[rng.IntN(len(f.hs))].weight = 1 + rng.IntN(3)
				}
				f.sync()
				// A membership change reaches the worker by its hook, a
				// health change as often by a choice's rescan.
				if op < 6 || op >= 8 || rng.IntN(2) == 0 {
					if _, err := w.Update(f); err != nil {
						t.Fatal(err)
					}
				} else {
					w.Choose(f, &fakeCtx{headers: [][2]string{{":path", "/rescan"}}}, now)
				}
				before := m.kept
				m.sync(w)
				carried += m.kept - before
				// Every remembered choice is a fresh worker's choice.
				fresh := p.NewWorker("carry-fresh-" + tc.name)
				if _, err := fresh.Update(f); err != nil {
					t.Fatal(err)
				}
				for path, e := range m.entries {
					checked++
					pr, hi, fail := fresh.Choose(f, &fakeCtx{headers: [][2]string{{":path", path}}}, now)
					host, _, ok := fresh.Remembered()
					if fail != NoFailure || pr != 0 || hi != e[1] || !ok || host != e[0] {
						t.Fatalf("step %d (op %d): %s is remembered at host %d (healthy %d); lbcore chooses priority %d, healthy %d, host %d (%v, %v)",
							step, op, path, e[0], e[1], pr, hi, host, ok, fail)
					}
				}
				fresh.Close()
			}
			// The carry keeps choices (a cache that forgot everything would
			// pass the comparison), and forgets all on some changes.
			if carried < checked/2 || m.flushes == 0 {
				t.Errorf("%d choices carried over changes, %d checked, %d flushes: want most carried and some flushes", carried, checked, m.flushes)
			}
			t.Logf("%d choices carried over changes, %d checked, %d flushes", carried, checked, m.flushes)
		})
	}
}
