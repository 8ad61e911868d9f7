package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
)

// route sends one request through worker w and returns the service chosen.
func route(t *testing.T, h *hostsim.Host, w int, path string) string {
	t.Helper()
	s := h.Stream(w)
	res := s.RequestHeaders([][2]string{{":method", "GET"}, {":path", path}, {":authority", "h"}},
		map[string][]byte{"source.address": hostsim.PropString("192.0.2.1:4000")})
	if res.Err != nil {
		t.Fatalf("worker %d %s: %v", w, path, res.Err)
	}
	name, _ := res.Header("x-hashlb-service")
	s.ResponseHeaders([][2]string{{":status", "200"}})
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	return name
}

// probeAnswers answers hashlb's health probes as backends would: 503 from an
// address (the upstream header) marked failing, 200 from any other (with
// body as text/plain when set), and counts the probes each address and each
// worker sent. Its methods are safe from every worker.
type probeAnswers struct {
	mu       sync.Mutex
	body     []byte
	failing  map[string]bool
	byAddr   map[string]int
	byWorker map[int]int
	all      int
}

// newProbeAnswers answers with the addresses failing failing from the start.
func newProbeAnswers(failing ...string) *probeAnswers {
	return newProbeAnswersBody(nil, failing...)
}

// newProbeAnswersBody is newProbeAnswers whose 200s carry body.
func newProbeAnswersBody(body []byte, failing ...string) *probeAnswers {
	p := &probeAnswers{body: body, failing: map[string]bool{}, byAddr: map[string]int{}, byWorker: map[int]int{}}
	p.set(true, failing...)
	return p
}

// set marks addrs failing (true) or passing (false) from the next probe on.
func (p *probeAnswers) set(failing bool, addrs ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range addrs {
		p.failing[a] = failing
	}
}

// only marks exactly addrs failing, every other address passing.
func (p *probeAnswers) only(addrs ...string) {
	p.mu.Lock()
	clear(p.failing)
	p.mu.Unlock()
	p.set(true, addrs...)
}

// handle answers one probe: a hostsim.HTTPHandler.
func (p *probeAnswers) handle(r *hostsim.CallRequest) (*hostsim.CallResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	addr := r.Header("x-envoy-original-dst-host")
	p.byAddr[addr]++
	p.byWorker[r.Worker]++
	p.all++
	switch {
	case p.failing[addr]:
		return &hostsim.CallResponse{Headers: [][2]string{{":status", "503"}}}, nil
	case p.body != nil:
		return &hostsim.CallResponse{Headers: [][2]string{{":status", "200"}, {"content-type", "text/plain"}}, Body: p.body}, nil
	}
	return &hostsim.CallResponse{Headers: [][2]string{{":status", "200"}}}, nil
}

// answered is how many probes came in all.
func (p *probeAnswers) answered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.all
}

// counts returns the probes per address and per worker since the last call,
// and starts counting again.
func (p *probeAnswers) counts() (byAddr map[string]int, byWorker map[int]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	byAddr, byWorker = p.byAddr, p.byWorker
	p.byAddr, p.byWorker = map[string]int{}, map[int]int{}
	return byAddr, byWorker
}

// TestActiveHealthUnderHostsim: one worker probes for all (the lease), a
// service failing its probes goes DOWN on every worker, its keys move to
// their next-ranked service, and return when it passes again.
func TestActiveHealthUnderHostsim(t *testing.T) {
	backends := newProbeAnswers()
	handler := func(r *hostsim.CallRequest) (*hostsim.CallResponse, error) {
		if r.Cluster != "backends" || r.Header(":path") != "/healthz" {
			return nil, fmt.Errorf("unexpected probe %s %v", r.Cluster, r.Headers)
		}
		return backends.handle(r)
	}
	cfg := `{"lbMethod":"URLHASH","healthCheck":{"interval":"1s","timeout":"500ms","unhealthyThreshold":2,"healthyThreshold":2,"cluster":"backends"},
		"services":[{"name":"a","address":"10.0.0.1:80"},{"name":"b","address":"10.0.0.2:80"},{"name":"c","address":"10.0.0.3:80"}]}`
	h := moduleHost(t, hostsim.Config{Workers: 4, PluginConfig: []byte(cfg), HTTPCall: handler})

	const keys = 300
	before := make([]string, keys)
	for k := range before {
		before[k] = route(t, h, k%4, fmt.Sprintf("/obj/%d", k))
	}
	backends.set(true, "10.0.0.2:80")
	for i := 0; i < 3; i++ { // two failed rounds mark b DOWN; one more tick spreads the verdict
		h.Advance(time.Second)
	}
	for k := range before {
		got := route(t, h, (k+1)%4, fmt.Sprintf("/obj/%d", k))
		switch {
		case got == "b":
			t.Fatalf("key %d still goes to b, which failed its probes", k)
		case before[k] != "b" && got != before[k]:
			t.Fatalf("key %d moved from %s to %s although only b went DOWN", k, before[k], got)
		}
	}
	backends.set(false, "10.0.0.2:80")
	for i := 0; i < 3; i++ {
		h.Advance(time.Second)
	}
	for k := range before {
		if got := route(t, h, (k+2)%4, fmt.Sprintf("/obj/%d", k)); got != before[k] {
			t.Fatalf("after b came back, key %d goes to %s, want %s", k, got, before[k])
		}
	}
	if _, probes := backends.counts(); len(probes) != 1 {
		t.Errorf("probes came from workers %v, want one worker at a time (the lease)", probes)
	}
	if m, ok := h.Metric("hashlb.service.b.health_down"); !ok || m.Value != 1 {
		t.Errorf("hashlb.service.b.health_down = %+v, want 1", m)
	}
	if m, ok := h.Metric("hashlb.service.b.health_up"); !ok || m.Value != 1 {
		t.Errorf("hashlb.service.b.health_up = %+v, want 1", m)
	}
}

// TestLeastConnectionAcrossWorkers: requests held open on one worker make
// another worker avoid those services once the counts are shared (one tick).
func TestLeastConnectionAcrossWorkers(t *testing.T) {
	cfg := `{"lbMethod":"LEASTCONNECTION","services":[{"name":"a","address":"10.0.0.1:80"},{"name":"b","address":"10.0.0.2:80"},{"name":"c","address":"10.0.0.3:80"}]}`
	ctx := context.Background()
	h, err := hostsim.New(ctx, module(t), hostsim.Config{Workers: 2, PluginConfig: []byte(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	start := func(w int) (*hostsim.Stream, string) {
		s := h.Stream(w)
		res := s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "h"}}, nil)
		name, _ := res.Header("x-hashlb-service")
		return s, name
	}
	end := func(s *hostsim.Stream) {
		s.ResponseHeaders([][2]string{{":status", "200"}})
		if err := s.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	// Worker 0 opens six requests (least connection: two per service) and
	// ends those on c: a and b carry two each, c none.
	var open []*hostsim.Stream
	var onC []*hostsim.Stream
	for i := 0; i < 6; i++ {
		s, name := start(0)
		if name == "c" {
			onC = append(onC, s)
		} else {
			open = append(open, s)
		}
	}
	for _, s := range onC {
		end(s)
	}
	if len(open) != 4 {
		t.Fatalf("worker 0 holds %d requests on a and b, want 4 (2 each)", len(open))
	}
	h.Advance(time.Second) // one tick shares the counts
	// Without shared counts worker 1 would see three idle services and
	// could not send two requests in a row to c.
	for i := 0; i < 2; i++ {
		s, name := start(1)
		if name != "c" {
			t.Errorf("worker 1 request %d went to %s, want c (a and b carry worker 0's requests)", i, name)
		}
		defer end(s)
	}
	for _, s := range open {
		end(s)
	}
	h.Advance(time.Second) // the workers give the host their counts on the tick
	for _, name := range []string{"a", "b"} {
		if m, _ := h.Metric("hashlb.service." + name + ".active"); m.Value != 0 {
			t.Errorf("hashlb.service.%s.active = %d after every request on it ended, want 0", name, m.Value)
		}
	}
}
