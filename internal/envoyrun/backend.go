package envoyrun

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// Backend is an HTTP upstream on loopback that answers every request with
// what it received, as JSON (Echo): its name, the method, path and every
// header, so a test sees exactly what Envoy forwarded. It can be told to
// fail (answer a status) and be stopped and started again on the same port.
type Backend struct {
	Name string
	Addr string // 127.0.0.1:PORT

	requests atomic.Int64
	status   atomic.Int64 // 0: answer 200
	health   atomic.Int64 // 0: health probes answer as requests do
	mu       sync.Mutex
	srv      *http.Server
	// OnRequest, when set, runs before the answer (a test's hook: block,
	// count in-flight requests).
	OnRequest func(r *http.Request)
	cookie    atomic.Pointer[string] // SetCookie's
}

// SetCookie makes every later answer carry the header Set-Cookie: v (a
// backend's own cookie, beside one a proxy adds); "" stops it.
func (b *Backend) SetCookie(v string) { b.cookie.Store(&v) }

// Echo is a backend's answer.
type Echo struct {
	Backend string              `json:"backend"`
	Method  string              `json:"method"`
	Path    string              `json:"path"`
	Host    string              `json:"host"`
	Header  map[string][]string `json:"header"`
}

// StartBackend starts a backend on a free loopback port; it stops when the
// test ends.
func StartBackend(t testing.TB, name string) *Backend {
	t.Helper()
	b := &Backend{Name: name}
	if err := b.listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return b
}

// StartBackends starts n backends named b1…bn.
func StartBackends(t testing.TB, n int) []*Backend {
	bs := make([]*Backend, n)
	for i := range bs {
		bs[i] = StartBackend(t, fmt.Sprintf("b%d", i+1))
	}
	return bs
}

func (b *Backend) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	b.Addr = ln.Addr().String()
	// Headers up to Envoy's own maximum (max_request_headers_kb 8192) reach
	// the handler, so a test can see what Envoy forwarded of a large request.
	srv := &http.Server{Handler: http.HandlerFunc(b.serve), MaxHeaderBytes: 9 << 20}
	b.mu.Lock()
	b.srv = srv
	b.mu.Unlock()
	go srv.Serve(ln)
	return nil
}

func (b *Backend) serve(w http.ResponseWriter, r *http.Request) {
	b.requests.Add(1)
	if b.OnRequest != nil {
		b.OnRequest(r)
	}
	if r.URL.Path == "/healthz" || r.URL.Path == "/health" {
		if st := b.health.Load(); st != 0 {
			w.WriteHeader(int(st))
			return
		}
		if st := b.status.Load(); st != 0 {
			w.WriteHeader(int(st))
			return
		}
		w.WriteHeader(200)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Backend", b.Name)
	if c := b.cookie.Load(); c != nil && *c != "" {
		w.Header().Add("Set-Cookie", *c)
	}
	if st := b.status.Load(); st != 0 {
		w.WriteHeader(int(st))
	}
	json.NewEncoder(w).Encode(Echo{Backend: b.Name, Method: r.Method, Path: r.URL.RequestURI(), Host: r.Host, Header: r.Header})
}

// Port is the backend's port.
func (b *Backend) Port() int {
	_, p, _ := net.SplitHostPort(b.Addr)
	n, _ := strconv.Atoi(p)
	return n
}

// Requests is how many requests (health probes included) it has received.
func (b *Backend) Requests() int64 { return b.requests.Load() }

// Fail makes every later answer (health probes too) have status; 0 heals.
func (b *Backend) Fail(status int) { b.status.Store(int64(status)) }

// FailHealth makes health probes alone answer status, while requests are
// still served (a host an active health check takes out that would have
// answered); 0 heals.
func (b *Backend) FailHealth(status int) { b.health.Store(int64(status)) }

// Stop closes the backend: later connections are refused.
func (b *Backend) Stop() {
	b.mu.Lock()
	srv := b.srv
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// Restart listens again on the same address.
func (b *Backend) Restart() error { return b.listen(b.Addr) }

var portRE = regexp.MustCompile(`port_value: *([0-9]+)\b|127\.0\.0\.1:([0-9]+)\b`)

// Ports rewrites the loopback ports of a shipped file: each old port of
// ports becomes its new port, both as `port_value: N` (YAML) and as
// `127.0.0.1:N` (a plugin config's address). Every old port must occur.
// Giving 0 as the new port of a listener or the admin lets the kernel
// choose (Envoy.Listener reads it back).
func Ports(t testing.TB, file []byte, ports map[int]int) []byte {
	t.Helper()
	seen := map[int]bool{}
	out := portRE.ReplaceAllFunc(file, func(m []byte) []byte {
		sm := portRE.FindSubmatch(m)
		old := sm[1]
		if old == nil {
			old = sm[2]
		}
		p, _ := strconv.Atoi(string(old))
		np, ok := ports[p]
		if !ok {
			return m
		}
		seen[p] = true
		if sm[1] != nil {
			return []byte("port_value: " + strconv.Itoa(np))
		}
		return []byte("127.0.0.1:" + strconv.Itoa(np))
	})
	for p := range ports {
		if !seen[p] {
			t.Fatalf("port %d does not occur in the file", p)
		}
	}
	return out
}
