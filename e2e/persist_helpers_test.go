package e2e

// Helpers of the persistence tests: configs, hosts and streams.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
)

// persistRootID is the plugin_root_id of the hosts below; the module keeps
// its table under "hashlb/" + root id.
const persistRootID = "hashlb"

var persistNamespace = "hashlb/" + persistRootID

// svcDef is one service of a test configuration.
type svcDef struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	Enabled *bool  `json:"enabled,omitempty"`
}

// fourServices are b1…b4 on 10.0.0.11…14:8080.
func fourServices() []svcDef {
	var s []svcDef
	for i := 1; i <= 4; i++ {
		s = append(s, svcDef{Name: "b" + strconv.Itoa(i), Address: fmt.Sprintf("10.0.0.1%d:8080", i)})
	}
	return s
}

// persistence is the usual persistence block: the x-client-id header as the
// key; extra fields (tableSize, expire, emptyKey, keys) override.
func persistence(extra map[string]any) map[string]any {
	p := map[string]any{"keys": []string{"${request.header.x-client-id}"}}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

// configJSON is the plugin configuration c, with the fields of extra set
// over it, as JSON.
func configJSON(t testing.TB, c, extra map[string]any) []byte {
	t.Helper()
	for k, v := range extra {
		c[k] = v
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lbConfig returns a plugin configuration; p == nil leaves persistence off.
func lbConfig(t testing.TB, method string, p map[string]any, services []svcDef) []byte {
	t.Helper()
	c := map[string]any{"lbMethod": method, "debugHeader": true, "services": services}
	if p != nil {
		c["persistence"] = p
	}
	return configJSON(t, c, nil)
}

// lbHost runs the module in workers VMs with plugin configuration cfg.
func lbHost(t testing.TB, cfg []byte, workers int) *hostsim.Host {
	t.Helper()
	return moduleHost(t, hostsim.Config{Workers: workers, PluginConfig: cfg, RootID: persistRootID})
}

// persistReply is what the filter did with one request.
type persistReply struct {
	service string // x-hashlb-service
	reason  string // reason= of x-hashlb-decision
}

// persistReq is one request: its x-client-id (none when "") and source address.
type persistReq struct {
	id, src string
}

func (r persistReq) headers() [][2]string {
	hs := [][2]string{{":method", "GET"}, {":path", "/api"}, {":authority", "lb.example"}, {":scheme", "http"}}
	if r.id != "" {
		hs = append(hs, [2]string{"x-client-id", r.id})
	}
	return hs
}

func (r persistReq) props() map[string][]byte {
	src := r.src
	if src == "" {
		src = "10.0.0.1:1234"
	}
	return map[string][]byte{"source.address": hostsim.PropString(src),
		"destination.address": hostsim.PropString("10.0.0.100:80")}
}

// openStream sends r's request headers on worker w and returns the open stream and
// the chosen service; the stream counts as an active request until finishStream.
func openStream(h *hostsim.Host, w int, r persistReq) (*hostsim.Stream, string, error) {
	s := h.Stream(w)
	res := s.RequestHeaders(r.headers(), r.props())
	if res.Err != nil || res.LocalReply != nil {
		return nil, "", fmt.Errorf("worker %d: RequestHeaders(%+v) = err %v, local persistReply %+v", w, r, res.Err, res.LocalReply)
	}
	svc, ok := res.Header("x-hashlb-service")
	if !ok {
		return nil, "", fmt.Errorf("worker %d: request %+v has no x-hashlb-service", w, r)
	}
	dst, _ := res.Header("x-envoy-original-dst-host")
	if want := "10.0.0.1" + strings.TrimPrefix(svc, "b") + ":8080"; dst != want {
		return nil, "", fmt.Errorf("worker %d: x-envoy-original-dst-host = %q for service %s, want %q", w, dst, svc, want)
	}
	return s, svc, nil
}

// finishStream sends the response and ends the stream; it returns the decision's
// reason from x-hashlb-decision.
func finishStream(s *hostsim.Stream) (string, error) {
	res := s.ResponseHeaders([][2]string{{":status", "200"}})
	if res.Err != nil {
		return "", fmt.Errorf("ResponseHeaders: %w", res.Err)
	}
	dec, _ := res.Header("x-hashlb-decision")
	if err := s.Finish(); err != nil {
		return "", fmt.Errorf("Finish: %w", err)
	}
	_, reason, ok := strings.Cut(dec, "reason=")
	if !ok {
		return "", fmt.Errorf("x-hashlb-decision = %q, want a reason", dec)
	}
	return reason, nil
}

// roundTrip runs one full stream of r on worker w.
func roundTrip(h *hostsim.Host, w int, r persistReq) (persistReply, error) {
	s, svc, err := openStream(h, w, r)
	if err != nil {
		return persistReply{}, err
	}
	reason, err := finishStream(s)
	return persistReply{service: svc, reason: reason}, err
}

// mustRoundTrip is roundTrip for the test's goroutine: an error ends the test.
func mustRoundTrip(t testing.TB, h *hostsim.Host, w int, r persistReq) persistReply {
	t.Helper()
	rep, err := roundTrip(h, w, r)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// holdStream is openStream for the test's goroutine.
func holdStream(t testing.TB, h *hostsim.Host, w int, r persistReq) (*hostsim.Stream, string) {
	t.Helper()
	s, svc, err := openStream(h, w, r)
	if err != nil {
		t.Fatal(err)
	}
	return s, svc
}

// releaseStreams ends held streams.
func releaseStreams(t testing.TB, ss []*hostsim.Stream) {
	t.Helper()
	for _, s := range ss {
		if _, err := finishStream(s); err != nil {
			t.Fatal(err)
		}
	}
}

// flushMetrics lets every worker tick once: the module counts requests in
// the worker and gives the host the counts on its tick (one second), after
// which the host's values are exact.
func flushMetrics(h *hostsim.Host) { h.Advance(time.Second) }

// persistMetric returns a counter's value after a tick (0 when the module
// never defined it).
func persistMetric(h *hostsim.Host, name string) int64 {
	flushMetrics(h)
	return metricValue(h, name)
}

func metricValue(h *hostsim.Host, name string) int64 {
	m, _ := h.Metric(name)
	return m.Value
}

// persistMetrics reads the persistence counters by short name, after a tick.
func persistMetrics(h *hostsim.Host) map[string]int64 {
	flushMetrics(h)
	out := map[string]int64{}
	for _, n := range []string{"hit", "miss", "expired", "rechosen", "evicted", "empty_key", "cas_retry", "cas_giveup"} {
		out[n] = metricValue(h, "hashlb.persistence_"+n)
	}
	return out
}

// checkMetrics compares the persistence counters named in want.
func checkMetrics(t *testing.T, h *hostsim.Host, want map[string]int64) {
	t.Helper()
	got := persistMetrics(h)
	for n, v := range want {
		if got[n] != v {
			t.Errorf("hashlb.persistence_%s = %d, want %d (all: %v)", n, got[n], v, got)
		}
	}
}

func clientID(i int) string { return "client-" + strconv.Itoa(i) }

// desyncWorkers sends w requests without a key (and without persistence effect when
// emptyKey is skip) to worker w, so the workers' round-robin positions differ.
// offsetRoundRobin moves the round robin of each worker of a fourServices
// host so that, walking the keys as TestPersistSameKeyAnyWorker does (worker w
// from key 50w), no two workers pick the same service for any key: worker w's
// next pick is b(1 + 3w mod 4). Each worker starts its round robin at a
// random point, so without this, all four agree on every key once in 64 runs
// and the test proves nothing.
func offsetRoundRobin(t *testing.T, h *hostsim.Host) {
	t.Helper()
	for w := 0; w < h.Workers(); w++ {
		// Equal weights: the round robin cycles b1, b2, b3, b4.
		last := "b" + strconv.Itoa(1+(3*w+3)%4) // the pick before the wanted one
		for i := 0; ; i++ {
			if mustRoundTrip(t, h, w, persistReq{}).service == last {
				break
			}
			if i == 8 {
				t.Fatalf("worker %d never picked %s: not a four-service round robin", w, last)
			}
		}
	}
}

func desyncWorkers(t *testing.T, h *hostsim.Host) {
	t.Helper()
	for w := 0; w < h.Workers(); w++ {
		for i := 0; i < w; i++ {
			mustRoundTrip(t, h, w, persistReq{})
		}
	}
}
