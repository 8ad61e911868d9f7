package envoy

// A hashlb configuration error in real Envoy: hashlb refuses it in
// proxy_on_configure (logging each problem), and Envoy refuses the update
// that carried it, ECDS or LDS, with hashlb's message in its log, the
// listener serving on with the configuration it had; at start-up, Envoy
// with a bad plugin configuration in its bootstrap does not start.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/fleettest"
	"github.com/hashlb/hashlb/lbcore"
)

// urlConfig is a URLHASH configuration over bs with the debug header when
// debug, and the fields of extra merged in.
func urlConfig(bs []*envoyrun.Backend, debug bool, extra map[string]any) []byte {
	var svcs []map[string]any
	for _, b := range bs {
		svcs = append(svcs, map[string]any{"name": b.Name, "address": b.Addr})
	}
	c := map[string]any{"lbMethod": "URLHASH", "upstreamCount": 2, "services": svcs}
	if debug {
		c["debugHeader"] = true
	}
	for k, v := range extra {
		c[k] = v
	}
	out, _ := json.Marshal(c)
	return out
}

// The configuration errors and the line hashlb logs for each (lbcore's
// message after "hashlb: config: ").
var configErrors = []struct {
	name  string
	extra map[string]any
	msg   string
}{
	{"hashLength 0", map[string]any{"hashLength": 0}, "hashlb: config: hashLength: 0 is out of range [1, 4096]"},
	{"unknown field", map[string]any{"hashLenght": 40}, "hashlb: config: hashLenght: unknown field"},
}

// checkServes sends ten requests to addr and checks that each is routed as
// lbcore says under config, with the debug header exactly when debug.
func checkServes(t *testing.T, addr string, config []byte, debug bool, byAddr map[string]string) {
	t.Helper()
	c, err := lbcore.ParseConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		path := fmt.Sprintf("/serve/%d", i)
		a, err := send(wire{srcIP: "127.0.0.1", dst: addr, method: "GET", target: path, host: "example.com"})
		if err != nil {
			t.Fatal(err)
		}
		want := oracle(c, lbcore.Request{Target: path, Authority: "example.com", Method: "GET"})
		if a.status != 200 || a.backend != want[0] || (a.debug != "") != debug {
			t.Errorf("GET %s on %s: %d from %q (debug header %q), want 200 from %s, debug header %v", path, addr, a.status, a.backend, a.debug, want[0], debug)
		}
		if got := a.outcome().Upstream; len(got) != 1 || byAddr[strings.Split(got[0], ",")[0]] != want[0] {
			t.Errorf("GET %s: upstream header %q, lbcore's first is %s", path, got, want[0])
		}
	}
}

// waitStat waits until Envoy's counter name reaches n.
func waitStat(t testing.TB, e *envoyrun.Envoy, name string, n int64) {
	t.Helper()
	waitStatIs(t, e, name, func(v int64) bool { return v >= n })
}

// logLines returns the lines of Envoy's log that contain any of subs.
func logLines(e *envoyrun.Envoy, subs ...string) []string {
	var out []string
	for _, l := range strings.Split(e.Log(), "\n") {
		for _, s := range subs {
			if strings.Contains(l, s) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// TestConfigErrorRefusedByECDSAndLDS: one Envoy with two listeners, one whose
// Wasm filter comes from an ECDS file and one that comes whole from an LDS
// file. Each bad configuration (hashLength 0, a misspelt field) is refused:
// hashlb's message is in Envoy's log, Envoy counts the rejection
// (extension_config_discovery.http_filter.hashlb.config_fail,
// listener_manager.lds.update_rejected), and the listener goes on routing
// as the old configuration says (with its debug header). A good
// configuration after them is taken (the debug header goes).
func TestConfigErrorRefusedByECDSAndLDS(t *testing.T) {
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		bs := envoyrun.StartBackends(t, 3)
		byAddr := map[string]string{}
		for _, b := range bs {
			byAddr[b.Addr] = b.Name
		}
		dir := envoyrun.WorkDir(t)
		ecds := filepath.Join(dir, "ecds", "demo_hashlb.json")
		lds := filepath.Join(dir, "lds", "listeners.json")
		ldsAddr := fleettest.FreeAddr(t)
		ldsListener := func(config []byte) listenerSpec {
			return listenerSpec{name: "lds_listener", addrs: []string{ldsAddr}, config: config, cluster: "hashlb_upstream", retries: true}
		}
		good := urlConfig(bs, true, nil)
		writeAtomic(t, ecds, ecdsFile(t, "hashlb", "", good))
		writeAtomic(t, lds, ldsFile(t, "1", ldsListener(good)))
		yaml := bootstrap{
			listeners: []listenerSpec{{name: "ecds_listener", addrs: []string{"127.0.0.1:0"}, ecdsPath: ecds, ecdsName: "hashlb",
				cluster: "hashlb_upstream", retries: true}},
			clusters: []*cluster{overrideHostCluster(t, "hashlb_upstream", endpoints(bs))},
			ldsPath:  lds,
		}.yaml(t)
		e := startEnvoy(t, bin, envoyrun.Options{Bootstrap: yaml, Dir: dir})
		ecdsAddr := e.MustListener(t, "ecds_listener")
		waitListener(t, e, "lds_listener")
		checkServes(t, ecdsAddr, good, true, byAddr)
		checkServes(t, ldsAddr, good, true, byAddr)

		fail, rejected := "extension_config_discovery.http_filter.hashlb.config_fail", "listener_manager.lds.update_rejected"
		for i, ce := range configErrors {
			// Services reduced to one as well: had Envoy taken it, every
			// request would go there.
			bad := urlConfig(bs[:1], false, ce.extra)
			if _, err := lbcore.ParseConfig(bad); err == nil || !strings.Contains(ce.msg, err.Error()) {
				t.Fatalf("%s: lbcore says %v, the test expects %q", ce.name, err, ce.msg)
			}
			t.Run("ECDS "+ce.name, func(t *testing.T) {
				before := strings.Count(e.Log(), ce.msg)
				writeAtomic(t, ecds, ecdsFile(t, "hashlb", "", bad))
				waitStat(t, e, fail, int64(i+1))
				if strings.Count(e.Log(), ce.msg) <= before {
					t.Errorf("Envoy's log lacks hashlb's %q", ce.msg)
				}
				time.Sleep(200 * time.Millisecond) // Envoy flushes its log every 50 ms
				t.Logf("Envoy's log on the rejection:\n%s", strings.Join(logLines(e, ce.msg, "config_discovery", "Unable to create Wasm", "Failed to load Wasm", "wasm_filter"), "\n"))
				checkServes(t, ecdsAddr, good, true, byAddr)
			})
			t.Run("LDS "+ce.name, func(t *testing.T) {
				// Not the ECDS file's bad configuration: Envoy would answer
				// that one from its canary cache (below) without running
				// hashlb again.
				bad := urlConfig(bs[1:2], false, ce.extra)
				before := strings.Count(e.Log(), ce.msg)
				writeAtomic(t, lds, ldsFile(t, fmt.Sprint(2+i), ldsListener(bad)))
				waitStat(t, e, rejected, int64(i+1))
				if strings.Count(e.Log(), ce.msg) <= before {
					t.Errorf("Envoy's log lacks hashlb's %q", ce.msg)
				}
				time.Sleep(200 * time.Millisecond) // Envoy flushes its log every 50 ms
				t.Logf("Envoy's log on the rejection:\n%s", strings.Join(logLines(e, "lds", "Unable to create Wasm", "Failed to load Wasm"), "\n"))
				checkServes(t, ldsAddr, good, true, byAddr)
			})
		}
		t.Run("the same bad configuration again", func(t *testing.T) {
			// proxy-wasm-cpp-host keeps each plugin's configuration-canary
			// result (WasmHandleBase::canary, plugin_canary_cache_, in
			// src/wasm.cc of proxy-wasm/proxy-wasm-cpp-host): a plugin
			// configuration refused once is refused again without calling
			// on_configure, so hashlb's message is not logged twice.
			ce := configErrors[0]
			before := strings.Count(e.Log(), ce.msg)
			n := e.Stat(t, fail)
			writeAtomic(t, ecds, ecdsFile(t, "hashlb", "", urlConfig(bs[:1], false, ce.extra)))
			waitStat(t, e, fail, n+1)
			time.Sleep(200 * time.Millisecond)
			if after := strings.Count(e.Log(), ce.msg); after != before {
				t.Errorf("hashlb's message logged %d more times for a configuration Envoy refused before: the canary ran again", after-before)
			}
			checkServes(t, ecdsAddr, good, true, byAddr)
		})
		t.Run("good after bad", func(t *testing.T) {
			next := urlConfig(bs, false, nil)
			reload := e.Stat(t, "extension_config_discovery.http_filter.hashlb.config_reload")
			success := e.Stat(t, "listener_manager.lds.update_success")
			writeAtomic(t, ecds, ecdsFile(t, "hashlb", "", next))
			writeAtomic(t, lds, ldsFile(t, "9", ldsListener(next)))
			waitStat(t, e, "extension_config_discovery.http_filter.hashlb.config_reload", reload+1)
			waitStat(t, e, "listener_manager.lds.update_success", success+1)
			// Every worker takes the new filter configuration a moment after
			// the main thread: wait until 8 connections in a row to each
			// listener (Envoy spreads them over its workers) answer with it.
			var a, b answer
			var err, err2 error
			inRow := 0
			eventually(t, func() string {
				return fmt.Sprintf("the good configuration on every worker (%+v %v / %+v %v)", a, err, b, err2)
			}, func() bool {
				a, err = send(wire{srcIP: "127.0.0.1", dst: ecdsAddr, method: "GET", target: "/probe", host: "example.com"})
				b, err2 = send(wire{srcIP: "127.0.0.1", dst: ldsAddr, method: "GET", target: "/probe", host: "example.com"})
				if err == nil && err2 == nil && a.debug == "" && b.debug == "" {
					inRow++
				} else {
					inRow = 0
				}
				return inRow == 8
			})
			checkServes(t, ecdsAddr, next, false, byAddr)
			checkServes(t, ldsAddr, next, false, byAddr)
		})
	})
}

// TestConfigErrorAtBootstrap: a bootstrap whose static listener carries a
// bad hashlb configuration. envoy --mode validate refuses it (validation
// loads the module and runs the configuration canary, so hashlb's
// on_configure), and a real start fails: Envoy exits before it is ready
// ("Unable to create Wasm plugin hashlb"), hashlb's message in its log.
func TestConfigErrorAtBootstrap(t *testing.T) {
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		bs := envoyrun.StartBackends(t, 2)
		ce := configErrors[0]
		yaml := bootstrap{
			listeners: []listenerSpec{{name: "hashlb_listener", addrs: []string{"127.0.0.1:0"}, config: urlConfig(bs, false, ce.extra), cluster: "hashlb_upstream"}},
			clusters:  []*cluster{overrideHostCluster(t, "hashlb_upstream", endpoints(bs))},
		}.yaml(t)
		dir := envoyrun.WorkDir(t)
		verr := envoyrun.Validate(bin, dir, yaml)
		e, err := envoyrun.Launch(bin, envoyrun.Options{Bootstrap: yaml, Dir: dir, ReadyTimeout: envoyReady})
		if err == nil {
			body, code, _ := e.Get("/listeners")
			e.Stop()
			t.Fatalf("Envoy started with a bad plugin configuration (listeners %d %q)", code, body)
		}
		// Launch's error carries the log's tail; the whole log is in dir.
		msg := err.Error()
		logs, _ := filepath.Glob(filepath.Join(dir, "envoy-*.log"))
		for _, l := range logs {
			if b, err := os.ReadFile(l); err == nil {
				msg += "\n" + string(b)
			}
		}
		t.Logf("start: %s", lastLines(err.Error(), 6))
		if !strings.Contains(msg, ce.msg) || !strings.Contains(msg, "Unable to create Wasm plugin hashlb") {
			t.Errorf("Envoy's output on the failed start lacks hashlb's %q", ce.msg)
		}
		if verr == nil || !strings.Contains(verr.Error(), ce.msg) || !strings.Contains(verr.Error(), "Unable to create Wasm plugin hashlb") {
			t.Errorf("--mode validate: %v; want a refusal with hashlb's %q", verr, ce.msg)
		}
	})
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
