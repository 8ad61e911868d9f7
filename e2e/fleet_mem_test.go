package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
)

// maxHeartbeatBytes bounds what one heartbeat allocates in the guest.
const maxHeartbeatBytes = 256

// TestGuestAllocationsFleet: with persistence.fleet (configs/fleet.json,
// embedded etcd) a local hit allocates nothing; what a worker allocates in
// a steady state of hits is its heartbeat's (FleetHeartbeatEvery: one
// etcd read every 3 s while nothing else asks etcd), the same whatever the
// request rate. The test build with tag hashlb_memstats measures two runs
// of 60 ticks, with 20 and 200 hits per tick.
func TestGuestAllocationsFleet(t *testing.T) {
	wasm := memstatsModule(t)
	etcdAddr, _ := startEtcd(t, t.TempDir())
	counted, count := countingProxy(t, etcdAddr)
	cfg, err := os.ReadFile(filepath.Join(repoRoot(t), "configs", "fleet.json"))
	if err != nil {
		t.Fatal(err)
	}
	h := costHostWith(t, wasm, hostsim.Config{PluginConfig: cfg, Clusters: map[string]string{"etcd": counted}}, nil)
	s := h.Stream(0) // the key's first request places it
	if res := s.RequestHeaders(costRequest.headers, costRequest.props); res.Action == hostsim.ActionPause {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res = s.Wait(ctx)
		cancel()
		if res.Action != hostsim.ActionContinue {
			t.Fatalf("the first request for the key: %+v, want it resumed once etcd answered", res)
		}
	}
	s.Finish()
	tick(h)
	run := func(perTick int) (bytes, mallocs, gcs uint64, beats int64) {
		before, b0 := lastMemStats(t, h, "tick-end"), count("/v3/lease/timetolive")
		for range 60 {
			for range perTick {
				costStream(t, h, costRequest.headers)
			}
			tick(h)
			time.Sleep(20 * time.Millisecond) // the heartbeat's answer comes back
		}
		after := lastMemStats(t, h, "tick-end")
		return after.totalAlloc - before.totalAlloc, after.mallocs - before.mallocs, after.numGC - before.numGC, count("/v3/lease/timetolive") - b0
	}
	run(20) // warm-up
	lowB, lowM, lowGC, lowBeats := run(20)
	highB, highM, highGC, highBeats := run(200)
	m := lastMemStats(t, h, "tick-end")
	perSecond := float64(highB) / 60
	t.Logf("60 ticks with 20 hits each: %d bytes in %d allocations, %d GC cycles, %d heartbeats; with 200 hits each: %d bytes in %d allocations, %d GC cycles, %d heartbeats (%.0f bytes per heartbeat); heap %d bytes, next GC at %d: one GC cycle every %.1f h at this rate",
		lowB, lowM, lowGC, lowBeats, highB, highM, highGC, highBeats, float64(highB)/float64(max(highBeats, 1)),
		m.heapAlloc, m.nextGC, float64(m.nextGC-min(m.heapAlloc, m.nextGC))/perSecond/3600)
	if lowBeats == 0 || highBeats == 0 {
		t.Fatalf("no heartbeat in 60 ticks (%d, %d): the worker never asked etcd", lowBeats, highBeats)
	}
	// The heartbeat goes without the SDK's callout bookkeeping, its body,
	// call record and output buffers reused: 144 bytes measured (1,648
	// through DispatchHttpCall).
	if perBeat := highB / uint64(highBeats); perBeat > maxHeartbeatBytes {
		t.Errorf("a heartbeat allocated %d bytes, want at most %d", perBeat, maxHeartbeatBytes)
	}
	// 180 more hits per tick cost nothing: the two runs differ by at most
	// what one heartbeat more or less allocates.
	perBeat := lowB / uint64(lowBeats)
	if highB > lowB+2*perBeat || highGC != 0 || lowGC != 0 {
		t.Errorf("10,800 more hits allocated %d bytes more (%d against %d; %d bytes per heartbeat) and %d GC cycles: want hits to allocate nothing",
			int64(highB)-int64(lowB), highB, lowB, perBeat, highGC+lowGC)
	}
}
