package e2e

// BenchmarkReconfigure: how long a new configuration of 10, 1000 and 10000
// services takes to apply, and what it does to the latency of the requests
// around it, in hostsim and in V8 (e2e/v8/hashlbv8.mjs, reconfigure step).
// Each figure is also given as a ratio against a baseline measured in the
// same run: reconfiguration time ÷ that of 10 services, request latency
// while reconfigurations happen ÷ without (docs/performance.md).
//
//	go test ./e2e -run '^$' -bench '^BenchmarkReconfigure$' -benchtime 1x -timeout 30m
//
// Benchmarks report; they assert nothing about time.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
)

// reconfigSizes are the pool sizes measured.
var reconfigSizes = []int{10, 1000, 10000}

// reconfigPods is a controller-shaped pool of n pods.
func reconfigPods(n int) []pod {
	out := make([]pod, n)
	for i := range out {
		out[i] = pod{name: fmt.Sprintf("web-%05d", i), ip: fmt.Sprintf("10.%d.%d.%d", 1+i/65536, i/256%256, i%256)}
	}
	return out
}

// reconfigVariant is configuration v of a pool of n pods: pod v%n rescheduled
// with a new IP (the usual change) and hashLength v%4096+1, so that every
// variant is a configuration Envoy has not seen (a new plugin key: the
// canary runs each time).
func reconfigVariant(b *testing.B, n, v int) []byte {
	pods := reconfigPods(n)
	pods[v%n].ip = fmt.Sprintf("10.200.%d.%d", v/256%256, v%256)
	return podConfig(b, "URLHASH", pods, map[string]any{"hashLength": v%4096 + 1})
}

// durQuantile returns the q-quantile of sorted.
func durQuantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func BenchmarkReconfigure(b *testing.B) {
	wasm := module(b)
	hostsimConfigure := func(b *testing.B, n, count int) time.Duration {
		h, err := hostsim.New(b.Context(), wasm, hostsim.Config{Workers: 2, PluginConfig: reconfigVariant(b, n, 0)})
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close(b.Context())
		configs := make([][]byte, count)
		for i := range configs {
			configs[i] = reconfigVariant(b, n, i+2)
		}
		// One untimed reconfiguration first: the guest's first one runs
		// code paths for the first time.
		if err := h.Configure(reconfigVariant(b, n, 1)); err != nil {
			b.Fatal(err)
		}
		t := time.Now()
		for _, c := range configs {
			if err := h.Configure(c); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t) / time.Duration(count)
	}
	for _, n := range reconfigSizes {
		b.Run(fmt.Sprintf("host=hostsim/services=%d", n), func(b *testing.B) {
			count := max(2, 20_000/(n+100)) // reconfigurations timed
			base := hostsimConfigure(b, 10, 20)
			per := hostsimConfigure(b, n, count)
			during, without := hostsimLatency(b, wasm, n)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(per.Microseconds())/1000, "ms/reconfigure")
			b.ReportMetric(float64(per)/float64(base), "x-10services")
			b.ReportMetric(float64(during[0])/float64(without[0]), "p50-during/without")
			b.ReportMetric(float64(during[1])/float64(without[1]), "p99-during/without")
			b.ReportMetric(float64(during[2].Microseconds())/1000, "max-ms-during")
		})
	}
	b.Run("host=v8", func(b *testing.B) {
		node, err := exec.LookPath("node")
		if err != nil {
			b.Fatalf("node is needed for the V8 half: %v", err)
		}
		res := v8Reconfigure(b, node, wasm)
		base := res[10].ms
		for _, n := range reconfigSizes {
			r := res[n]
			b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(r.ms, "ms/reconfigure")
				b.ReportMetric(r.ms/base, "x-10services")
				b.ReportMetric(r.afterP50/r.p50, "p50-after/without")
				b.ReportMetric(r.afterP99/r.p99, "p99-after/without")
			})
		}
	})
}

// hostsimLatency measures request latency on a 2-worker host of n services:
// requests alone, then while reconfigurations run back to back on the same
// workers. It returns p50, p99 and max of both.
func hostsimLatency(b *testing.B, wasm []byte, n int) (during, without [3]time.Duration) {
	h, err := hostsim.New(b.Context(), wasm, hostsim.Config{Workers: 2, PluginConfig: reconfigVariant(b, n, 0)})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(b.Context())
	sample := func(k int) time.Duration {
		t := time.Now()
		if _, err := send(h, k%2, k); err != nil {
			b.Fatal(err)
		}
		return time.Since(t)
	}
	stats := func(d []time.Duration) [3]time.Duration {
		slices.Sort(d)
		return [3]time.Duration{durQuantile(d, 0.5), durQuantile(d, 0.99), d[len(d)-1]}
	}
	const requests = 4000
	var alone []time.Duration
	for k := 0; k < requests; k++ {
		alone = append(alone, sample(k))
	}
	configs := make([][]byte, max(2, 20_000/(n+100)))
	for i := range configs {
		configs[i] = reconfigVariant(b, n, 1000+i)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var mixed []time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			mixed = append(mixed, sample(k))
		}
	}()
	for _, c := range configs {
		if err := h.Configure(c); err != nil {
			b.Error(err)
		}
	}
	close(stop)
	wg.Wait()
	if len(mixed) == 0 {
		b.Fatal("no request ran during the reconfigurations")
	}
	return stats(mixed), stats(alone)
}

// v8Result is one pool size in V8: median milliseconds per reconfiguration,
// and the request latency (µs) without and in the window after one.
type v8Result struct{ ms, p50, p99, afterP50, afterP99 float64 }

// v8Reconfigure runs one node process with a job per pool size: requests
// with a reconfiguration every `every` requests.
func v8Reconfigure(b *testing.B, node string, wasm []byte) map[int]v8Result {
	dir := b.TempDir()
	wasmFile := filepath.Join(dir, "m.wasm")
	if err := os.WriteFile(wasmFile, wasm, 0o644); err != nil {
		b.Fatal(err)
	}
	req := map[string]any{"class": "bench", "headers": [][2]string{{":method", "GET"}, {":path", "/obj/1"}, {":authority", "h"}},
		"source": "192.0.2.1:4000", "dest": "10.0.0.100:80"}
	var jobs []map[string]any
	for _, n := range reconfigSizes {
		reconfigs := max(4, 4000/(n+100))
		every := 500
		var configs []string
		for v := 1; v <= reconfigs; v++ {
			configs = append(configs, string(reconfigVariant(b, n, v)))
		}
		jobs = append(jobs, map[string]any{"name": strconv.Itoa(n), "config": string(reconfigVariant(b, n, 0)),
			"warmup": 200, "repeat": every * reconfigs, "reconfigure": map[string]any{"every": every, "window": 20, "configs": configs}})
	}
	data, err := json.Marshal(map[string]any{
		"defaults": map[string]any{"profile": hostsim.ProfileEnvoy133, "logLevel": 3, "slowMs": 100000,
			"phases": []map[string]any{{"name": "bench", "requests": []any{req}}}},
		"jobs": jobs})
	if err != nil {
		b.Fatal(err)
	}
	jobFile := filepath.Join(dir, "jobs.json")
	if err := os.WriteFile(jobFile, data, 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(node, append(append(slices.Clone(v8Flags), filepath.Join(repoRoot(b), filepath.FromSlash(v8Script))), wasmFile, jobFile)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("node: %v\n%s\n%s", err, stderr.String(), tail(stdout.String(), 2000))
	}
	type line struct {
		Job   string  `json:"job"`
		Type  string  `json:"type"`
		OK    bool    `json:"ok"`
		Ms    float64 `json:"ms"`
		Class string  `json:"class"`
		P50   float64 `json:"p50Us"`
		P99   float64 `json:"p99Us"`
	}
	ms := map[int][]float64{}
	out := map[int]v8Result{}
	for _, raw := range bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n")) {
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			b.Fatalf("hashlbv8.mjs: %v: %.200s", err, raw)
		}
		n, _ := strconv.Atoi(l.Job)
		r := out[n]
		switch {
		case l.Type == "trap" || (l.Type == "reconfigure" || l.Type == "start") && !l.OK:
			b.Fatalf("V8 job %s: %s", l.Job, raw)
		case l.Type == "reconfigure":
			ms[n] = append(ms[n], l.Ms)
		case l.Type == "class" && l.Class == "bench":
			r.p50, r.p99 = l.P50, l.P99
		case l.Type == "class":
			r.afterP50, r.afterP99 = l.P50, l.P99
		}
		out[n] = r
	}
	for n, m := range ms {
		slices.Sort(m)
		r := out[n]
		r.ms = m[len(m)/2]
		out[n] = r
	}
	return out
}
