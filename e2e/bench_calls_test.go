package e2e

// The same-calls baseline: e2e/testdata/baseline replays, per stream, the host
// calls hashlb made for a request (recorded with hostsim.Config.Trace) and
// decides nothing. TestBaselineReplaysHashlb holds it to exactly hashlb's
// calls for every benchmarked configuration, so R2 = hashlb ÷ baseline stays
// fair whatever calls the filter makes.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/hostsim"
)

// r2Configs are the configurations R2 is measured for: every hash method
// over four services, and URLHASH with persistence (the traced stream is a
// steady hit: the third request of the same client).
var r2Configs = func() []struct {
	name   string
	config []byte
} {
	var out []struct {
		name   string
		config []byte
	}
	for _, m := range benchMethods {
		if m.method == "LEASTCONNECTION" || m.method == "ROUNDROBIN" {
			continue
		}
		out = append(out, struct {
			name   string
			config []byte
		}{m.method, benchConfig(m.method, m.extra)})
	}
	out = append(out, struct {
		name   string
		config []byte
	}{"URLHASH+persistence", benchConfig("URLHASH", `"persistence": {"keys": ["${client.ip}"], "tableSize": 10000},`)})
	return out
}()

// traceStream runs three whole streams of benchRequests[0] through wasm with
// config under a tracing host and returns the calls of the third and the
// host's metrics: the first does one-time work, and with persistence the
// second is the entry's first hit, which also writes the bucket (to mark the
// entry hot); the third is a hit as most are (an entry's last use is
// refreshed at most once a second).
func traceStream(t testing.TB, wasm, config []byte) ([]hostsim.Call, map[string]hostsim.Metric) {
	t.Helper()
	ctx := context.Background()
	h, err := hostsim.New(ctx, wasm, hostsim.Config{PluginConfig: config, LogLevel: hostsim.LogWarn, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	var calls []hostsim.Call
	for i := 0; i < 3; i++ {
		s := h.Stream(0)
		if res := s.RequestHeaders(benchRequests[0], benchProps); res.Err != nil {
			t.Fatal(res.Err)
		}
		s.ResponseHeaders(benchResponse)
		if err := s.Finish(); err != nil {
			t.Fatal(err)
		}
		calls = s.Calls()
	}
	if err := h.Err(0); err != nil {
		t.Fatal(err)
	}
	// A read of shared data finds the value hashlb stored (the bucket of a
	// persistence hit): its size, so that the baseline reads one as long
	// and the host copies as much into it.
	for i, c := range calls {
		if c.Func == "proxy_get_shared_data" {
			if v, _, ok := h.SharedData().Get(c.Key); ok {
				calls[i].Size = len(v)
			}
		}
	}
	return calls, h.Metrics()
}

const clockCall = "wasi_snapshot_preview1.clock_time_get"

// baselineRecipe turns a trace into the baseline module's configuration:
// each call as is, WASI clock reads by their clock id.
func baselineRecipe(calls []hostsim.Call, metrics map[string]hostsim.Metric) ([]byte, error) {
	type call struct {
		Phase string `json:"phase"`
		Func  string `json:"func"`
		Map   int    `json:"map"`
		Key   string `json:"key,omitempty"`
		Value string `json:"value,omitempty"`
		Size  int    `json:"size,omitempty"`
	}
	type metric struct {
		Name string `json:"name"`
		Type int    `json:"type"`
	}
	var r struct {
		Metrics []metric `json:"metrics"`
		Calls   []call   `json:"calls"`
	}
	seen := map[string]bool{}
	for i, c := range calls {
		switch {
		case c.Func == clockCall:
			r.Calls = append(r.Calls, call{Phase: c.Phase, Func: "clock_time_get", Key: c.Key})
			continue
		case strings.Contains(c.Func, "."):
			return nil, fmt.Errorf("call %d: %v: the baseline does not replay this WASI call", i, c)
		case strings.HasSuffix(c.Func, "_metric"):
			m, ok := metrics[c.Key]
			if !ok {
				return nil, fmt.Errorf("call %d: %v: no metric %q", i, c, c.Key)
			}
			if !seen[c.Key] {
				seen[c.Key] = true
				r.Metrics = append(r.Metrics, metric{c.Key, int(m.Type)})
			}
		}
		r.Calls = append(r.Calls, call{Phase: c.Phase, Func: c.Func, Map: c.Map, Key: c.Key, Value: c.Value, Size: c.Size})
	}
	return json.Marshal(r)
}

func baselineModule(t testing.TB) []byte { return buildModule(t, "./e2e/testdata/baseline") }

// sameCallsBaseline records hashlb's calls for config and returns the
// baseline's configuration and the number of host calls per stream.
func sameCallsBaseline(t testing.TB, config []byte) ([]byte, []hostsim.Call) {
	t.Helper()
	calls, metrics := traceStream(t, module(t), config)
	recipe, err := baselineRecipe(calls, metrics)
	if err != nil {
		t.Fatal(err)
	}
	return recipe, calls
}

func callLines(calls []hostsim.Call) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = fmt.Sprintf("%s = %q (%d)", c, c.Value, c.Size)
	}
	return out
}

// TestBaselineReplaysHashlb: for every R2 configuration, the baseline module
// makes exactly the host calls hashlb makes for the same stream, in order,
// with the same header maps, names, values, metrics and property paths.
func TestBaselineReplaysHashlb(t *testing.T) {
	for _, c := range r2Configs {
		t.Run(c.name, func(t *testing.T) {
			recipe, want := sameCallsBaseline(t, c.config)
			got, _ := traceStream(t, baselineModule(t), recipe)
			g, w := callLines(got), callLines(want)
			t.Logf("%d host calls per stream:\n%s", len(want), strings.Join(w, "\n"))
			if strings.Join(g, "\n") != strings.Join(w, "\n") {
				t.Errorf("baseline calls =\n%s\nhashlb calls =\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
			}
		})
	}
}
