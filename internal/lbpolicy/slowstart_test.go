package lbpolicy

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// slowStartWorker is a worker of a URLHASH policy with a 60 s slow start
// over f, which has decided once (a ramp needs a worker that decided).
func slowStartWorker(t *testing.T, f *fakeHosts) *Worker {
	t.Helper()
	p := mustPolicy(t, `{"lbMethod":"URLHASH","slowStart":{"window":"60s"}}`)
	w := p.NewWorker("slowstart")
	t.Cleanup(w.Close)
	if _, err := w.Update(f); err != nil {
		t.Fatal(err)
	}
	chosenAt(t, w, f, "/warm", now)
	return w
}

// chosenAt is chosen at time at.
func chosenAt(t *testing.T, w *Worker, f *fakeHosts, path string, at time.Time) int {
	t.Helper()
	p, hi, fail := w.Choose(f, pathCtx(f, path), at)
	if fail != NoFailure {
		t.Fatalf("%s: failure %d", path, fail)
	}
	return f.hlevels[p][hi]
}

// checkRamp decides 20000 keys at 25 %, 50 % and 100 % of the window from
// start: host 3's share follows the ramp (±3 points) and every other key
// stays on the host before[k] names.
func checkRamp(t *testing.T, w *Worker, f *fakeHosts, start time.Time, before map[int]int) {
	t.Helper()
	for _, at := range []float64{0.25, 0.5, 1} {
		when := start.Add(time.Duration(at * float64(time.Minute)))
		n := 0
		for k := range 20000 {
			got := chosenAt(t, w, f, fmt.Sprintf("/k/%d", k), when)
			switch {
			case got == 3:
				n++
			case got != before[k]:
				t.Fatalf("at %.0f%% of the window key %d moved from host %d to host %d", 100*at, k, before[k], got)
			}
		}
		want := at / (at + 3)
		if share := float64(n) / 20000; math.Abs(share-want) > 0.03 {
			t.Errorf("at %.0f%% of the window host 3 has %.2f%% of the keys, want %.2f%% ± 3 points", 100*at, 100*share, 100*want)
		}
	}
}

// A host an update adds ramps from the first choice after the update.
func TestSlowStartHostAdded(t *testing.T) {
	f := newFakeHosts(4)
	f.hs = f.hs[:3]
	f.sync()
	w := slowStartWorker(t, f)
	before := map[int]int{}
	for k := range 20000 {
		before[k] = chosenAt(t, w, f, fmt.Sprintf("/k/%d", k), now)
	}
	f.hs = append(f.hs, fakeHost{addr: "10.0.0.3:8080", weight: 1})
	f.sync()
	if _, err := w.Update(f); err != nil {
		t.Fatal(err)
	}
	start := now.Add(time.Second)
	w.bal.SetTime(start)
	checkRamp(t, w, f, start, before)
}

// A host whose health comes back ramps; the others keep their keys.
func TestSlowStartHostBack(t *testing.T) {
	f := newFakeHosts(4)
	w := slowStartWorker(t, f)
	f.hs[3].health = Unhealthy
	f.sync()
	before := map[int]int{}
	for k := range 20000 {
		before[k] = chosenAt(t, w, f, fmt.Sprintf("/k/%d", k), now)
	}
	f.hs[3].health = Healthy
	f.sync()
	start := now.Add(time.Second)
	chosenAt(t, w, f, "/warm", start) // the snapshot is read, the ramp starts
	checkRamp(t, w, f, start, before)
}

// While a host ramps a choice changes with time alone, so none may be
// remembered in the choice cache (which answers a path until the view
// changes); once the ramp is over they may again.
func TestSlowStartChoicesNotRemembered(t *testing.T) {
	f := newFakeHosts(4)
	f.hs = f.hs[:3]
	f.sync()
	w := slowStartWorker(t, f)
	chosenAt(t, w, f, "/k/1", now)
	if _, _, ok := w.Remembered(); !ok {
		t.Fatal("a hash choice with nothing ramping may not be remembered")
	}
	f.hs = append(f.hs, fakeHost{addr: "10.0.0.3:8080", weight: 1})
	f.sync()
	if _, err := w.Update(f); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Duration{time.Second, 30 * time.Second} {
		chosenAt(t, w, f, "/k/1", now.Add(at))
		if _, _, ok := w.Remembered(); ok {
			t.Fatalf("%v into the ramp a choice may be remembered: the cache would keep it past the ramp", at)
		}
	}
	chosenAt(t, w, f, "/k/1", now.Add(2*time.Minute))
	if _, _, ok := w.Remembered(); !ok {
		t.Fatal("after the ramp a hash choice may not be remembered")
	}
}
