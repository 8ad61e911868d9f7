package lbpolicy

import (
	"fmt"
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
