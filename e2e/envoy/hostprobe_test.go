package envoy

// The host facts of docs/envoy-host.md asked of real Envoy and of hostsim
// by one module (testdata/hostprobe), answer for answer. Envoy 1.36 runs
// proxy-wasm-cpp-host c4d7bb0, hostsim's envoy-1.33 profile; Envoy 1.40 a
// host with the full WASI set, hostsim's envoy-1.39 profile. Where the two
// disagree, Envoy is right: hostsim is fixed, and the fact is in the doc.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// probeBootstrap is the probe's Envoy: one listener whose HTTP Wasm filter
// runs module (root probe_root, VM probe_vm) with the names of the three
// probe clusters as its configuration and routes to backend; the clusters
// are backend and probe_dead, probe_silent and probe_reset, on those
// loopback ports.
func probeBootstrap(t testing.TB, module string, backend, dead, silent, reset int) []byte {
	t.Helper()
	p := pluginOf("hostprobe", "probe_root", "probe_vm", module, "probe_dead probe_silent probe_reset")
	hcm := connManager("probe", routeAll("", "all", "backend"), wasmHTTP(p))
	var cs []*cluster
	for i, name := range []string{"backend", "probe_dead", "probe_silent", "probe_reset"} {
		cs = append(cs, staticCluster(t, name, fmt.Sprintf("127.0.0.1:%d", []int{backend, dead, silent, reset}[i])))
	}
	return bootstrap{other: []*listenerv3.Listener{listenerOn(t, "probe", loopback, hcmFilter(hcm))}, clusters: cs}.yaml(t)
}

// probeLine matches a probe's line in Envoy's log ("wasm log ROOT VM: probe
// NAME = RESULT" for a stream, "wasm log NAME: …" for the root) and in
// hostsim's (the message alone).
var probeLine = regexp.MustCompile(`(?:^|: )probe ([^=]+?) = (.*)$`)

// probeAnswers collects the "probe NAME = RESULT" lines of a log: every VM
// that logs one answer must log the same.
func probeAnswers(t *testing.T, host string, lines []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range lines {
		m := probeLine.FindStringSubmatch(strings.TrimRight(l, "\r\n"))
		if m == nil {
			continue
		}
		if prev, ok := out[m[1]]; ok && prev != m[2] {
			t.Errorf("%s: %s answered %q and %q on two VMs", host, m[1], prev, m[2])
		}
		out[m[1]] = m[2]
	}
	return out
}

// deadPort returns a loopback port nothing listens on.
func deadPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// loopbackServer listens on a free loopback port, hands each connection to
// serve on its own goroutine, and closes it all when the test ends.
func loopbackServer(t *testing.T, serve func(net.Conn)) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go serve(c)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// silentPort returns a loopback port that accepts connections and never
// answers on them.
func silentPort(t *testing.T) int { return loopbackServer(t, func(net.Conn) {}) }

// resetPort returns a loopback port that reads a request and closes the
// connection without an answer.
func resetPort(t *testing.T) int {
	return loopbackServer(t, func(c net.Conn) {
		c.Read(make([]byte, 4096))
		c.Close()
	})
}

// probeRequest sends the request whose headers the probe reads: two copies
// of X-Probe.
func probeRequest(t *testing.T, url string) {
	req, _ := http.NewRequest("GET", url+"/probe/path?q=1", nil)
	req.Header.Add("X-Probe", "one")
	req.Header.Add("X-Probe", "two")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("probe request: %d", resp.StatusCode)
	}
}

func envoyProbe(t *testing.T, bin envoyrun.Binary) map[string]string {
	mod := builtModule(t, "./e2e/envoy/testdata/hostprobe")
	b := envoyrun.StartBackend(t, "b1")
	yaml := probeBootstrap(t, mod, b.Port(), deadPort(t), silentPort(t), resetPort(t))
	e := envoyrun.Start(t, bin, envoyrun.Options{Bootstrap: yaml, Dir: t.TempDir(), Concurrency: 2})
	probeRequest(t, "http://"+e.MustListener(t, "probe"))
	for _, l := range []string{"probe http_call(refused host).response", "probe http_call(silent host, 300 ms).response", "probe http_call(resetting host).response"} {
		if err := e.WaitLog(l, waitCeiling); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.WaitLog("probe stream.copies of x-probe after replace", waitCeiling); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the response phase's line, if any
	return probeAnswers(t, "envoy "+bin.Version, strings.Split(e.Log(), "\n"))
}

func hostsimProbe(t *testing.T, profile string) map[string]string {
	wasm, err := os.ReadFile(builtModule(t, "./e2e/envoy/testdata/hostprobe"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, err := hostsim.New(ctx, wasm, hostsim.Config{Workers: 1, Profile: profile, PluginConfig: []byte("probe_dead probe_silent probe_reset"),
		PluginName: "hostprobe", RootID: "probe_root", VMID: "probe_vm", LogLevel: hostsim.LogInfo,
		Clusters: map[string]string{"probe_dead": fmt.Sprintf("127.0.0.1:%d", deadPort(t)),
			"probe_silent": fmt.Sprintf("127.0.0.1:%d", silentPort(t)),
			"probe_reset":  fmt.Sprintf("127.0.0.1:%d", resetPort(t))}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	s := h.Stream(0)
	res := s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/probe/path?q=1"}, {":authority", "x"}, {":scheme", "http"},
		{"x-probe", "one"}, {"x-probe", "two"}}, map[string][]byte{"source.address": hostsim.PropString("127.0.0.1:40000"),
		"request.path": hostsim.PropString("/probe/path?q=1")})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	s.ResponseHeaders([][2]string{{":status", "200"}})
	s.Finish()
	eventually(t, func() string { return fmt.Sprintf("hostsim's %d pending callouts answered", h.PendingCallouts()) },
		func() bool { return h.PendingCallouts() == 0 })
	var lines []string
	for _, l := range h.Logs() {
		lines = append(lines, l.Message)
	}
	return probeAnswers(t, "hostsim "+profile, lines)
}

func TestHostFactsAsEnvoyAnswers(t *testing.T) {
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		profile := hostsim.ProfileEnvoy133
		if bin.AtLeast(1, 39) {
			profile = hostsim.ProfileEnvoy139
		}
		got := envoyProbe(t, bin)
		sim := hostsimProbe(t, profile)
		names := slices.Sorted(func(yield func(string) bool) {
			seen := map[string]bool{}
			for _, m := range []map[string]string{got, sim} {
				for k := range m {
					if !seen[k] && !yield(k) {
						return
					}
					seen[k] = true
				}
			}
		})
		var table strings.Builder
		for _, n := range names {
			mark := ""
			if got[n] != sim[n] {
				mark = "   <-- differs"
				t.Errorf("%s: envoy %s answers %q, hostsim %s %q", n, bin.Version, got[n], profile, sim[n])
			}
			fmt.Fprintf(&table, "%-60s envoy %-40q hostsim %q%s\n", n, got[n], sim[n], mark)
		}
		t.Logf("host facts, envoy %s vs hostsim %s:\n%s", bin.Version, profile, table.String())
		if len(got) < 30 {
			t.Errorf("envoy %s answered only %d probes", bin.Version, len(got))
		}
	})
}

// TestRestrictedCallbackAtStart loads hostsim's pollinit module, which
// calls poll_oneoff from a package initialiser (so during _initialize), in
// real Envoy: V8's restricted callbacks refuse it in 1.36 (cpp-host
// c4d7bb0's start list) and allow it from the host with the full WASI set
// on (1.40), as hostsim's two profiles say (docs/envoy-host.md#restricted-callbacks).
func TestRestrictedCallbackAtStart(t *testing.T) {
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		mod := builtModule(t, "./hostsim/testdata/pollinit")
		out, err := envoyrun.ValidateLog(bin, t.TempDir(), probeBootstrap(t, mod, 1, 2, 3, 4), "info")
		wasm, _ := os.ReadFile(mod)
		_, simErr := hostsim.New(context.Background(), wasm, hostsim.Config{Profile: map[bool]string{false: hostsim.ProfileEnvoy133, true: hostsim.ProfileEnvoy139}[bin.AtLeast(1, 39)]})
		if bin.AtLeast(1, 39) {
			if err != nil || !strings.Contains(out, "poll_oneoff 0 nevents 0") {
				t.Errorf("envoy %s: err %v, want the module loaded and poll_oneoff answered 0 with no events:\n%s", bin.Version, err, out)
			}
			if simErr != nil {
				t.Errorf("hostsim refuses what Envoy %s loads: %v", bin.Version, simErr)
			}
			return
		}
		if err == nil || !strings.Contains(out, "_initialize failed: Uncaught Error: restricted_callback") {
			t.Errorf("envoy %s: err %v, want _initialize to trap with restricted_callback:\n%s", bin.Version, err, out)
		}
		if simErr == nil || !strings.Contains(simErr.Error(), "restricted") {
			t.Errorf("hostsim loads what Envoy %s refuses (err %v)", bin.Version, simErr)
		}
	})
}
