package hostsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// store is a loopback HTTP server for callouts: each request is announced on
// got, then answered by answer(path) once release is closed (or at once when
// release is nil); a request whose client hung up first is announced on
// hungUp. Requests are never left hanging at the end of a test.
type store struct {
	srv     *httptest.Server
	got     chan *http.Request
	hungUp  chan *http.Request
	release chan struct{}
	answer  func(path string) string
	mu      sync.Mutex
	bodies  []string // request bodies in arrival order
}

func newStore(t *testing.T, release chan struct{}, answer func(string) string) *store {
	t.Helper()
	s := &store{got: make(chan *http.Request, 64), hungUp: make(chan *http.Request, 64), release: release, answer: answer}
	stop := make(chan struct{})
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, string(b))
		s.mu.Unlock()
		select {
		case s.got <- r:
		default: // nobody is watching this many requests
		}
		if s.release != nil {
			select {
			case <-s.release:
			case <-r.Context().Done():
				select {
				case s.hungUp <- r:
				default:
				}
				return
			case <-stop:
				return
			}
		}
		w.Header().Set("x-store", "yes")
		fmt.Fprint(w, s.answer(r.URL.Path))
	}))
	t.Cleanup(func() { close(stop); s.srv.Close() })
	return s
}

func (s *store) addr() string { return strings.TrimPrefix(s.srv.URL, "http://") }

// asyncReq is a request for the async test module: GET path, its callout to cluster.
func asyncReq(path, cluster string, timeoutMS int) [][2]string {
	h := [][2]string{{":method", "GET"}, {":path", path}, {":authority", "example.com"}, {"x-cluster", cluster}}
	if timeoutMS > 0 {
		h = append(h, [2]string{"x-timeout", fmt.Sprint(timeoutMS)})
	}
	return h
}

// waitCtx bounds a Wait so that a bug fails the test instead of hanging it.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func hasLog(h *Host, line string) bool {
	for _, l := range h.LogsAt(LogInfo) {
		if l == line {
			return true
		}
	}
	return false
}

func TestClusterCalloutAnsweredAfterTheCall(t *testing.T) {
	release := make(chan struct{})
	st := newStore(t, release, func(p string) string { return "hello " + p })
	h := newHost(t, "async", Config{Clusters: map[string]string{"store": st.addr()}})
	s := h.Stream(0)
	res := s.RequestHeaders(asyncReq("/k1", "store", 0), nil)
	if res.Action != ActionPause || res.Err != nil || res.LocalReply != nil {
		t.Fatalf("RequestHeaders = %+v, want Pause", res)
	}
	r := <-st.got // the request reached the store after RequestHeaders returned
	if r.Host != "store" || r.Header.Get("x-stream") != fmt.Sprint(s.ID()) || r.Method != "GET" {
		t.Errorf("store got %s %s Host %q x-stream %q, want GET /k1 Host store x-stream %d",
			r.Method, r.URL, r.Host, r.Header.Get("x-stream"), s.ID())
	}
	st.mu.Lock()
	if want := fmt.Sprintf("for stream %d", s.ID()); len(st.bodies) != 1 || st.bodies[0] != want || r.URL.Path != "/k1" {
		t.Errorf("store got %s with bodies %q, want /k1 with %q", r.URL.Path, st.bodies, want)
	}
	st.mu.Unlock()
	if n := h.PendingCallouts(); n != 1 {
		t.Errorf("PendingCallouts() = %d while the store holds the answer, want 1", n)
	}
	if logs := h.LogsAt(LogInfo); len(logs) != 0 {
		t.Fatalf("logs before the store answered = %q, want none (no response delivered yet)", logs)
	}
	close(release)
	got := s.Wait(waitCtx(t))
	if got.Err != nil || got.Action != ActionContinue {
		t.Fatalf("Wait = %+v, want Continue", got)
	}
	if v, _ := got.Header("x-answer"); v != "200:hello /k1" {
		t.Errorf("x-answer = %q, want 200:hello /k1 (set from the callout response)", v)
	}
	want := []string{
		// :status, content-length, content-type, date, x-store
		"response 1 status 200 headers 5 body hello /k1",
		fmt.Sprintf("effective %d 0", s.ID()),
		"continue 0",
	}
	for _, line := range want {
		if !hasLog(h, line) {
			t.Errorf("logs = %q, want a line %q", h.LogsAt(LogInfo), line)
		}
	}
	if n := h.PendingCallouts(); n != 0 {
		t.Errorf("PendingCallouts() after delivery = %d, want 0", n)
	}
	if again := s.Wait(waitCtx(t)); again.Action != ActionContinue {
		t.Errorf("second Wait = %+v, want the same Continue at once", again)
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
}

func TestClusterCalloutFailures(t *testing.T) {
	hang := make(chan struct{}) // never closed: the store does not answer
	slow := newStore(t, hang, func(string) string { return "late" })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	// Envoy answers both with a response of its own (measured in Envoy 1.36.4
	// and 1.40.0, e2e/envoy TestHostFactsAsEnvoyAnswers); newHost runs the
	// envoy-1.33 profile, Envoy 1.36's wording.
	tests := []struct {
		name, cluster string
		timeoutMS     int
		answer        string
	}{
		{"timeout", "slow", 50, "504:upstream request timeout"},
		{"connection refused", "refused", 0, "503:upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, transport failure reason: delayed connect error: Connection refused"},
	}
	h := newHost(t, "async", Config{Clusters: map[string]string{"slow": slow.addr(), "refused": refused}})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h.ResetLogs()
			s := h.Stream(0)
			defer s.Finish()
			if res := s.RequestHeaders(asyncReq("/k", tc.cluster, tc.timeoutMS), nil); res.Action != ActionPause {
				t.Fatalf("RequestHeaders = %+v, want Pause", res)
			}
			got := s.Wait(waitCtx(t))
			if v, _ := got.Header("x-answer"); got.Action != ActionContinue || v != tc.answer {
				t.Fatalf("Wait = %+v, want Continue with x-answer %q", got, tc.answer)
			}
			if st := tc.answer[:3]; !strings.Contains(h.LogsAt(LogInfo)[0], " status "+st+" headers 3 body ") {
				t.Errorf("delivery = %q, want Envoy's own %s: three headers and its body", h.LogsAt(LogInfo)[0], st)
			}
		})
	}
}

func TestPausedStreamOutcomes(t *testing.T) {
	st := newStore(t, nil, func(p string) string {
		switch p {
		case "/chain":
			return "again /second"
		case "/second":
			return "two"
		}
		return p[1:] // "/local" → "local", "/close" → "close"
	})
	hang := newStore(t, make(chan struct{}), func(string) string { return "" })
	h := newHost(t, "async", Config{
		Clusters: map[string]string{"store": st.addr(), "hang": hang.addr()},
		HTTPCall: func(*CallRequest) (*CallResponse, error) {
			return &CallResponse{Headers: [][2]string{{":status", "200"}}, Body: []byte("sync")}, nil
		},
	})
	t.Run("local reply through on_response_headers", func(t *testing.T) {
		s := h.Stream(0)
		defer s.Finish()
		s.RequestHeaders(asyncReq("/local", "store", 0), nil)
		wantLocalReply(t, s.Wait(waitCtx(t)).LocalReply, 418, "from the store", "store_says_no")
	})
	t.Run("closed", func(t *testing.T) {
		s := h.Stream(0)
		defer s.Finish()
		s.RequestHeaders(asyncReq("/close", "store", 0), nil)
		if got := s.Wait(waitCtx(t)); !errors.Is(got.Err, ErrStreamClosed) || got.LocalReply != nil {
			t.Fatalf("Wait = %+v, want ErrStreamClosed and no reply", got)
		}
	})
	t.Run("chained callout from the response", func(t *testing.T) {
		s := h.Stream(0)
		defer s.Finish()
		s.RequestHeaders(asyncReq("/chain", "store", 0), nil)
		got := s.Wait(waitCtx(t))
		if v, _ := got.Header("x-answer"); got.Action != ActionContinue || v != "200:two" {
			t.Fatalf("Wait = %+v, want Continue with x-answer 200:two", got)
		}
		if !hasLog(h, "again 0") {
			t.Errorf("logs = %q, want the chained proxy_http_call to succeed", h.LogsAt(LogInfo))
		}
	})
	t.Run("not paused", func(t *testing.T) {
		s := h.Stream(0)
		defer s.Finish()
		res := s.RequestHeaders(asyncReq("/pass", "store", 0), nil)
		if got := s.Wait(waitCtx(t)); res.Action != ActionContinue || got.Action != ActionContinue || got.Err != nil {
			t.Fatalf("RequestHeaders, Wait = %+v, %+v; want Continue at once", res, got)
		}
	})
	t.Run("two streams answered out of order", func(t *testing.T) {
		a, b := h.Stream(0), h.Stream(0)
		defer a.Finish()
		defer b.Finish()
		a.RequestHeaders(asyncReq("/a", "store", 0), nil)
		b.RequestHeaders(asyncReq("/b", "store", 0), nil)
		gb, ga := b.Wait(waitCtx(t)), a.Wait(waitCtx(t))
		va, _ := ga.Header("x-answer")
		vb, _ := gb.Header("x-answer")
		if va != "200:a" || vb != "200:b" {
			t.Fatalf("x-answer a, b = %q, %q; want each stream its own answer", va, vb)
		}
	})
	t.Run("answered within the call by Config.HTTPCall", func(t *testing.T) {
		s := h.Stream(0)
		defer s.Finish()
		res := s.RequestHeaders(asyncReq("/x", "other", 0), nil)
		got := s.Wait(waitCtx(t))
		if v, _ := got.Header("x-answer"); res.Action != ActionPause || got.Action != ActionContinue || v != "200:sync" {
			t.Fatalf("RequestHeaders, Wait = %+v, %+v; want Pause, then Continue with x-answer 200:sync at once", res, got)
		}
	})
	t.Run("wait cancelled", func(t *testing.T) {
		s := h.Stream(0)
		defer s.Finish()
		s.RequestHeaders(asyncReq("/x", "hang", 0), nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if got := s.Wait(ctx); got.Action != ActionPause || !errors.Is(got.Err, context.Canceled) {
			t.Fatalf("Wait(cancelled) = %+v, want Pause and context.Canceled", got)
		}
	})
}

// logSignal is a Config.LogOutput that reports on a channel each line that
// contains match.
type logSignal struct {
	match string
	ch    chan string
}

func (l *logSignal) Write(p []byte) (int, error) {
	if strings.Contains(string(p), l.match) {
		l.ch <- string(p)
	}
	return len(p), nil
}

func TestResetStreamNeverResumes(t *testing.T) {
	release := make(chan struct{})
	st := newStore(t, release, func(string) string { return "ok" })
	sig := &logSignal{match: "continue ", ch: make(chan string, 1)}
	h := newHost(t, "async", Config{Clusters: map[string]string{"store": st.addr()}, LogOutput: sig})
	s := h.Stream(0)
	if res := s.RequestHeaders(asyncReq("/k", "store", 0), nil); res.Action != ActionPause {
		t.Fatalf("RequestHeaders = %+v, want Pause", res)
	}
	<-st.got
	if err := s.Finish(); err != nil { // the client went away: Envoy resets the stream
		t.Fatal(err)
	}
	if got := s.Wait(waitCtx(t)); !errors.Is(got.Err, ErrStreamFinished) || got.Action == ActionContinue {
		t.Fatalf("Wait after Finish = %+v, want ErrStreamFinished", got)
	}
	close(release)
	<-sig.ch // the module tried to resume the stream from the callout's response
	// cpp-host set_effective_context: unknown context → BadArgument (2); the
	// continue then acts on the root context, which has no stream: Ok (0),
	// nothing done, as Envoy answers (TestHostFactsAsEnvoyAnswers).
	for _, line := range []string{fmt.Sprintf("effective %d 2", s.ID()), "continue 0"} {
		if !hasLog(h, line) {
			t.Errorf("logs = %q, want a line %q", h.LogsAt(LogInfo), line)
		}
	}
	if got := s.Wait(waitCtx(t)); !errors.Is(got.Err, ErrStreamFinished) {
		t.Errorf("Wait after the late response = %+v, want still ErrStreamFinished", got)
	}
	if h.Err(0) != nil {
		t.Errorf("Err(0) = %v, want the VM alive", h.Err(0))
	}
	// The VM still serves.
	s2 := h.Stream(0)
	defer s2.Finish()
	if res := s2.RequestHeaders(asyncReq("/pass", "store", 0), nil); res.Action != ActionContinue || res.Err != nil {
		t.Fatalf("next stream = %+v, want Continue", res)
	}
}

func TestCalloutInFlightAtClose(t *testing.T) {
	st := newStore(t, make(chan struct{}), func(string) string { return "never" })
	h, err := New(context.Background(), module(t, "async"), Config{Clusters: map[string]string{"store": st.addr()}})
	if err != nil {
		t.Fatal(err)
	}
	s := h.Stream(0)
	s.RequestHeaders(asyncReq("/k", "store", 0), nil) // timeout 5 s, far beyond the test
	<-st.got
	waited := make(chan Result, 1)
	go func() { waited <- s.Wait(context.Background()) }()
	if err := h.Close(context.Background()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if n := h.PendingCallouts(); n != 0 {
		t.Errorf("PendingCallouts() after Close = %d, want 0", n)
	}
	if got := <-waited; !errors.Is(got.Err, ErrHostClosed) {
		t.Errorf("Wait = %+v, want ErrHostClosed", got)
	}
	select {
	case <-st.hungUp: // the host hung up: its goroutine did not outlive Close
	case <-time.After(30 * time.Second):
		t.Fatal("the store's request was still open 30 s after Close: the callout was not cancelled")
	}
	if logs := h.LogsAt(LogInfo); len(logs) != 0 {
		t.Errorf("logs = %q, want no response delivered after Close", logs)
	}
	if err := h.Close(context.Background()); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

// TestConcurrentPausedStreams pauses many streams on several workers at once,
// their callouts answered in whatever order the store's goroutines finish,
// and checks each stream is resumed with its own answer (run under -race by
// ./build.sh test).
func TestConcurrentPausedStreams(t *testing.T) {
	st := newStore(t, nil, func(p string) string { return "answer" + p })
	h := newHost(t, "async", Config{Workers: 3, Clusters: map[string]string{"store": st.addr()}})
	const perWorker = 20
	var wg sync.WaitGroup
	errs := make(chan string, 3*perWorker)
	for w := 0; w < h.Workers(); w++ {
		for i := 0; i < perWorker; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				path := fmt.Sprintf("/w%d/s%d", w, i)
				s := h.Stream(w)
				defer s.Finish()
				s.RequestHeaders(asyncReq(path, "store", 0), nil)
				got := s.Wait(waitCtx(t))
				if v, _ := got.Header("x-answer"); v != "200:answer"+path {
					errs <- fmt.Sprintf("stream %s: Wait = %+v, want x-answer 200:answer%s", path, got, path)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := h.PendingCallouts(); n != 0 {
		t.Errorf("PendingCallouts() = %d after every stream resumed, want 0", n)
	}
}

// TestCalloutLate: Host.CalloutLate stays 0 while callouts are answered
// within their timeout, and reports how far past its timeout one that
// timed out reached the module, which is never less than 0 and, on any
// machine a test runs on, well under the wait itself.
func TestCalloutLate(t *testing.T) {
	fast := newStore(t, nil, func(string) string { return "soon" })
	slow := newStore(t, make(chan struct{}), func(string) string { return "late" }) // never answers
	h := newHost(t, "async", Config{Clusters: map[string]string{"fast": fast.addr(), "slow": slow.addr()}})
	call := func(cluster string, timeoutMS int) {
		t.Helper()
		s := h.Stream(0)
		defer s.Finish()
		if res := s.RequestHeaders(asyncReq("/k", cluster, timeoutMS), nil); res.Action != ActionPause {
			t.Fatalf("RequestHeaders = %+v, want Pause", res)
		}
		if got := s.Wait(waitCtx(t)); got.Action != ActionContinue {
			t.Fatalf("Wait = %+v, want Continue", got)
		}
	}
	for range 3 {
		call("fast", 5000)
	}
	if late := h.CalloutLate(); late != 0 {
		t.Fatalf("CalloutLate() = %v after callouts answered in time, want 0", late)
	}
	start := time.Now()
	call("slow", 100)
	waited := time.Since(start)
	if late := h.CalloutLate(); late <= 0 || late > waited-100*time.Millisecond {
		t.Errorf("CalloutLate() = %v after a 100 ms callout that timed out (the stream waited %v), want above 0 and at most the wait past 100 ms", late, waited)
	}
}
