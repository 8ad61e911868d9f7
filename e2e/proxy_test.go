package e2e

// hashlb-proxy for real: the command built from source, run as a process on
// a free loopback port with the module built from source, forwarding real
// HTTP requests to real loopback backends.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/lbcore"
)

// buildProxy builds hashlb-proxy from source into a directory removed at
// t's cleanup and returns the binary's path.
func buildProxy(t *testing.T) string { return buildCommand(t, "./hostsim/cmd/hashlb-proxy") }

// buildCommand builds the command package pkg (relative to the repository
// root) into a directory removed at t's cleanup and returns the binary's path.
func buildCommand(t *testing.T, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = repoRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
	return bin
}

// backend is a loopback HTTP server that answers with its name.
type backend struct {
	name string
	addr string
	srv  *httptest.Server
}

// startBackends starts one backend per name, stopped at t's cleanup.
func startBackends(t *testing.T, names ...string) []backend {
	t.Helper()
	var bs []backend
	for _, name := range names {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("x-seen-upstream", strings.Join(r.Header.Values("x-envoy-original-dst-host"), "|"))
			w.Header().Set("x-seen-service", strings.Join(r.Header.Values("x-hashlb-service"), "|"))
			io.WriteString(w, name)
		}))
		t.Cleanup(srv.Close)
		bs = append(bs, backend{name: name, addr: srv.Listener.Addr().String(), srv: srv})
	}
	return bs
}

// proxyConfig is a hashlb config over bs; disabled names services taken out.
func proxyConfig(method, extra string, bs []backend, disabled ...string) []byte {
	var svcs []string
	for _, b := range bs {
		enabled := true
		for _, d := range disabled {
			enabled = enabled && d != b.name
		}
		svcs = append(svcs, fmt.Sprintf(`{"name": %q, "address": %q, "enabled": %t}`, b.name, b.addr, enabled))
	}
	return []byte(fmt.Sprintf(`{"lbMethod": %q, %s "debugHeader": true, "services": [%s]}`, method, extra, strings.Join(svcs, ", ")))
}

var listenLine = regexp.MustCompile(`^hashlb-proxy: .* on http://(\S+), `)

// runProxy starts hashlb-proxy (the binary bin) with config on a free
// loopback port, its own demo backends off, and returns its base URL once it
// accepts connections. The process is killed at t's cleanup.
func runProxy(t *testing.T, bin string, config []byte) string {
	t.Helper()
	return "http://" + startProxy(t, bin, config, listenLine, "-listen", "127.0.0.1:0")
}

// tempFile writes data to a file named name in a new temporary directory
// of t and returns its path.
func tempFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// startProxy starts hashlb-proxy with config and args (its listening flag),
// two workers and no demo backends, and returns the address its stdout
// line matching listen names, once it accepts connections. The process is
// killed at t's cleanup.
func startProxy(t *testing.T, bin string, config []byte, listen *regexp.Regexp, args ...string) string {
	t.Helper()
	wasmFile, cfgFile := tempFile(t, "hashlb.wasm", module(t)), tempFile(t, "config.json", config)
	cmd := exec.Command(bin, append([]string{"-wasm", wasmFile, "-config", cfgFile, "-workers", "2", "-backends=false"}, args...)...)
	stderr := &envoyrun.SyncBuffer{}
	cmd.Stderr = stderr
	lines := startWatched(t, cmd, listen.MatchString)
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatalf("hashlb-proxy %v exited before listening: %s", args, stderr.String())
		}
		a := listen.FindStringSubmatch(line)[1]
		conn, err := net.DialTimeout("tcp", a, 5*time.Second)
		if err != nil {
			t.Fatalf("hashlb-proxy on %s does not accept: %v", a, err)
		}
		conn.Close()
		return a
	case <-time.After(60 * time.Second):
		t.Fatalf("hashlb-proxy %v did not listen within 60s: %s", args, stderr.String())
	}
	return ""
}

// startWatched starts cmd, killed at t's cleanup, and returns the lines of
// its stdout that match, in a channel closed when its stdout ends.
func startWatched(t *testing.T, cmd *exec.Cmd, match func(line string) bool) <-chan string {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if match(sc.Text()) {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	return lines
}

// proxyReply is what a client got back through the proxy.
type proxyReply struct {
	status  int
	body    string
	header  http.Header
	backend string // the name the backend answered with, "" for a local reply
}

// proxyGet sends GET url with headers (name, value, ...) through c.
func proxyGet(t *testing.T, c *http.Client, url string, headers ...string) proxyReply {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := proxyReply{status: resp.StatusCode, body: string(b), header: resp.Header}
	if r.status == 200 {
		r.backend = r.body
	}
	return r
}

// stickyBackend sends n requests and returns the one backend that answered all of them.
func stickyBackend(t *testing.T, c *http.Client, n int, url string, headers ...string) string {
	t.Helper()
	seen := map[string]int{}
	for i := 0; i < n; i++ {
		r := proxyGet(t, c, url, headers...)
		if r.status != 200 {
			t.Fatalf("GET %s %q: %d %q", url, headers, r.status, r.body)
		}
		seen[r.backend]++
	}
	if len(seen) != 1 {
		t.Fatalf("GET %s %q ×%d reached %v, want one backend", url, headers, n, seen)
	}
	for b := range seen {
		return b
	}
	return ""
}

// spreadKeys sends keys 0 to count-1 through reach, key 0 in 50 requests
// and each other key in 5 (reach(i, n) returns the one backend key i
// reached in n requests), and fails unless the keys reach at least two
// backends; noun names the keys in the error.
func spreadKeys(t *testing.T, count int, noun string, reach func(i, n int) string) {
	t.Helper()
	seen := map[string]bool{}
	for i := 0; i < count; i++ {
		n := 5
		if i == 0 {
			n = 50
		}
		seen[reach(i, n)] = true
	}
	if len(seen) < 2 {
		t.Errorf("%d %s all reached %v: the method does not spread them", count, noun, seen)
	}
}

func TestProxy(t *testing.T) {
	module(t) // build both before the parallel subtests
	bin := buildProxy(t)
	client := &http.Client{Timeout: 10 * time.Second}
	// A new connection per request: new source ports, the same source IP.
	fresh := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

	t.Run("URLHASH", func(t *testing.T) {
		t.Parallel()
		bs := startBackends(t, "b1", "b2", "b3", "b4")
		config := proxyConfig("URLHASH", "", bs)
		base := runProxy(t, bin, config)
		cfg, err := lbcore.ParseConfig(config)
		if err != nil {
			t.Fatal(err)
		}
		oracle := lbcore.NewBalancer(cfg, 0)
		spreadKeys(t, 12, "paths", func(i, n int) string {
			path := fmt.Sprintf("/items/%d?view=full", i)
			got := stickyBackend(t, client, n, base+path)
			d := oracle.Decide(&lbcore.Request{Target: path}, time.Now())
			if want := cfg.Services[d.At(0)].Name; got != want {
				t.Errorf("GET %s reached %s, lbcore chooses %s", path, got, want)
			}
			return got
		})
	})

	t.Run("forged-upstream-header", func(t *testing.T) {
		t.Parallel()
		bs := startBackends(t, "b1", "b2", "b3")
		base := runProxy(t, bin, proxyConfig("URLHASH", "", bs))
		for i := 0; i < 10; i++ {
			url := fmt.Sprintf("%s/forged/%d", base, i)
			plain := proxyGet(t, client, url)
			addr := map[string]string{}
			for _, b := range bs {
				addr[b.name] = b.addr
			}
			if got := plain.header.Get("x-seen-upstream"); got != addr[plain.backend] {
				t.Fatalf("%s: backend %s got x-envoy-original-dst-host %q, want its own address %q", url, plain.backend, got, addr[plain.backend])
			}
			for _, b := range bs {
				r := proxyGet(t, client, url, "X-Envoy-Original-Dst-Host", b.addr, "x-envoy-original-dst-host", "127.0.0.1:1", "X-Hashlb-Service", b.name)
				if r.backend != plain.backend {
					t.Errorf("%s with a forged upstream %s reached %s, without it %s", url, b.addr, r.backend, plain.backend)
				}
				if got := r.header.Get("x-seen-upstream"); got != addr[plain.backend] {
					t.Errorf("%s: backend got x-envoy-original-dst-host %q, want only %q", url, got, addr[plain.backend])
				}
				if got := r.header.Get("x-seen-service"); got != plain.backend {
					t.Errorf("%s: backend got x-hashlb-service %q, want only %q", url, got, plain.backend)
				}
			}
		}
	})

	t.Run("SOURCEIPHASH", func(t *testing.T) {
		t.Parallel()
		bs := startBackends(t, "b1", "b2", "b3", "b4")
		base := runProxy(t, bin, proxyConfig("SOURCEIPHASH", "", bs))
		// Every request comes from 127.0.0.1, from many source ports and paths.
		seen := map[string]int{}
		for i := 0; i < 50; i++ {
			r := proxyGet(t, fresh, fmt.Sprintf("%s/src/%d", base, i))
			if r.status != 200 {
				t.Fatalf("%d %q", r.status, r.body)
			}
			seen[r.backend]++
		}
		if len(seen) != 1 {
			t.Errorf("50 requests from 127.0.0.1 reached %v, want one backend", seen)
		}
	})

	t.Run("CALLIDHASH", func(t *testing.T) {
		t.Parallel()
		bs := startBackends(t, "b1", "b2", "b3", "b4")
		base := runProxy(t, bin, proxyConfig("CALLIDHASH", "", bs))
		spreadKeys(t, 10, "Call-IDs", func(i, n int) string {
			id := fmt.Sprintf("call-%d@pbx.example.com", i)
			b := stickyBackend(t, fresh, n, fmt.Sprintf("%s/sip/%d", base, i), "Call-ID", id)
			if i%2 == 0 { // the compact form is the same key
				if c := stickyBackend(t, client, 3, base+"/other", "i", id); c != b {
					t.Errorf("Call-ID %q reached %s, compact i %s", id, b, c)
				}
			}
			return b
		})
	})

	t.Run("TOKEN", func(t *testing.T) {
		t.Parallel()
		bs := startBackends(t, "b1", "b2", "b3", "b4")
		base := runProxy(t, bin, proxyConfig("TOKEN", `"token": "${request.header.x-tenant||request.cookie.tenant}",`, bs))
		spreadKeys(t, 10, "tenants", func(i, n int) string {
			tenant := fmt.Sprintf("tenant-%d", i)
			b := stickyBackend(t, fresh, n, fmt.Sprintf("%s/t/%d", base, i), "x-tenant", tenant)
			if c := stickyBackend(t, client, 3, base+"/cookie", "cookie", "a=1; tenant="+tenant); c != b {
				t.Errorf("tenant %q in a header reached %s, in a cookie %s", tenant, b, c)
			}
			return b
		})
	})

	t.Run("no-healthy-service", func(t *testing.T) {
		t.Parallel()
		bs := startBackends(t, "b1", "b2")
		base := runProxy(t, bin, proxyConfig("URLHASH", "", bs, "b1", "b2"))
		for _, c := range []*http.Client{client, fresh} {
			r := proxyGet(t, c, base+"/anything")
			if r.status != 503 || r.body != "no healthy service" {
				t.Errorf("all services disabled: %d %q, want a local 503 %q", r.status, r.body, "no healthy service")
			}
			if d := r.header.Get("x-hashlb-decision"); !strings.Contains(d, "reason=no_service") {
				t.Errorf("x-hashlb-decision %q, want reason=no_service", d)
			}
		}
	})

	t.Run("disable-moves-only-its-keys", func(t *testing.T) {
		t.Parallel()
		bs := startBackends(t, "b1", "b2", "b3", "b4")
		paths := make([]string, 200)
		for i := range paths {
			paths[i] = fmt.Sprintf("/catalog/%d/item?id=%d", i*7, i)
		}
		route := func(base string) map[string]string {
			m := map[string]string{}
			for _, p := range paths {
				r := proxyGet(t, client, base+p)
				if r.status != 200 {
					t.Fatalf("GET %s: %d %q", p, r.status, r.body)
				}
				m[p] = r.backend
			}
			return m
		}
		before := route(runProxy(t, bin, proxyConfig("URLHASH", "", bs)))
		// The operator disables b2 and restarts the proxy with the new config.
		after := route(runProxy(t, bin, proxyConfig("URLHASH", "", bs, "b2")))
		onB2, moved := 0, 0
		for _, p := range paths {
			switch {
			case before[p] == "b2":
				onB2++
				if after[p] == "b2" {
					t.Errorf("%s still reached the disabled b2", p)
				}
			case after[p] != before[p]:
				moved++
				t.Errorf("%s moved from %s to %s, but only b2's keys may move", p, before[p], after[p])
			}
		}
		t.Logf("200 paths: %d were on b2 and moved, %d others moved", onB2, moved)
		if onB2 == 0 {
			t.Fatalf("no path was on b2: %v", before)
		}
	})
}
