package loadgen

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
)

// TestClosedCountsEveryAnswer: every request the backend answered is
// counted once, none is an error, and the connections send the request
// list in turn.
func TestClosedCountsEveryAnswer(t *testing.T) {
	b := envoyrun.StartFastBackend(t, "x")
	reqs := [][]byte{Render("h", "/a"), Render("h", "/b", [2]string{"X-Client-Id", "c1"})}
	r := Closed(context.Background(), b.Addr, reqs, 4, 300*time.Millisecond)
	if r.Errors != 0 || r.FirstErr != nil {
		t.Fatalf("errors %d: %v", r.Errors, r.FirstErr)
	}
	if r.Requests == 0 || r.Requests != b.Requests() {
		t.Errorf("counted %d answers, the backend answered %d", r.Requests, b.Requests())
	}
	if int64(len(r.Latencies)) != r.Requests || r.Quantile(0.5) <= 0 || r.Quantile(0.5) > r.Quantile(0.99) {
		t.Errorf("%d latencies for %d answers, p50 %v p99 %v", len(r.Latencies), r.Requests, r.Quantile(0.5), r.Quantile(0.99))
	}
	if rps := r.RPS(); rps <= 0 || r.Elapsed < 300*time.Millisecond {
		t.Errorf("%.0f req/s over %v", rps, r.Elapsed)
	}
}

// TestErrorsAreCounted: a non-2xx status and a backend that closes every
// connection are errors, each named in FirstErr, never answers.
func TestErrorsAreCounted(t *testing.T) {
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
	}))
	defer failing.Close()
	addr := strings.TrimPrefix(failing.URL, "http://")
	r := Closed(context.Background(), addr, [][]byte{Render("h", "/")}, 2, 100*time.Millisecond)
	if r.Requests != 0 || r.Errors == 0 || r.FirstErr == nil || !strings.Contains(r.FirstErr.Error(), "503") {
		t.Errorf("503s: %d answers, %d errors, %v", r.Requests, r.Errors, r.FirstErr)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	r = Open(context.Background(), ln.Addr().String(), [][]byte{Render("h", "/")}, 500, 2, 100*time.Millisecond)
	if r.Requests != 0 || r.Errors == 0 || r.FirstErr == nil {
		t.Errorf("closed connections: %d answers, %d errors, %v", r.Requests, r.Errors, r.FirstErr)
	}
}

// TestOpenKeepsTheRateAndCountsTheWait: at a rate the backend sustains,
// every request due is sent; at a rate it cannot (one connection, 20 ms
// per answer, one request due every 5 ms), the latency counts the time
// each request waited to be sent, not only its 20 ms on the wire.
func TestOpenKeepsTheRateAndCountsTheWait(t *testing.T) {
	b := envoyrun.StartFastBackend(t, "x")
	r := Open(context.Background(), b.Addr, [][]byte{Render("h", "/")}, 1000, 4, 400*time.Millisecond)
	if r.Errors != 0 || r.Requests+r.Missed != 400 || r.Requests < 380 {
		t.Errorf("1000 req/s for 0.4 s: %d answered, %d missed, %d errors (%v)", r.Requests, r.Missed, r.Errors, r.FirstErr)
	}

	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
	}))
	defer slow.Close()
	r = Open(context.Background(), strings.TrimPrefix(slow.URL, "http://"), [][]byte{Render("h", "/")}, 200, 1, 500*time.Millisecond)
	if r.Errors != 0 || r.Requests == 0 {
		t.Fatalf("slow backend: %d answered, %d errors (%v)", r.Requests, r.Errors, r.FirstErr)
	}
	// 100 due in 0.5 s, about 25 sent: the last one sent waited ~0.4 s.
	if r.Missed < 50 || r.Quantile(0.99) < 200*time.Millisecond {
		t.Errorf("overloaded: %d answered, %d missed, p99 %v: the wait for a connection is not counted", r.Requests, r.Missed, r.Quantile(0.99))
	}
}
