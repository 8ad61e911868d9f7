package e2e

// The performance ratios of issue 11, each measured against its baseline in
// the same run. BenchmarkSameCalls is the Go benchmark of R2 in hostsim
// (-benchmem); BenchmarkRatios runs every ratio -ratios.rounds times and
// prints one table (./build.sh bench; docs/performance.md):
//
//	go test ./e2e -run '^$' -bench '^BenchmarkRatios$' -benchtime 1x -timeout 30m
//
// Benchmarks report; they assert nothing about time.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/hashlb/hashlb/e2e/testdata/hrwloop/hrw"
	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/lbcore"
)

var (
	ratioRounds  = flag.Int("ratios.rounds", 5, "BenchmarkRatios: rounds; each ratio's median and spread are over them")
	ratioStreams = flag.Int("ratios.streams", 20000, "BenchmarkRatios: streams timed per module and configuration per round (hostsim and V8)")
	ratioWrk     = flag.Duration("ratios.wrk", 3*time.Second, "BenchmarkRatios: wrk duration per proxy per round")
	ratioOut     = flag.String("ratios.out", "", "BenchmarkRatios: also write the table (Markdown) to this file")
	ratioChart   = flag.String("ratios.chart", "", "BenchmarkRatios: draw the HRW decision's cost against the number of services (PNG) into this file")
)

// BenchmarkSameCalls is R2 in hostsim as a Go benchmark: per configuration,
// one whole stream through the same-calls baseline, then through hashlb
// (x-baseline: hashlb ÷ the baseline just measured, calls/op: host calls per
// stream from the trace).
//
//	go test ./e2e -run '^$' -bench SameCalls -benchmem
func BenchmarkSameCalls(b *testing.B) {
	wasm, base := module(b), baselineModule(b)
	for _, c := range r2Configs {
		recipe, calls := sameCallsBaseline(b, c.config)
		var baseNs float64
		b.Run(c.name+"/baseline", func(b *testing.B) {
			benchStreams(b, base, recipe, true)
			baseNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(float64(len(calls)), "calls/op")
		})
		b.Run(c.name+"/hashlb", func(b *testing.B) {
			benchStreams(b, wasm, c.config, true)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/baseNs, "x-baseline")
			b.ReportMetric(float64(len(calls)), "calls/op")
		})
	}
}

// hostsimPerStream is the mean time of one whole stream on a fresh host,
// after a warm-up of a tenth as many.
func hostsimPerStream(b *testing.B, wasm, config []byte, n int) time.Duration {
	ctx := context.Background()
	h, err := hostsim.New(ctx, wasm, hostsim.Config{PluginConfig: config, LogLevel: hostsim.LogWarn})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(ctx)
	one := func(i int) {
		s := h.Stream(0)
		if res := s.RequestHeaders(benchRequests[i%len(benchRequests)], benchProps); res.Err != nil {
			b.Fatal(res.Err)
		}
		s.ResponseHeaders(benchResponse)
		if err := s.Finish(); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < n/10; i++ {
		one(i)
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		one(i)
	}
	return time.Since(start) / time.Duration(n)
}

// ---- V8 -------------------------------------------------------------------------------------------

type v8BenchLine struct {
	Job       string  `json:"job"`
	Type      string  `json:"type"`
	OK        bool    `json:"ok"`
	Error     string  `json:"error"`
	P50       float64 `json:"p50Us"`
	P99       float64 `json:"p99Us"`
	CompileMs float64 `json:"compileMs"`
	InitMs    float64 `json:"initMs"`
}

type v8Stat struct{ p50, p99, compileMs, initMs float64 }

// v8Streams runs one node process over wasm with one job per configuration
// (name → plugin configuration) and returns µs per stream by job.
func v8Streams(b *testing.B, node string, wasm []byte, configs map[string][]byte, n int) map[string]v8Stat {
	dir := b.TempDir()
	wasmFile, jobFile := filepath.Join(dir, "m.wasm"), filepath.Join(dir, "jobs.json")
	if err := os.WriteFile(wasmFile, wasm, 0o644); err != nil {
		b.Fatal(err)
	}
	type req struct {
		Class   string      `json:"class"`
		Headers [][2]string `json:"headers"`
		Source  string      `json:"source"`
		Dest    string      `json:"dest"`
	}
	var reqs []req
	for _, r := range benchRequests {
		reqs = append(reqs, req{"bench", r, string(benchProps["source.address"]), string(benchProps["destination.address"])})
	}
	phases, _ := json.Marshal([]map[string]any{{"name": "bench", "requests": reqs}})
	var jobs []map[string]any
	names := make([]string, 0, len(configs))
	for name := range configs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		jobs = append(jobs, map[string]any{"name": name, "config": string(configs[name])})
	}
	data, _ := json.Marshal(map[string]any{
		"defaults": map[string]any{"profile": hostsim.ProfileEnvoy133, "warmup": n / 10, "repeat": n, "logLevel": 3,
			"phases": json.RawMessage(phases), "slowMs": 1000},
		"jobs": jobs})
	if err := os.WriteFile(jobFile, data, 0o644); err != nil {
		b.Fatal(err)
	}
	script := filepath.Join(repoRoot(b), filepath.FromSlash(v8Script))
	cmd := exec.Command(node, append(slices.Clone(v8Flags), script, wasmFile, jobFile)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("node: %v\n%s\n%s", err, stderr.String(), tail(stdout.String(), 2000))
	}
	out := map[string]v8Stat{}
	var compileMs float64
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var l v8BenchLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			b.Fatalf("hashlbv8.mjs: %v: %.200s", err, sc.Text())
		}
		s := out[l.Job]
		switch l.Type {
		case "load":
			if l.CompileMs > 0 {
				compileMs = l.CompileMs
			}
		case "start":
			if !l.OK {
				b.Fatalf("V8 job %s: %s", l.Job, l.Error)
			}
			s.initMs = l.InitMs
		case "class":
			s.p50, s.p99 = l.P50, l.P99
		case "trap":
			b.Fatalf("V8 job %s trapped: %s", l.Job, sc.Text())
		}
		s.compileMs = compileMs
		out[l.Job] = s
	}
	return out
}

// ---- R1: HRW in the guest and natively --------------------------------------------------------

var r1Sizes = []int{3, 10, 100, 1000}

func r1Iters(n int) int { return 20_000_000 / (n + 30) }

// guestHRW instantiates the hrwloop module under wazero (the compiler, as
// hostsim runs modules) and returns a function timing iters decisions over
// n services inside one exported call.
func guestHRW(b *testing.B, ctx context.Context, rt wazero.Runtime, cm wazero.CompiledModule, n int) func(iters int) time.Duration {
	mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := mod.ExportedFunction("_initialize").Call(ctx); err != nil {
		b.Fatal(err)
	}
	if r, err := mod.ExportedFunction("hrw_setup").Call(ctx, uint64(n)); err != nil || r[0] != 0 {
		b.Fatalf("hrw_setup(%d) = %v, %v", n, r, err)
	}
	run := mod.ExportedFunction("hrw_run")
	return func(iters int) time.Duration {
		start := time.Now()
		if _, err := run.Call(ctx, uint64(iters)); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
}

// hrwV8Script runs the hrwloop module in Node's V8 (with Envoy's flags) under
// node:wasi: per size [n, iters], a fresh instance, a warm-up of iters/10,
// then one timed hrw_run(iters); prints {"n": ns per decision, ...}.
const hrwV8Script = `
import { readFileSync } from 'node:fs';
import { WASI } from 'node:wasi';
const [wasmPath, sizes] = process.argv.slice(2);
const mod = new WebAssembly.Module(readFileSync(wasmPath));
const out = {};
for (const [n, iters] of JSON.parse(sizes)) {
  const wasi = new WASI({ version: 'preview1' });
  const inst = new WebAssembly.Instance(mod, { wasi_snapshot_preview1: wasi.wasiImport });
  wasi.initialize(inst);
  if (inst.exports.hrw_setup(n) !== 0) throw new Error('hrw_setup failed');
  inst.exports.hrw_run(Math.floor(iters / 10));
  const t = process.hrtime.bigint();
  inst.exports.hrw_run(iters);
  out[n] = Number(process.hrtime.bigint() - t) / iters;
}
process.stdout.write(JSON.stringify(out));
`

// hrwV8 returns V8's ns per decision by number of services.
func hrwV8(b *testing.B, node, script, wasmFile string) map[int]float64 {
	var sizes [][2]int
	for _, n := range r1Sizes {
		sizes = append(sizes, [2]int{n, r1Iters(n)})
	}
	arg, _ := json.Marshal(sizes)
	cmd := exec.Command(node, append(slices.Clone(v8Flags), "--no-warnings", script, wasmFile, string(arg))...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	o, err := cmd.Output()
	if err != nil {
		b.Fatalf("node hrw: %v\n%s", err, stderr.String())
	}
	var res map[string]float64
	if err := json.Unmarshal(o, &res); err != nil {
		b.Fatalf("node hrw: %v: %s", err, o)
	}
	out := map[int]float64{}
	for k, v := range res {
		n, _ := strconv.Atoi(k)
		out[n] = v
	}
	return out
}

// ---- R7: hashlb-proxy under wrk -----------------------------------------------------------------

// proxyRPS starts hashlb-proxy with args (2 workers, a free loopback port),
// runs wrk against it and returns requests per second.
func proxyRPS(b *testing.B, proxy, wrk string, d time.Duration, args ...string) float64 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(proxy, append([]string{"-workers", "2", "-listen", addr}, args...)...)
	cmd.Dir = repoRoot(b)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("hashlb-proxy %v did not start: %s", args, out.String())
		}
	}
	url := "http://" + addr + "/some/path"
	if o, err := exec.Command("curl", "-sf", url).CombinedOutput(); err != nil && !strings.Contains(err.Error(), "executable file not found") {
		b.Fatalf("curl %s: %v: %s\nproxy: %s", url, err, o, out.String())
	}
	o, err := exec.Command(wrk, "-t2", "-c16", "-d"+d.String(), url).CombinedOutput()
	if err != nil {
		b.Fatalf("wrk: %v: %s", err, o)
	}
	if m := regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`).FindSubmatch(o); m != nil {
		b.Fatalf("wrk against hashlb-proxy %v: %s non-2xx responses\n%s", args, m[1], o)
	}
	m := regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`).FindSubmatch(o)
	if m == nil {
		b.Fatalf("wrk printed no Requests/sec: %s", o)
	}
	rps, _ := strconv.ParseFloat(string(m[1]), 64)
	return rps
}

// ---- the table ---------------------------------------------------------------------------------

// ratioRow is one line of the table: a figure per round, its goal.
type ratioRow struct {
	name, unit string
	vals       []float64
	goal       string                 // "≤ 1.5", "≥ 0.8", "" (reported only)
	pass       func(med float64) bool // nil: no goal
}

type ratioTable struct {
	rows  []*ratioRow
	index map[string]*ratioRow
}

func (t *ratioTable) add(name, unit, goal string, pass func(float64) bool, v float64) {
	if t.index == nil {
		t.index = map[string]*ratioRow{}
	}
	r := t.index[name]
	if r == nil {
		r = &ratioRow{name: name, unit: unit, goal: goal, pass: pass}
		t.index[name] = r
		t.rows = append(t.rows, r)
	}
	r.vals = append(r.vals, v)
}

func atMost(x float64) func(float64) bool  { return func(v float64) bool { return v <= x } }
func atLeast(x float64) func(float64) bool { return func(v float64) bool { return v >= x } }

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func (t *ratioTable) markdown() string {
	var sb strings.Builder
	sb.WriteString("| figure | median | spread (min–max, runs) | goal | |\n|---|---|---|---|---|\n")
	for _, r := range t.rows {
		med := median(r.vals)
		spread := num(slices.Min(r.vals)) + "–" + num(slices.Max(r.vals))
		if slices.Min(r.vals) == slices.Max(r.vals) {
			spread = "exact"
		}
		verdict := ""
		if r.pass != nil {
			verdict = "FAIL"
			if r.pass(med) {
				verdict = "pass"
			}
		}
		unit := ""
		if r.unit != "" {
			unit = " " + r.unit
		}
		goal := r.goal
		if goal == "" {
			goal = "–"
		}
		fmt.Fprintf(&sb, "| %s | %s%s | %s (%d) | %s | %s |\n", r.name, num(med), unit, spread, len(r.vals), goal, verdict)
	}
	return sb.String()
}

// BenchmarkRatios measures every figure of issue 11 -ratios.rounds times and
// prints the table. Run it with -benchtime 1x (./build.sh bench does).
func BenchmarkRatios(b *testing.B) {
	ctx := context.Background()
	wasm, base, noop := module(b), baselineModule(b), noopModule(b)
	hrwWasm := buildModule(b, "./e2e/testdata/hrwloop")
	rounds, n := *ratioRounds, *ratioStreams
	var t ratioTable

	// Same-calls recipes and host calls per stream (deterministic: traced once).
	recipes := map[string][]byte{}
	plainCalls := 0
	for _, c := range r2Configs {
		recipe, calls := sameCallsBaseline(b, c.config)
		recipes[c.name] = recipe
		goal, pass := "≤ 6", atMost(6)
		if strings.Contains(c.name, "persistence") {
			goal, pass = fmt.Sprintf("≤ %d (plain + 3)", plainCalls+3), atMost(float64(plainCalls+3))
		} else if c.name == "URLHASH" {
			plainCalls = len(calls)
		}
		t.add("host calls per stream, "+c.name, "", goal, pass, float64(len(calls)))
	}

	// Tools of the whole run.
	node, nodeErr := exec.LookPath("node")
	wrk, wrkErr := exec.LookPath("wrk")
	dir := b.TempDir()
	proxy := filepath.Join(dir, "hashlb-proxy")
	build := exec.Command("go", "build", "-o", proxy, "./hostsim/cmd/hashlb-proxy")
	build.Dir = repoRoot(b)
	if o, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building hashlb-proxy: %v\n%s", err, o)
	}
	// R7's configurations: the demo without the debug header, and its same-calls recipe.
	r7Config := []byte(`{"lbMethod": "URLHASH", "services": [
	  {"name": "b1", "address": "127.0.0.1:18081"}, {"name": "b2", "address": "127.0.0.1:18082"},
	  {"name": "b3", "address": "127.0.0.1:18083"}]}`)
	r7Hashlb, r7Recipe := filepath.Join(dir, "r7-hashlb.json"), filepath.Join(dir, "r7-baseline.json")
	os.WriteFile(r7Hashlb, r7Config, 0o644)
	{
		calls, metrics := traceStream(b, wasm, r7Config)
		recipe, err := baselineRecipe(calls, metrics)
		if err != nil {
			b.Fatal(err)
		}
		os.WriteFile(r7Recipe, recipe, 0o644)
	}
	wasmFile, baseFile := filepath.Join(dir, "hashlb.wasm"), filepath.Join(dir, "baseline.wasm")
	hrwFile, hrwScript := filepath.Join(dir, "hrwloop.wasm"), filepath.Join(dir, "hrw.mjs")
	os.WriteFile(wasmFile, wasm, 0o644)
	os.WriteFile(baseFile, base, 0o644)
	os.WriteFile(hrwFile, hrwWasm, 0o644)
	os.WriteFile(hrwScript, []byte(hrwV8Script), 0o644)

	// R1's guest: one runtime, the module compiled once.
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	hrwCM, err := rt.CompileModule(ctx, hrwWasm)
	if err != nil {
		b.Fatal(err)
	}
	guests := map[int]func(int) time.Duration{}
	natives := map[int]*hrw.Loop{}
	for _, sz := range r1Sizes {
		guests[sz] = guestHRW(b, ctx, rt, hrwCM, sz)
		if natives[sz], err = hrw.New(sz); err != nil {
			b.Fatal(err)
		}
		guests[sz](r1Iters(sz) / 10) // warm-up
		natives[sz].Run(r1Iters(sz) / 10)
	}

	b.ResetTimer()
	for round := 0; round < rounds; round++ {
		// R2 and R6 in hostsim.
		noopNs := hostsimPerStream(b, noop, nil, n)
		t.add("hostsim µs/stream, noop", "µs", "", nil, float64(noopNs.Nanoseconds())/1e3)
		hashlbNs := map[string]time.Duration{}
		for _, c := range r2Configs {
			bn := hostsimPerStream(b, base, recipes[c.name], n)
			hn := hostsimPerStream(b, wasm, c.config, n)
			hashlbNs[c.name] = hn
			t.add("R2 hostsim, "+c.name, "", "≤ 1.5", atMost(1.5), float64(hn)/float64(bn))
		}
		for _, c := range r2Configs {
			t.add("hostsim µs/stream, hashlb "+c.name, "µs", "", nil, float64(hashlbNs[c.name].Nanoseconds())/1e3)
		}
		t.add("R6 persistence hit ÷ plain (hostsim, URLHASH)", "", "≤ 1.5", atMost(1.5),
			float64(hashlbNs["URLHASH+persistence"])/float64(hashlbNs["URLHASH"]))

		// R2 in V8: one node process per module, every configuration a job.
		if nodeErr == nil {
			hc, bc := map[string][]byte{}, map[string][]byte{}
			for _, c := range r2Configs {
				hc[c.name], bc[c.name] = c.config, recipes[c.name]
			}
			vn := v8Streams(b, node, noop, map[string][]byte{"noop": nil}, n)
			vb := v8Streams(b, node, base, bc, n)
			vh := v8Streams(b, node, wasm, hc, n)
			for _, c := range r2Configs {
				t.add("R2 V8 p50, "+c.name, "", "≤ 1.5", atMost(1.5), vh[c.name].p50/vb[c.name].p50)
			}
			for _, c := range r2Configs {
				t.add("V8 µs/stream p50, hashlb "+c.name, "µs", "", nil, vh[c.name].p50)
				t.add("V8 µs/stream p99, hashlb "+c.name, "µs", "", nil, vh[c.name].p99)
				t.add("V8 µs/stream p50, baseline "+c.name, "µs", "", nil, vb[c.name].p50)
				t.add("V8 µs/stream p99, baseline "+c.name, "µs", "", nil, vb[c.name].p99)
			}
			t.add("V8 µs/stream p50, noop", "µs", "", nil, vn["noop"].p50)
			t.add("V8 µs/stream p99, noop", "µs", "", nil, vn["noop"].p99)
			t.add("V8 compile (TurboFan, --no-liftoff), hashlb", "ms", "", nil, vh[r2Configs[0].name].compileMs)
			t.add("V8 start (instantiate, _initialize, configure), hashlb", "ms", "", nil, vh[r2Configs[0].name].initMs)
		}

		// R1: V8 (Envoy's engine) and wazero (hostsim's), each against native.
		var inV8 map[int]float64
		if nodeErr == nil {
			inV8 = hrwV8(b, node, hrwScript, hrwFile)
		}
		for _, sz := range r1Sizes {
			it := r1Iters(sz)
			g := guests[sz](it)
			start := time.Now()
			natives[sz].Run(it)
			nat := float64(time.Since(start).Nanoseconds()) / float64(it)
			wz := float64(g.Nanoseconds()) / float64(it)
			if inV8 != nil {
				t.add(fmt.Sprintf("R1 HRW V8 ÷ native, %d services", sz), "", "≤ 2.0", atMost(2), inV8[sz]/nat)
				t.add(fmt.Sprintf("HRW V8 ns/decision, %d services", sz), "ns", "", nil, inV8[sz])
			}
			t.add(fmt.Sprintf("R1 HRW wazero ÷ native, %d services", sz), "", "", nil, wz/nat)
			t.add(fmt.Sprintf("HRW wazero ns/decision, %d services", sz), "ns", "", nil, wz)
			t.add(fmt.Sprintf("HRW native ns/decision, %d services", sz), "ns", "", nil, nat)
		}

		// R7.
		if wrkErr == nil {
			h := proxyRPS(b, proxy, wrk, *ratioWrk, "-wasm", wasmFile, "-config", r7Hashlb)
			bl := proxyRPS(b, proxy, wrk, *ratioWrk, "-wasm", baseFile, "-config", r7Recipe, "-backends-config", r7Hashlb)
			t.add("R7 hashlb-proxy req/s hashlb ÷ baseline (wrk, 2 workers)", "", "≥ 0.8", atLeast(0.8), h/bl)
			t.add("hashlb-proxy req/s, hashlb", "req/s", "", nil, h)
			t.add("hashlb-proxy req/s, baseline", "req/s", "", nil, bl)
		}

		// Cold compile and start per worker (hostsim, wazero's compiler).
		start := time.Now()
		h, err := hostsim.New(ctx, wasm, hostsim.Config{PluginConfig: benchConfig("URLHASH", ""), Cache: wazero.NewCompilationCache()})
		if err != nil {
			b.Fatal(err)
		}
		t.add("hostsim cold compile + first worker, hashlb", "ms", "", nil, float64(time.Since(start).Microseconds())/1e3)
		h.Close(ctx)
		perWorker := func(workers int) time.Duration {
			start := time.Now()
			h, err := hostsim.New(ctx, wasm, hostsim.Config{Workers: workers, PluginConfig: benchConfig("URLHASH", "")})
			if err != nil {
				b.Fatal(err)
			}
			d := time.Since(start)
			h.Close(ctx)
			return d
		}
		one, five := perWorker(1), perWorker(5)
		for i := 0; i < 2; i++ { // the fastest of three: a start is short and the machine shared
			one, five = min(one, perWorker(1)), min(five, perWorker(5))
		}
		t.add("hostsim start per further worker, hashlb", "ms", "", nil, float64((five-one).Microseconds())/4e3)
	}
	b.StopTimer()

	// Deterministic figures.
	t.add("R8 bytes per persistence entry at 3·10⁶ (lbcore.BytesPerEntry, hostsim accounting)", "B", "≤ 48", atMost(48),
		lbcore.BytesPerEntry(3000000, persistNamespace, hostsim.SharedDataEntryOverhead))
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zw.Write(wasm)
	zw.Close()
	t.add("module size raw", "MB", "", nil, float64(len(wasm))/1e6)
	t.add("module size gzip -9", "MB", "", nil, float64(gz.Len())/1e6)

	var missing []string
	if nodeErr != nil {
		missing = append(missing, "no node: R2 in V8 not measured")
	}
	if wrkErr != nil {
		missing = append(missing, "no wrk: R7 not measured (./build.sh bench installs it)")
	}
	table := t.markdown()
	if len(missing) > 0 {
		table += "\n" + strings.Join(missing, "\n") + "\n"
	}
	fmt.Printf("\n%d rounds, %d streams per module and configuration per round\n\n%s", rounds, n, table)
	if *ratioOut != "" {
		if err := os.WriteFile(*ratioOut, []byte(table), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if *ratioChart != "" {
		if err := costChart(&t, *ratioChart); err != nil {
			b.Fatal(err)
		}
	}
}
