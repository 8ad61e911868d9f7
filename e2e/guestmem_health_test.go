package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/hostsim"
)

// flapService is the service of configs/health.json that the flap test
// fails and recovers.
var flapService = [2]string{"b2", "127.0.0.1:18082"}

// flapConfig is configs/health.json (without debugHeader) with a probe
// round every tick, one probe deciding either way, and passive ejections of
// 3 s after two failed responses: every transition within a few ticks.
func flapConfig(t testing.TB) []byte {
	return exampleConfig(t, "health", map[string]any{
		"healthCheck": map[string]any{"path": "/healthz", "interval": "1s", "timeout": "500ms",
			"healthyThreshold": 1, "unhealthyThreshold": 1, "expectedStatuses": "200-399", "cluster": "hashlb_upstream"},
		"passiveHealth": map[string]any{"consecutiveFailures": 2, "ejectionTime": "3s", "failureStatuses": "502-504"},
	})
}

// flapper drives flapService through every health transition in hostsim.
type flapper struct {
	t      testing.TB
	h      *hostsim.Host
	probes *probeAnswers
	path   string // a path whose primary is flapService while it is selectable
}

// stream runs one request of path and answers it status when flapService
// served it (200 otherwise); it returns the service that served it.
func (f *flapper) stream(path, status string) string {
	f.t.Helper()
	headers := append([][2]string(nil), costRequest.headers...)
	headers[1] = [2]string{":path", path}
	s := f.h.Stream(0)
	res := s.RequestHeaders(headers, costRequest.props)
	if res.Err != nil || res.LocalReply != nil {
		f.t.Fatalf("RequestHeaders(%s) = err %v, local reply %+v, want routed", path, res.Err, res.LocalReply)
	}
	name, _ := res.Header("x-hashlb-service")
	if name != flapService[0] {
		status = "200"
	}
	if res := s.ResponseHeaders([][2]string{{":status", status}}); res.Err != nil {
		f.t.Fatalf("ResponseHeaders: %v", res.Err)
	}
	if err := s.Finish(); err != nil {
		f.t.Fatalf("Finish: %v", err)
	}
	return name
}

// failProbes makes hostsim answer flapService's probes 503 (or 200).
func (f *flapper) failProbes(fail bool) {
	f.probes.set(fail, flapService[1])
}

// eject answers two requests served by flapService 502: passive health
// ejects it.
func (f *flapper) eject() {
	f.t.Helper()
	for range 2 {
		if got := f.stream(f.path, "502"); got != flapService[0] {
			f.t.Fatalf("%s went to %s, want %s (selectable, not yet ejected)", f.path, got, flapService[0])
		}
	}
}

// ticks runs n ticks with a few ordinary requests before each.
func (f *flapper) ticks(n int) {
	for range n {
		for k := range 4 {
			f.stream(fmt.Sprintf("/catalog/%d", k), "200")
		}
		tick(f.h)
	}
}

// cycle makes flapService go through every transition, 12 in all: DOWN
// and UP by active checks; ejected, and UP when the ejection ends; ejected,
// DOWN, "passed its health checks; not selectable yet" and UP when the
// ejection ends; ejected, DOWN, "ejection ended; not selectable yet" and UP
// by active checks.
func (f *flapper) cycle() {
	f.failProbes(true)
	f.ticks(1) // DOWN
	f.failProbes(false)
	f.ticks(1) // UP: passed its health checks

	f.eject()  // ejected for 3s
	f.ticks(3) // UP: ejection ended

	f.eject()
	f.failProbes(true)
	f.ticks(1) // DOWN
	f.failProbes(false)
	f.ticks(1) // passed its health checks; not selectable yet
	f.ticks(1) // UP: ejection ended

	f.eject()
	f.failProbes(true)
	f.ticks(2) // DOWN
	f.ticks(1) // ejection ended; not selectable yet
	f.failProbes(false)
	f.ticks(1) // UP: passed its health checks
	f.ticks(1)
}

// flapPrefix starts every log line about flapService.
var flapPrefix = "hashlb: service " + flapService[0] + " (" + flapService[1] + ") "

// flapLines are flapService's transition log lines of one cycle, in order,
// after flapPrefix.
var flapLines = []string{
	"is DOWN: 1 failed health checks",
	"is UP: passed its health checks",
	"ejected for 3s after 2 failed responses",
	"is UP: ejection ended",
	"ejected for 3s after 2 failed responses",
	"is DOWN: 1 failed health checks",
	"passed its health checks; not selectable yet: still ejected for 1s",
	"is UP: ejection ended",
	"ejected for 3s after 2 failed responses",
	"is DOWN: 1 failed health checks",
	"ejection ended; not selectable yet: it is DOWN by active health checks",
	"is UP: passed its health checks",
}

// transitionLines returns the info log lines about flapService.
func transitionLines(h *hostsim.Host) []string {
	var out []string
	for _, l := range h.LogsAt(hostsim.LogInfo) {
		if strings.HasPrefix(l, flapPrefix) {
			out = append(out, l)
		}
	}
	return out
}

// TestGuestAllocationsHealthFlaps: a backend that fails and recovers over
// and over decides how often the module logs, counts and writes a health
// transition, so after a warm-up that made every kind of transition once,
// flapCycles more cycles (12 transitions each, active and passive, every
// log line) allocate nothing in the guest and run no GC cycle.
func TestGuestAllocationsHealthFlaps(t *testing.T) {
	const flapCycles = 5
	probes := newProbeAnswersBody([]byte("ok"))
	h := costHostWith(t, memstatsModule(t), hostsim.Config{PluginConfig: flapConfig(t), HTTPCall: probes.handle}, nil)
	f := &flapper{t: t, h: h, probes: probes}
	for k := 0; k < 1000 && f.path == ""; k++ {
		if p := fmt.Sprintf("/flap/%d", k); f.stream(p, "200") == flapService[0] {
			f.path = p
		}
	}
	if f.path == "" {
		t.Fatalf("no path of /flap/0../flap/999 went to %s", flapService[0])
	}
	f.ticks(2)
	f.cycle() // the warm-up: every transition once
	if got := transitionLines(h); len(got) != len(flapLines) {
		t.Fatalf("the warm-up cycle logged for %s:\n%s\nwant %d lines", flapService[0], strings.Join(got, "\n"), len(flapLines))
	}
	before := lastMemStats(t, h, "tick-end")
	for range flapCycles {
		f.cycle()
	}
	after := lastMemStats(t, h, "tick-end")

	lines := transitionLines(h)
	if want := (flapCycles + 1) * len(flapLines); len(lines) != want {
		t.Fatalf("%d cycles logged %d transitions of %s, want %d:\n%s", flapCycles+1, len(lines), flapService[0], want, strings.Join(lines, "\n"))
	}
	for i, l := range lines {
		if w := flapPrefix + flapLines[i%len(flapLines)]; l != w {
			t.Errorf("transition log line %d = %q, want %q", i, l, w)
		}
	}
	transitions := flapCycles * len(flapLines)
	bytes, mallocs, gcs := after.totalAlloc-before.totalAlloc, after.mallocs-before.mallocs, after.numGC-before.numGC
	t.Logf("%d health transitions of %s (%d cycles): %d bytes in %d allocations (%.1f B per transition), %d GC cycles",
		transitions, flapService[0], flapCycles, bytes, mallocs, float64(bytes)/float64(transitions), gcs)
	if bytes != 0 || mallocs != 0 || gcs != 0 {
		t.Errorf("%d health transitions allocated %d bytes in %d allocations (%.1f B per transition) and ran %d GC cycles in the guest, want 0",
			transitions, bytes, mallocs, float64(bytes)/float64(transitions), gcs)
	}
}
