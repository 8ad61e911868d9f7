package e2e

// The bench's figures at the limits: CPU per request at the configuration
// limits, the decision's cost against the pool's size with the rank cache,
// and GC cycles per 10^6 requests.

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/internal/hostile"
)

var ratioGCRequests = flag.Int("ratios.gcrequests", 1_000_000, "BenchmarkRatios: requests per configuration for the GC-cycle count")

// scaleSizes are the pool sizes the decision's cost is measured at.
var scaleSizes = []int{10, 1000, 10000}

// scaleConfig is URLHASH over n services.
func scaleConfig(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"lbMethod": "URLHASH", "services": [`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name": "s%d", "address": "10.%d.%d.%d:80"}`, i, i/62500, i/250%250, i%250+1)
	}
	b.WriteString("]}")
	return []byte(b.String())
}

// scaleTargets returns count request targets: Zipf (s = 1.1) over 10^5
// keys, or all distinct.
func scaleTargets(zipf bool, count int) []string {
	rng := rand.New(rand.NewPCG(11, 12))
	z := rand.NewZipf(rng, 1.1, 1, 100_000-1)
	out := make([]string, count)
	for i := range out {
		k := uint64(i)
		if zipf {
			k = z.Uint64()
		}
		out[i] = fmt.Sprintf("/catalog/items/%d", k)
	}
	return out
}

type benchReq struct {
	Class   string      `json:"class"`
	Headers [][2]string `json:"headers"`
	Source  string      `json:"source"`
	Dest    string      `json:"dest"`
}

// v8Scale runs URLHASH in V8 with Zipf and with all-new keys, each pool
// size above 10 against 10 services side by side in one node process
// (hashlbv8.mjs --pair: the same module, pairBlocks alternating blocks of
// n/pairBlocks streams each after n/10 of warm-up each, as R2), and returns
// per "size/zipf" or "size/new" the pair: A the size, B 10 services.
func v8Scale(b *testing.B, node string, wasm []byte, n int) map[string]v8Pair {
	dir := b.TempDir()
	wasmFile := filepath.Join(dir, "m.wasm")
	if err := os.WriteFile(wasmFile, wasm, 0o644); err != nil {
		b.Fatal(err)
	}
	var big, small []map[string]any
	for _, zipf := range []bool{true, false} {
		var reqs []benchReq
		for _, target := range scaleTargets(zipf, n+n/10) {
			reqs = append(reqs, benchReq{"bench", [][2]string{{":method", "GET"}, {":scheme", "https"},
				{":authority", "shop.example.com"}, {":path", target}}, "192.0.2.10:51234", "10.1.0.5:8080"})
		}
		phases, _ := json.Marshal([]map[string]any{{"name": "bench", "requests": reqs}})
		for _, size := range scaleSizes[1:] {
			name := scaleName(size, zipf)
			big = append(big, map[string]any{"name": name, "config": string(scaleConfig(size)), "phases": json.RawMessage(phases)})
			small = append(small, map[string]any{"name": name, "config": string(scaleConfig(scaleSizes[0])), "phases": json.RawMessage(phases)})
		}
	}
	write := func(file string, jobs []map[string]any) string {
		data, _ := json.Marshal(map[string]any{
			"defaults": map[string]any{"profile": hostsim.ProfileEnvoy133, "warmup": n / 10, "repeat": n, "logLevel": 3, "slowMs": 1000},
			"jobs":     jobs})
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			b.Fatal(err)
		}
		return path
	}
	out := map[string]v8Pair{}
	for _, l := range benchV8(b, node, "--pair", wasmFile, write("big.json", big), wasmFile, write("small.json", small), strconv.Itoa(pairBlocks)) {
		if l.Type == "pair" {
			out[l.Job] = v8Pair{ratio: l.Ratio, hashlbP50: l.AP50, hashlbP99: l.AP99, baseP50: l.BP50, baseP99: l.BP99}
		}
	}
	for _, j := range big {
		if out[j["name"].(string)].ratio == 0 {
			b.Fatalf("hashlbv8.mjs --pair: no pair line for %s", j["name"])
		}
	}
	return out
}

func scaleName(size int, zipf bool) string {
	if zipf {
		return fmt.Sprintf("%d/zipf", size)
	}
	return fmt.Sprintf("%d/new", size)
}

// v8WorstCPU runs the hostile corpus through the costliest configurations
// lbcore accepts (v8LimitConfigs) in V8 and returns the most CPU one request
// took after two passes of warm-up, in ms, and the configuration's name.
func v8WorstCPU(b *testing.B, node string, wasm []byte) (float64, string) {
	dir := b.TempDir()
	wasmFile := filepath.Join(dir, "m.wasm")
	if err := os.WriteFile(wasmFile, wasm, 0o644); err != nil {
		b.Fatal(err)
	}
	reqs := hostile.Requests()
	phases, _ := json.Marshal([]v8Phase{{Name: "hostile", Requests: latin1Requests(reqs)}})
	var jobs []map[string]any
	for _, c := range v8LimitConfigs {
		jobs = append(jobs, map[string]any{"name": c.name, "config": c.config})
	}
	data, _ := json.Marshal(map[string]any{
		"defaults": map[string]any{"profile": hostsim.ProfileEnvoy133, "warmup": 2 * len(reqs), "repeat": len(reqs),
			"logLevel": 3, "slowMs": 1000, "phases": json.RawMessage(phases), "strings": "latin1", "recheckUs": 10000},
		"jobs": jobs})
	jobFile := filepath.Join(dir, "limits.json")
	if err := os.WriteFile(jobFile, data, 0o644); err != nil {
		b.Fatal(err)
	}
	worst, which := 0.0, ""
	for _, l := range benchV8(b, node, wasmFile, jobFile) {
		if l.Type == "class" && l.GuestMax/1000 > worst {
			worst, which = l.GuestMax/1000, l.Job+" / "+l.Class
		}
	}
	return worst, which
}

// limitFigures adds the figures at the limits that are measured once per run.
func limitFigures(b *testing.B, t *ratioTable, node string, wasm []byte) {
	if node != "" {
		worst, which := v8WorstCPU(b, node, wasm)
		b.Logf("worst CPU per request: %.2f ms (%s)", worst, which)
		t.add("V8 module CPU per request, worst accepted config and hostile input (max after warm-up)", "ms", "≤ 10", atMost(10), worst)
	}
	mem := memstatsModule(b)
	for _, c := range guestCases(b) {
		if slices.Contains(hashMethodConfigs, c.name) {
			continue // the shipped configuration is counted, with its debugHeader and persistence
		}
		_, _, gcs := guestGarbageCase(b, mem, c, *ratioGCRequests)
		t.add(fmt.Sprintf("GC cycles per %d requests (hostsim, guest MemStats), %s", *ratioGCRequests, c.name), "", "0", atMost(0), float64(gcs))
	}
}
