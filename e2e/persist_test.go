package e2e

// Hash persistence (SPEC §5, issue 4) end to end: the module built from
// source runs under hostsim with four workers sharing one shared-data store,
// as the workers of one Envoy process do. Requests carry their persistence
// key in x-client-id; the service is read from the x-hashlb-service and
// x-envoy-original-dst-host request headers and the decision's reason from
// the debug response header x-hashlb-decision.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/lbcore"
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

// lbConfig returns a plugin configuration; p == nil leaves persistence off.
func lbConfig(t testing.TB, method string, p map[string]any, services []svcDef) []byte {
	t.Helper()
	c := map[string]any{"lbMethod": method, "debugHeader": true, "services": services}
	if p != nil {
		c["persistence"] = p
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lbHost runs the module with workers VMs (4 unless given) and cfg.
func lbHost(t testing.TB, cfg []byte, workers int) *hostsim.Host {
	t.Helper()
	h, err := hostsim.New(context.Background(), module(t), hostsim.Config{
		Workers: workers, PluginConfig: cfg, RootID: persistRootID})
	if err != nil {
		t.Fatalf("hostsim.New: %v", err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// reply is what the filter did with one request.
type reply struct {
	service string // x-hashlb-service
	reason  string // reason= of x-hashlb-decision
}

// req is one request: its x-client-id (none when "") and source address.
type req struct {
	id, src string
}

func (r req) headers() [][2]string {
	hs := [][2]string{{":method", "GET"}, {":path", "/api"}, {":authority", "lb.example"}, {":scheme", "http"}}
	if r.id != "" {
		hs = append(hs, [2]string{"x-client-id", r.id})
	}
	return hs
}

func (r req) props() map[string][]byte {
	src := r.src
	if src == "" {
		src = "10.0.0.1:1234"
	}
	return map[string][]byte{"source.address": hostsim.PropString(src),
		"destination.address": hostsim.PropString("10.0.0.100:80")}
}

// open sends r's request headers on worker w and returns the open stream and
// the chosen service; the stream counts as an active request until finish.
func open(h *hostsim.Host, w int, r req) (*hostsim.Stream, string, error) {
	s := h.Stream(w)
	res := s.RequestHeaders(r.headers(), r.props())
	if res.Err != nil || res.LocalReply != nil {
		return nil, "", fmt.Errorf("worker %d: RequestHeaders(%+v) = err %v, local reply %+v", w, r, res.Err, res.LocalReply)
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

// finish sends the response and ends the stream; it returns the decision's
// reason from x-hashlb-decision.
func finish(s *hostsim.Stream) (string, error) {
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

// do runs one full stream of r on worker w.
func do(h *hostsim.Host, w int, r req) (reply, error) {
	s, svc, err := open(h, w, r)
	if err != nil {
		return reply{}, err
	}
	reason, err := finish(s)
	return reply{service: svc, reason: reason}, err
}

// send is do for the test's goroutine: an error ends the test.
func send(t testing.TB, h *hostsim.Host, w int, r req) reply {
	t.Helper()
	rep, err := do(h, w, r)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// hold is open for the test's goroutine.
func hold(t testing.TB, h *hostsim.Host, w int, r req) (*hostsim.Stream, string) {
	t.Helper()
	s, svc, err := open(h, w, r)
	if err != nil {
		t.Fatal(err)
	}
	return s, svc
}

// release ends held streams.
func release(t testing.TB, ss []*hostsim.Stream) {
	t.Helper()
	for _, s := range ss {
		if _, err := finish(s); err != nil {
			t.Fatal(err)
		}
	}
}

// metric returns a counter's value (0 when the module never defined it).
func metric(h *hostsim.Host, name string) int64 {
	m, _ := h.Metric(name)
	return m.Value
}

// persistMetrics reads the persistence counters by short name.
func persistMetrics(h *hostsim.Host) map[string]int64 {
	out := map[string]int64{}
	for _, n := range []string{"hit", "miss", "expired", "evicted", "empty_key", "cas_retry", "cas_giveup"} {
		out[n] = metric(h, "hashlb.persistence_"+n)
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

// desync sends w requests without a key (and without persistence effect when
// emptyKey is skip) to worker w, so the workers' round-robin positions differ.
func desync(t *testing.T, h *hostsim.Host) {
	t.Helper()
	for w := 0; w < h.Workers(); w++ {
		for i := 0; i < w; i++ {
			send(t, h, w, req{})
		}
	}
}

// TestPersistSameKeyAnyWorker: with persistence a key goes to one service
// whichever worker takes it; round robin alone would send it wherever each
// worker's rotation stands.
func TestPersistSameKeyAnyWorker(t *testing.T) {
	const keys = 200
	tests := []struct {
		name       string
		p          map[string]any
		concurrent bool
		agree      bool
	}{
		{"persistence", persistence(nil), false, true},
		{"persistence, workers concurrent", persistence(nil), true, true},
		{"round robin alone", nil, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := lbHost(t, lbConfig(t, "ROUNDROBIN", tc.p, fourServices()), 4)
			desync(t, h)
			got := make([][4]reply, keys) // key → worker → reply
			run := func(w int) error {
				for i := 0; i < keys; i++ {
					// Each worker walks the keys from its own starting point.
					k := (i + w*keys/4) % keys
					var err error
					if got[k][w], err = do(h, w, req{id: clientID(k)}); err != nil {
						return err
					}
				}
				return nil
			}
			errs := make([]error, 4)
			if tc.concurrent {
				var wg sync.WaitGroup
				for w := 0; w < 4; w++ {
					wg.Add(1)
					go func() { defer wg.Done(); errs[w] = run(w) }()
				}
				wg.Wait()
			} else {
				for w := 0; w < 4; w++ {
					errs[w] = run(w)
				}
			}
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			disagree := 0
			for k, rs := range got {
				for w := 1; w < 4; w++ {
					if rs[w].service != rs[0].service {
						disagree++
						if tc.agree {
							t.Errorf("key %s: worker 0 → %s, worker %d → %s", clientID(k), rs[0].service, w, rs[w].service)
						}
						break
					}
				}
			}
			if !tc.agree && disagree < keys/2 {
				t.Fatalf("round robin alone: %d of %d keys had workers disagree, want most (else this test proves nothing)", disagree, keys)
			}
			if tc.p == nil {
				return
			}
			// Every key: one miss (first worker to see it), three hits. With
			// concurrent workers a worker may lose the insert race to another;
			// it then serves the stored mapping and counts its own miss.
			m := persistMetrics(h)
			if m["hit"]+m["miss"] != 4*keys || m["miss"] < keys || m["empty_key"] != 3*2 {
				t.Errorf("persistence metrics = %v, want hit+miss = %d, miss ≥ %d, empty_key = 6 (the desync requests)", m, 4*keys, keys)
			}
			if !tc.concurrent && (m["hit"] != 3*keys || m["miss"] != keys) {
				t.Errorf("persistence metrics = %v, want hit %d, miss %d", m, 3*keys, keys)
			}
			if m["cas_giveup"] != 0 {
				t.Errorf("persistence_cas_giveup = %d, want 0", m["cas_giveup"])
			}
			if n := metric(h, "hashlb.decision.persistence"); !tc.concurrent && n != 3*keys {
				t.Errorf("hashlb.decision.persistence = %d, want %d", n, 3*keys)
			}
		})
	}
}

var _ = binary.LittleEndian
var _ = bits.Mul64
var _ = xxhash.Sum64
var _ = time.Second
var _ = lbcore.Ways
