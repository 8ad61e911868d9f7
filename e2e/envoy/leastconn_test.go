package envoy

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
)

const leastConnPlugin = `"lbMethod": "LEASTCONNECTION"`

// TestEnvoyLeastConnectionAcrossWorkers: LEASTCONNECTION with backends that
// hold every request until the test lets it go.
//
//  1. Six requests as concurrent streams of one HTTP/2 connection (one
//     worker, whose own counts are exact at once): two on each service.
//  2. b1's two end; the other workers learn b2's and b3's two on their
//     ticks (the gauge hashlb.service.<name>.active shows them once the
//     holding worker flushed).
//  3. Eight requests on eight connections, which Envoy spreads over its 4
//     workers: each worker sees b1 idle and b2, b3 at 2 (the shared
//     counts), so b1 takes more of them than b2 and than b3 (exactly how
//     many depends on how the kernel spread the connections: a worker only
//     sees its own new requests until its next tick).
//  4. Everything ends: every active gauge returns to 0.
func TestEnvoyLeastConnectionAcrossWorkers(t *testing.T) {
	t.Parallel()
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		var (
			gates    [3]chan struct{}
			received [3]atomic.Int64
		)
		for i := range gates {
			gates[i] = make(chan struct{})
		}
		r := startRig(t, bin, leastConnPlugin, func(bs []*envoyrun.Backend) {
			for i, b := range bs {
				b.OnRequest = func(*http.Request) {
					received[i].Add(1)
					<-gates[i]
				}
			}
		}, nil)
		var once [3]sync.Once
		release := func(i int) { once[i].Do(func() { close(gates[i]) }) }
		t.Cleanup(func() {
			for i := range gates {
				release(i)
			}
		})
		waitReceived := func(total int64) {
			t.Helper()
			eventually(t, func() string {
				return fmt.Sprintf("backends received %d, %d, %d requests; want %d in all", received[0].Load(), received[1].Load(), received[2].Load(), total)
			}, func() bool { return received[0].Load()+received[1].Load()+received[2].Load() >= total })
		}
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		send := func(c *http.Client, path string) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := c.Get(r.url + path)
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs <- fmt.Errorf("GET %s: %d", path, resp.StatusCode)
				}
			}()
		}

		// 1. One HTTP/2 connection: one worker.
		var protos http.Protocols
		protos.SetUnencryptedHTTP2(true)
		h2 := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Protocols: &protos}}
		defer h2.CloseIdleConnections()
		for i := range 6 {
			send(h2, fmt.Sprintf("/w1/%d", i))
		}
		waitReceived(6)
		time.Sleep(100 * time.Millisecond) // nothing more is coming
		for i := range received {
			if n := received[i].Load(); n != 2 {
				t.Errorf("wave 1 (one worker): %s holds %d requests, want 2 of 6", r.bs[i].Name, n)
			}
		}
		// 2. b1's end; the others stay.
		release(0)
		for i, want := range []int64{0, 2, 2} {
			waitStatIs(t, r.e, "wasmcustom.hashlb.service."+r.bs[i].Name+".active", func(v int64) bool { return v == want })
		}
		tickWait() // every worker's tick takes the counts in
		var w1 [3]int64
		for i := range received {
			w1[i] = received[i].Load()
		}
		cx0 := workerConnections(t, r)

		// 3. Eight connections over the workers.
		for i := range 8 {
			send(r.c, fmt.Sprintf("/w2/%d", i))
		}
		waitReceived(6 + 8)
		time.Sleep(100 * time.Millisecond)
		var w2 [3]int64
		for i := range received {
			w2[i] = received[i].Load() - w1[i]
		}
		cx := workerConnections(t, r)
		for w := range cx {
			cx[w] -= cx0[w]
		}
		t.Logf("wave 2: b1 %d, b2 %d, b3 %d of 8; connections per worker %v", w2[0], w2[1], w2[2], cx)
		if w2[0] <= w2[1] || w2[0] <= w2[2] || w2[0] < 4 {
			t.Errorf("wave 2: b1 (idle) took %d, b2 (2 active) %d, b3 (2 active) %d: least connection across workers wants b1 most, ≥ 4", w2[0], w2[1], w2[2])
		}
		if n := r.e.Stat(t, "wasmcustom.hashlb.decision.least_connection"); n < 6 {
			t.Errorf("decision.least_connection = %d", n)
		}

		// 4. All end; every count returns to 0.
		for i := range gates {
			release(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for _, b := range r.bs {
			waitStatIs(t, r.e, "wasmcustom.hashlb.service."+b.Name+".active", func(v int64) bool { return v == 0 })
		}
		// The request counters lag by up to a tick (a request that began and
		// ended within one tick leaves the gauge as it was).
		var sum int64
		eventually(t, func() string { return fmt.Sprintf("requests counters sum to %d, want 14", sum) }, func() bool {
			sum = 0
			for _, b := range r.bs {
				sum += r.e.Stat(t, "wasmcustom.hashlb.service."+b.Name+".requests")
			}
			return sum == 14
		})
	})
}

var workerCxRE = regexp.MustCompile(`^listener\.127\.0\.0\.1_[0-9]+\.worker_([0-9]+)\.downstream_cx_total$`)

// workerConnections is each worker's downstream connections so far on the
// hashlb listener (Envoy's per-worker listener stats), by worker index.
func workerConnections(t testing.TB, r *rig) []int64 {
	t.Helper()
	s, err := r.e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range s {
		if workerCxRE.MatchString(n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := make([]int64, len(names))
	for i, n := range names {
		out[i] = s[n]
	}
	return out
}
