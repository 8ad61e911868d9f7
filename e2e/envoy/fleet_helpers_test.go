package envoy

// Helpers of the real-Envoy fleet tests: requests with a client id through
// an Envoy (each on a new connection, so the kernel spreads them over the
// workers), a steady load that records every request, the split measures of
// the hostsim fleet fault tests (e2e/fleet_faults_helpers_test.go:
// lastSplit, splitAfter) over those records, and a TCP recorder in front of
// etcd that keeps the bytes Envoy sends, can hold etcd's answers, and can
// stop listening.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/fleetsplit"
)

// fleetHTTP sends every request on a new connection: Envoy's listener
// hands each accepted connection to one worker, so new connections reach
// all workers, as many clients would.
var fleetHTTP = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
}

// fleetReply is one request's outcome.
type fleetReply struct {
	backend string // the echo backend that answered
	service string // the x-hashlb-service header it received
	took    time.Duration
}

// fleetAsker sends one request of key id: fleetAsk through the Wasm
// filter's Envoys, policyFleetAsk through the policy's.
type fleetAsker func(url, id, path string) (fleetReply, error)

// fleetGet sends GET path with x-client-id id and the header pairs hdr to
// url on a new connection: the answer's status, headers and body, and how
// long it took.
func fleetGet(url, id, path string, hdr ...string) (*http.Response, []byte, time.Duration, error) {
	req, err := http.NewRequest("GET", url+path, nil)
	if err != nil {
		return nil, nil, 0, err
	}
	req.Host = "fleet"
	req.Header.Set("x-client-id", id)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	start := time.Now()
	resp, err := fleetHTTP.Do(req)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("GET %s (%s): %v", path, id, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body, time.Since(start), nil
}

// fleetAsk sends GET path with x-client-id id to url and returns which
// backend answered. Anything but a 200 from an echo backend that received
// hashlb's header naming itself is an error.
func fleetAsk(url, id, path string) (fleetReply, error) {
	resp, body, took, err := fleetGet(url, id, path)
	if err != nil {
		return fleetReply{}, err
	}
	rep := fleetReply{took: took}
	var echo envoyrun.Echo
	if resp.StatusCode != 200 || json.Unmarshal(body, &echo) != nil {
		return rep, fmt.Errorf("GET %s (%s): %d %s", path, id, resp.StatusCode, body)
	}
	rep.backend = echo.Backend
	if s := echo.Header["X-Hashlb-Service"]; len(s) == 1 {
		rep.service = s[0]
	}
	if rep.service != rep.backend {
		return rep, fmt.Errorf("GET %s (%s): backend %s received x-hashlb-service %q", path, id, rep.backend, echo.Header["X-Hashlb-Service"])
	}
	return rep, nil
}

// fleetPath is a random request path: hashlb's URLHASH proposes a service
// from the path, so each Envoy meeting a key for the first time proposes
// its own, and only the fleet level makes them agree.
func fleetPath(rng *rand.Rand) string { return fmt.Sprintf("/fleet/%x", rng.Uint64()) }

// fleetKeys are n client ids.
func fleetKeys(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return ks
}

// fleetRec is one request of a load.
type fleetRec struct {
	at      time.Time // when it was answered
	key     string
	envoy   int
	backend string
	took    time.Duration
}

// fleetJob is one request to send: key through Envoy envoy.
type fleetJob struct {
	key   string
	envoy int
}

// everyEnvoy is every key through each of n Envoys, in an order shuffled by
// seed.
func everyEnvoy(keys []string, n int, seed uint64) []fleetJob {
	var jobs []fleetJob
	for _, k := range keys {
		for e := range n {
			jobs = append(jobs, fleetJob{k, e})
		}
	}
	rand.New(rand.NewPCG(seed, seed+1)).Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	return jobs
}

// fleetSend sends jobs from conc goroutines with ask and returns every
// answer; the first failed request is returned as the error (the others
// still run).
func fleetSend(ask fleetAsker, urls []string, jobs []fleetJob, conc int, seed uint64) ([]fleetRec, error) {
	ch := make(chan fleetJob)
	var mu sync.Mutex
	var recs []fleetRec
	var first error
	var wg sync.WaitGroup
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for j := range ch {
				rep, err := ask(urls[j.envoy], j.key, fleetPath(rng))
				mu.Lock()
				if err != nil && first == nil {
					first = fmt.Errorf("through Envoy %d: %v", j.envoy, err)
				}
				if err == nil {
					recs = append(recs, fleetRec{at: time.Now(), key: j.key, envoy: j.envoy, backend: rep.backend, took: rep.took})
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	return recs, first
}

// fleetLoad is a steady load: rate requests per second in all, each for a
// random key of the current key set through a random Envoy in service (a
// request drawn for one out of it goes to the next in service), sent with
// ask, until stop.
type fleetLoad struct {
	mu     sync.Mutex
	keys   []string
	urls   []string // "" for an Envoy out of service
	recs   []fleetRec
	errs   []error
	cancel chan struct{}
	wg     sync.WaitGroup
	sent   atomic.Int64
}

func startFleetLoad(ask fleetAsker, urls []string, keys []string, rate int) *fleetLoad {
	l := &fleetLoad{keys: keys, urls: slices.Clone(urls), cancel: make(chan struct{})}
	const senders = 4
	for g := range senders {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 27))
			every := time.Second * senders / time.Duration(rate)
			next := time.Now()
			for {
				next = next.Add(every)
				select {
				case <-l.cancel:
					return
				case <-time.After(time.Until(next)):
				}
				l.mu.Lock()
				key := l.keys[rng.IntN(len(l.keys))]
				e := rng.IntN(len(l.urls))
				for k := 0; k < len(l.urls) && l.urls[e] == ""; k++ {
					e = (e + 1) % len(l.urls)
				}
				url := l.urls[e]
				l.mu.Unlock()
				l.sent.Add(1)
				rep, err := ask(url, key, fleetPath(rng))
				l.mu.Lock()
				if err != nil {
					l.errs = append(l.errs, fmt.Errorf("through Envoy %d: %v", e, err))
				} else {
					l.recs = append(l.recs, fleetRec{at: time.Now(), key: key, envoy: e, backend: rep.backend, took: rep.took})
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// setKeys changes the key set the load draws from.
func (l *fleetLoad) setKeys(keys []string) {
	l.mu.Lock()
	l.keys = keys
	l.mu.Unlock()
}

// setURL puts Envoy i in service at url, or takes it out ("").
func (l *fleetLoad) setURL(i int, url string) {
	l.mu.Lock()
	l.urls[i] = url
	l.mu.Unlock()
}

// stop ends the load and returns its records and failed requests.
func (l *fleetLoad) stop() ([]fleetRec, []error) {
	close(l.cancel)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recs, l.errs
}

// fleetSplitKeys counts the keys of recs answered by two backends through
// different Envoys, with an example. This is a split as the hostsim fault
// tests count it (splitAfter): one client, two services, depending on the
// proxy it reached.
func fleetSplitKeys(recs []fleetRec) (n int, example string) {
	got := map[string]map[string][]int{}
	for _, r := range recs {
		if got[r.key] == nil {
			got[r.key] = map[string][]int{}
		}
		got[r.key][r.backend] = append(got[r.key][r.backend], r.envoy)
	}
	for k, bs := range got {
		if len(bs) > 1 {
			n++
			example = fmt.Sprintf("%s: backend → Envoys %v", k, bs)
		}
	}
	return n, example
}

// fleetLastSplit is fleetsplit.Last (the hostsim fault tests'
// measure) over the requests: each Envoy is a proxy. Its time is when the
// fleet converged.
func fleetLastSplit(recs []fleetRec, from time.Time) (last time.Time, example string) {
	ps := make([]fleetsplit.Placement, len(recs))
	for i, r := range recs {
		ps[i] = fleetsplit.Placement{At: r.at, Key: r.key, Proxy: r.envoy, Service: r.backend}
	}
	return fleetsplit.Last(ps, from)
}

// fleetRecorder forwards TCP connections to etcd and keeps every byte Envoy
// sends, so a test can read the HTTP requests of proxy_http_call as they
// went on the wire. It can hold etcd's answers (hold) and stop listening
// (down), as a dead etcd does, and listen again on the same port (up).
type fleetRecorder struct {
	t      testing.TB
	addr   string
	target string
	hold   atomic.Int64 // how long each answer chunk is held
	mu     sync.Mutex
	ln     net.Listener
	sent   []*bytes.Buffer // per connection, what Envoy sent
	conns  []net.Conn
}

func startFleetRecorder(t testing.TB, target string) *fleetRecorder {
	t.Helper()
	r := &fleetRecorder{t: t, target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.serve(ln)
	t.Cleanup(r.down)
	return r
}

func (r *fleetRecorder) serve(ln net.Listener) {
	r.mu.Lock()
	r.ln = ln
	r.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", r.target)
			if err != nil {
				in.Close()
				continue
			}
			buf := &bytes.Buffer{}
			r.mu.Lock()
			r.sent = append(r.sent, buf)
			r.conns = append(r.conns, in, out)
			r.mu.Unlock()
			go relay(out, in, func(b []byte) { // Envoy → etcd, kept
				r.mu.Lock()
				buf.Write(b)
				r.mu.Unlock()
			})
			go relay(in, out, func([]byte) { // etcd → Envoy, held
				time.Sleep(time.Duration(r.hold.Load()))
			})
		}
	}()
}

// relay copies src to dst until either fails, calling each with every
// read before writing it, and closes dst.
func relay(dst, src net.Conn, each func([]byte)) {
	defer dst.Close()
	b := make([]byte, 32<<10)
	for {
		n, err := src.Read(b)
		if n > 0 {
			each(b[:n])
			if _, werr := dst.Write(b[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// down closes the listener and every connection: connections to the port
// are refused from now on.
func (r *fleetRecorder) down() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln != nil {
		r.ln.Close()
		r.ln = nil
	}
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

// up listens again on the same port.
func (r *fleetRecorder) up() {
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.serve(ln)
}

// fleetWire is one HTTP request as Envoy sent it to etcd.
type fleetWire struct {
	method, path string
	host         string
	headers      []string // "name: value" lines as on the wire, in order
	body         string
}

// requests parses everything Envoy has sent so far as HTTP/1.1 requests.
func (r *fleetRecorder) requests() []fleetWire {
	r.mu.Lock()
	var raws [][]byte
	for _, b := range r.sent {
		raws = append(raws, bytes.Clone(b.Bytes()))
	}
	r.mu.Unlock()
	var out []fleetWire
	for _, raw := range raws {
		for len(raw) > 0 {
			// The header block as sent (names in their wire case), then
			// the request parsed from the same bytes; every request of
			// proxy_http_call has a Content-Length (context.cc sets it).
			end := bytes.Index(raw, []byte("\r\n\r\n"))
			if end < 0 {
				break
			}
			lines := strings.Split(string(raw[:end]), "\r\n")
			req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
			if err != nil {
				break
			}
			n := end + 4 + max(int(req.ContentLength), 0)
			if n > len(raw) {
				break
			}
			out = append(out, fleetWire{method: req.Method, path: req.URL.Path, host: req.Host, headers: lines[1:], body: string(raw[end+4 : n])})
			raw = raw[n:]
		}
	}
	return out
}

// etcdSlow asks every etcd member at eps for one key every 100 ms, as the
// fleets' calls ask (POST /v3/kv/range on etcd's JSON gateway), and keeps
// when an answer last took longer than timeout or failed. A fleet's call
// that ran out of its timeout then had its key decided locally, by design
// (docs/persistence.md, "New keys once etcd answers again"): a split may
// last until the settle bound after the last such moment, which on a
// loaded machine can come after a fault's heal, with no fault at all.
type etcdSlow struct {
	mu   sync.Mutex
	last time.Time
	stop chan struct{}
	wg   sync.WaitGroup
}

// watchEtcdSlow starts an etcdSlow over eps with the fleet's call timeout;
// it stops when the test ends.
func watchEtcdSlow(t testing.TB, eps []string, timeout time.Duration) *etcdSlow {
	w := &etcdSlow{stop: make(chan struct{})}
	client := &http.Client{Timeout: 2 * time.Second}
	body := `{"key":"` + "L2hhc2hsYi1wcm9iZQ==" + `"}` // "/hashlb-probe"
	for _, ep := range eps {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-w.stop:
					return
				case <-tick.C:
				}
				began := time.Now()
				resp, err := client.Post("http://"+ep+"/v3/kv/range", "application/json", strings.NewReader(body))
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if end := time.Now(); err != nil || end.Sub(began) > timeout {
					w.mu.Lock()
					w.last = end
					w.mu.Unlock()
				}
			}
		}()
	}
	t.Cleanup(w.close)
	return w
}

// lastSlow is when an answer last took longer than the timeout, or failed.
func (w *etcdSlow) lastSlow() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

func (w *etcdSlow) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}
