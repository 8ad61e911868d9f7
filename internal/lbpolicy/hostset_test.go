package lbpolicy

import (
	"fmt"
	"sync"
	"testing"
)

// The workers of a cluster that see the same hosts share one host set;
// a change of any host's address, weight or metadata, or another policy,
// makes a new one; each worker's health stays its own.
func TestWorkersShareTheHostSet(t *testing.T) {
	p := mustPolicy(t, `{"lbMethod":"URLHASH"}`)
	f := newFakeHosts(50)
	w1, w2 := p.NewWorker("share"), p.NewWorker("share")
	defer w1.Close()
	defer w2.Close()
	update := func(w *Worker, h Hosts) {
		t.Helper()
		if _, err := w.Update(h); err != nil {
			t.Fatal(err)
		}
	}
	update(w1, f)
	update(w2, f)
	if w1.v.hs != w2.v.hs {
		t.Fatal("two workers over the same hosts made two host sets")
	}
	first := w1.v.hs
	for _, change := range []struct {
		name string
		do   func(h *fakeHost)
	}{
		{"weight", func(h *fakeHost) { h.weight = 7 }},
		{"hashId", func(h *fakeHost) { h.hashID = "cache-a" }},
		{"name", func(h *fakeHost) { h.name = "svc-a" }},
		{"address", func(h *fakeHost) { h.addr = "10.9.9.9:8080" }},
	} {
		prev := w1.v.hs
		change.do(&f.hs[3])
		f.sync()
		update(w1, f)
		if w1.v.hs == prev {
			t.Fatalf("a host's %s changed and the worker kept the old host set", change.name)
		}
		update(w2, f)
		if w2.v.hs != w1.v.hs {
			t.Fatalf("after a change of %s the second worker made a host set of its own", change.name)
		}
		if got := w2.Services()[3]; change.name == "address" && got.Address != "10.9.9.9:8080" {
			t.Fatalf("the shared services have host 3 at %s", got.Address)
		}
	}
	if w1.v.hs == first {
		t.Fatal("the host set never changed")
	}
	// Health is each worker's: a worker whose snapshot has host 0 down
	// does not take it from the other.
	f.hs[0].health = Unhealthy
	f.sync()
	update(w1, f)
	if w1.v.hs != w2.v.hs {
		t.Fatal("a health change made a new host set")
	}
	if w1.v.serving(0) || !w2.v.serving(0) {
		t.Fatalf("host 0 serving: worker 1 %v (down in its snapshot), worker 2 %v (up in its own)", w1.v.serving(0), w2.v.serving(0))
	}
	// Another policy for a cluster of the same name makes its own.
	q := mustPolicy(t, `{"lbMethod":"DOMAINHASH"}`)
	w3 := q.NewWorker("share")
	defer w3.Close()
	update(w3, f)
	if w3.v.hs == w1.v.hs || w3.v.hs.cfg.LBMethod == w1.v.hs.cfg.LBMethod {
		t.Fatal("a worker of another policy used the first policy's host set")
	}
}

// Workers updating at once, as Envoy's do on their own threads, get one
// host set and choose as one (go test -race checks the sharing).
func TestWorkersUpdateAtOnce(t *testing.T) {
	p := mustPolicy(t, `{"lbMethod":"URLHASH"}`)
	f := newFakeHosts(2000)
	ws := make([]*Worker, 5)
	for i := range ws {
		ws[i] = p.NewWorker("at-once")
		defer ws[i].Close()
	}
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() {
			if _, err := w.Update(f); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for k := range 200 {
		hdr := [][2]string{{":path", fmt.Sprintf("/k/%d", k)}}
		var first int
		for i, w := range ws {
			if w.v.hs != ws[0].v.hs {
				t.Fatalf("worker %d made a host set of its own", i)
			}
			_, hi, fail := w.Choose(f, &fakeCtx{headers: hdr}, now)
			if fail != NoFailure {
				t.Fatal(fail)
			}
			if i == 0 {
				first = hi
			} else if hi != first {
				t.Fatalf("key %d: worker %d chose %d, worker 0 %d", k, i, hi, first)
			}
		}
	}
}
