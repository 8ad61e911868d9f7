package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
)

var (
	asyncOnce sync.Once
	asyncPath string
	asyncErr  error
)

// asyncModule builds hostsim's async test module once per run (it pauses
// each request on a callout to the cluster named by x-cluster and resumes it
// from the response, setting x-answer: STATUS:BODY) and returns its path.
func asyncModule(t *testing.T) string {
	t.Helper()
	asyncOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hashlb-proxy-test-")
		if err != nil {
			asyncErr = err
			return
		}
		asyncPath = filepath.Join(dir, "async.wasm")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", asyncPath, "../../testdata/async")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if msg, err := cmd.CombinedOutput(); err != nil {
			asyncErr = fmt.Errorf("building the async test module: %v\n%s", err, msg)
		}
	})
	if asyncErr != nil {
		t.Fatal(asyncErr)
	}
	return asyncPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if asyncPath != "" {
		os.RemoveAll(filepath.Dir(asyncPath))
	}
	os.Exit(code)
}

// echoBackend answers with the x-answer header it got.
func echoBackend(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream got x-answer %s", r.Header.Get("x-answer"))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func get(t *testing.T, url string, headers ...string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestPausedRequestsWaitForTheModule(t *testing.T) {
	wasm, err := os.ReadFile(asyncModule(t))
	if err != nil {
		t.Fatal(err)
	}
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.TrimPrefix(r.URL.Path, "/"))
	}))
	defer store.Close()
	p := &proxy{header: "x-envoy-original-dst-host"}
	h, err := hostsim.New(context.Background(), wasm, hostsim.Config{
		Workers: 2, RealTime: true, HTTPCall: p.callout,
		Clusters: map[string]string{"store": strings.TrimPrefix(store.URL, "http://")},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	p.host = h
	srv := httptest.NewServer(p)
	defer srv.Close()
	upstream := echoBackend(t)

	tests := []struct {
		name, path string
		status     int
		body       string
		reset      bool
	}{
		{name: "resumed", path: "/v1", status: 200, body: "upstream got x-answer 200:v1"},
		{name: "answered locally", path: "/local", status: 418, body: "from the store"},
		{name: "closed", path: "/close", reset: true},
		{name: "not paused", path: "/pass", status: 200, body: "upstream got x-answer "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body, err := get(t, srv.URL+tc.path, "x-cluster", "store", "x-envoy-original-dst-host", upstream)
			if tc.reset {
				if err == nil {
					t.Fatalf("GET %s = %d %q, want the connection reset", tc.path, status, body)
				}
				return
			}
			if err != nil || status != tc.status || body != tc.body {
				t.Fatalf("GET %s = %d %q (%v), want %d %q", tc.path, status, body, err, tc.status, tc.body)
			}
		})
	}
}

func TestClusterFlag(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // String() of the result, or the error's text
	}{
		{"two", []string{"etcd=127.0.0.1:2379", "store=localhost:80"}, "etcd=127.0.0.1:2379,store=localhost:80"},
		{"no address", []string{"etcd"}, `"etcd": want NAME=HOST:PORT`},
		{"no port", []string{"etcd=127.0.0.1"}, `"etcd=127.0.0.1": want NAME=HOST:PORT`},
		{"twice", []string{"a=h:1", "a=h:2"}, "cluster a given twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := clusterFlags{}
			var got string
			for _, a := range tc.args {
				if err := c.Set(a); err != nil {
					got = err.Error()
					break
				}
			}
			if got == "" {
				got = c.String()
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("-cluster %v = %q, want %q", tc.args, got, tc.want)
			}
		})
	}
}

func TestFleetAddrs(t *testing.T) {
	got, err := fleetAddrs("127.0.0.1:10000", 3)
	if err != nil || strings.Join(got, " ") != "127.0.0.1:10000 127.0.0.1:10001 127.0.0.1:10002" {
		t.Fatalf("fleetAddrs(127.0.0.1:10000, 3) = %v, %v", got, err)
	}
	if got, _ := fleetAddrs("127.0.0.1:0", 2); strings.Join(got, " ") != "127.0.0.1:0 127.0.0.1:0" {
		t.Fatalf("fleetAddrs(127.0.0.1:0, 2) = %v, want two free ports", got)
	}
	if _, err := fleetAddrs("127.0.0.1:65535", 2); err == nil {
		t.Fatal("fleetAddrs(127.0.0.1:65535, 2) = nil error, want no room")
	}
}

// lineWriter hands each printed line to a channel and keeps them all.
type lineWriter struct {
	mu      sync.Mutex
	partial string
	full    strings.Builder
	ch      chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.full.Write(p)
	lines := strings.Split(w.partial+string(p), "\n")
	for _, l := range lines[:len(lines)-1] {
		w.ch <- l
	}
	w.partial = lines[len(lines)-1]
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.full.String()
}

var memberLine = regexp.MustCompile(`^hashlb-proxy: .* on http://(\S+), .*fleet member (\d) of 2`)

// TestEtcdFleet runs the command's run with -etcd -fleet 2: an embedded
// etcd mapped to cluster "etcd" and two members on their own ports, each
// resuming a paused request from etcd's answer (its GET /health).
func TestEtcdFleet(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &lineWriter{ch: make(chan string, 64)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, options{wasmPath: asyncModule(t), configPath: cfg, listen: "127.0.0.1:0", workers: 1,
			profile: hostsim.ProfileEnvoy133, clusters: clusterFlags{}, etcd: true, etcdDir: filepath.Join(dir, "etcd"),
			fleet: 2, out: out})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run = %v after cancel, want nil", err)
		}
	}()
	var members []string
	for len(members) < 2 {
		select {
		case line := <-out.ch:
			if m := memberLine.FindStringSubmatch(line); m != nil {
				members = append(members, m[1])
			}
		case err := <-done:
			t.Fatalf("run = %v before serving; printed:\n%s", err, out.String())
		case <-time.After(120 * time.Second):
			t.Fatalf("no two fleet members within 120s; printed:\n%s", out.String())
		}
	}
	if !strings.Contains(out.String(), `(cluster "etcd"), data in `+filepath.Join(dir, "etcd")) {
		t.Errorf("printed:\n%s\nwant etcd's address, cluster and data directory", out.String())
	}
	upstream := echoBackend(t)
	for _, m := range members {
		status, body, err := get(t, "http://"+m+"/health", "x-cluster", "etcd", "x-envoy-original-dst-host", upstream)
		if err != nil || status != 200 || !strings.Contains(body, `x-answer 200:{"health":"true"`) {
			t.Errorf("GET %s/health = %d %q (%v), want the request resumed with etcd's health", m, status, body, err)
		}
	}
}

// TestEnvFlag: -env copies a variable of this process by name; a
// NAME=VALUE, an empty name or an unset variable is refused, and the
// refusal never shows the value.
func TestEnvFlag(t *testing.T) {
	t.Setenv("HASHLB_PROXY_TEST_VAR", "from-the-environment")
	var e envFlags
	for _, v := range []string{"HASHLB_PROXY_TEST_VAR", "HASHLB_PROXY_TEST_VAR"} {
		if err := e.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.check(); err != nil || len(e.values()) != 1 || e.values()["HASHLB_PROXY_TEST_VAR"] != "from-the-environment" {
		t.Fatalf("-env HASHLB_PROXY_TEST_VAR: %v, VMs' environment %v", err, e.values())
	}
	for _, tc := range []struct{ arg, want string }{
		{"HASHLB_SESSION_KEY=a-secret-on-the-command-line", "never from the command line"},
		{"", "want a variable NAME"},
		{"HASHLB_PROXY_TEST_UNSET", "not set in hashlb-proxy's environment"},
	} {
		var e envFlags
		if err := e.Set(tc.arg); err != nil {
			t.Fatalf("Set(%q) = %v: the flag package would print the value", tc.arg, err)
		}
		err := e.check()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "a-secret") {
			t.Errorf("-env %q: %v, want a refusal saying %q, without the value", tc.arg, err, tc.want)
		}
	}
}
