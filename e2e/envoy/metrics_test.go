package envoy

// hashlb's metrics in real Envoy, under the names docs/deploy.md lists
// ("Stats"): /stats with the custom namespace (wasmcustom.hashlb.…),
// /stats/prometheus without it and without Envoy's envoy_ prefix
// (hashlb_…), each with the count the test's requests caused.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
)

// promValues parses Envoy's Prometheus text: metric name → value, and the
// # TYPE of each.
func promValues(body string) (map[string]int64, map[string]string) {
	vals, types := map[string]int64{}, map[string]string{}
	for _, l := range strings.Split(body, "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
			continue
		}
		if m := promLineRE.FindStringSubmatch(l); m != nil {
			v, err := strconv.ParseFloat(m[2], 64)
			if err == nil {
				vals[m[1]] = int64(v)
			}
		}
	}
	return vals, types
}

var promLineRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})? ([0-9.e+-]+)$`)

// TestMetricsInEnvoy sends 60 requests through envoy.yaml's configuration
// (with passive health on, so that its counters exist too): 10 client ids
// three times each (10 misses, 20 table hits) and 30 requests without one
// (balanced by URLHASH alone). Every metric docs/deploy.md lists, but the
// fleet's, is in /stats and in /stats/prometheus, and once each worker has
// ticked they say exactly what happened: decision.hash 40,
// decision.persistence 20, persistence_miss 10, persistence_hit 20,
// persistence_empty_key 30, each service's requests what its backend
// answered, every active gauge 0, nothing else counted.
func TestMetricsInEnvoy(t *testing.T) {
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		bs := envoyrun.StartBackends(t, 3)
		var config map[string]any
		if err := json.Unmarshal(persistConfig(bs, false, ""), &config); err != nil {
			t.Fatal(err)
		}
		config["passiveHealth"] = map[string]any{"consecutiveFailures": 5, "ejectionTime": "30s"}
		data, _ := json.Marshal(config)
		yaml := bootstrap{listeners: []listenerSpec{{name: "hashlb_listener", addrs: []string{"127.0.0.1:0"}, config: data,
			cluster: "hashlb_upstream", retries: true}},
			clusters: []*cluster{overrideHostCluster(t, "hashlb_upstream", endpoints(bs))}}.yaml(t)
		start := time.Now()
		e := startEnvoy(t, bin, envoyrun.Options{Bootstrap: yaml, Dir: envoyrun.WorkDir(t)})
		t.Logf("envoy ready in %v", time.Since(start))
		addr := e.MustListener(t, "hashlb_listener")

		answered := map[string]int64{}
		get := func(path string, hs ...[2]string) {
			a, err := send(wire{srcIP: "127.0.0.1", dst: addr, method: "GET", target: path, host: "example.com", headers: hs})
			if err != nil || a.status != 200 || a.backend == "" {
				t.Fatalf("GET %s: %+v, %v", path, a, err)
			}
			answered[a.backend]++
		}
		for i := range 10 {
			for j := range 3 {
				get(fmt.Sprintf("/k/%d/%d", i, j), [2]string{"x-client-id", fmt.Sprint("id-", i)})
			}
		}
		for i := range 30 {
			get(fmt.Sprintf("/free/%d", i))
		}
		sent := time.Now()
		t.Logf("60 requests in %v", sent.Sub(start))

		want := map[string]int64{
			"hashlb.decision.hash": 40, "hashlb.decision.persistence": 20,
			"hashlb.decision.bounded_load": 0, "hashlb.decision.backup": 0, "hashlb.decision.least_connection": 0,
			"hashlb.decision.round_robin": 0, "hashlb.decision.no_service": 0, "hashlb.decision.session": 0,
			"hashlb.persistence_hit": 20, "hashlb.persistence_miss": 10, "hashlb.persistence_empty_key": 30,
			"hashlb.persistence_expired": 0, "hashlb.persistence_rechosen": 0, "hashlb.persistence_evicted": 0,
			"hashlb.persistence_cas_retry": 0, "hashlb.persistence_cas_giveup": 0,
			"hashlb.internal_error": 0, "hashlb.input_capped": 0,
		}
		gauges := map[string]bool{}
		for _, b := range bs {
			want["hashlb.service."+b.Name+".requests"] = answered[b.Name]
			want["hashlb.service."+b.Name+".active"] = 0
			gauges["hashlb.service."+b.Name+".active"] = true
			for _, c := range []string{"health_down", "health_up", "ejected"} {
				want["hashlb.service."+b.Name+"."+c] = 0
			}
		}

		// The workers give their counts to Envoy on their tick (every
		// second): wait for the last, then every value must be exact.
		var stats map[string]int64
		eventually(t, func() string { return fmt.Sprintf("the decision counters (%v)", stats) }, func() bool {
			var err error
			if stats, err = e.Stats(); err != nil {
				t.Fatal(err)
			}
			return stats["wasmcustom.hashlb.decision.hash"] == 40 && stats["wasmcustom.hashlb.decision.persistence"] == 20
		})
		t.Logf("the counts were complete %v after the last answer", time.Since(sent).Round(10*time.Millisecond))
		prom, _, err := e.Get("/stats/prometheus")
		if err != nil {
			t.Fatal(err)
		}
		pv, pt := promValues(prom)
		for name, n := range want {
			if got, ok := stats["wasmcustom."+name]; !ok || got != n {
				t.Errorf("/stats wasmcustom.%s = %d (present %v), want %d", name, got, ok, n)
			}
			pn := strings.ReplaceAll(name, ".", "_")
			kind := "counter"
			if gauges[name] {
				kind = "gauge"
			}
			if got, ok := pv[pn]; !ok || got != n || pt[pn] != kind {
				t.Errorf("/stats/prometheus %s = %d (present %v, type %q), want %d, %s", pn, got, ok, pt[pn], n, kind)
			}
		}
		for name := range stats {
			if strings.HasPrefix(name, "wasmcustom.") {
				if _, ok := want[strings.TrimPrefix(name, "wasmcustom.")]; !ok {
					t.Errorf("/stats has %s = %d, which docs/deploy.md does not list", name, stats[name])
				}
			}
		}
		for name := range pv {
			if strings.HasPrefix(name, "envoy_hashlb") || strings.HasPrefix(name, "wasmcustom") || strings.HasPrefix(name, "envoy_wasmcustom") {
				t.Errorf("/stats/prometheus names hashlb's metric %s: the namespace is not stripped as docs/deploy.md says", name)
			}
		}
	})
}
