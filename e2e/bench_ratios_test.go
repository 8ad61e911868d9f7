package e2e

// The performance ratios (docs/performance.md's R0–R8), each measured against its baseline in
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
	"maps"
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
	one := hostsimStreams(b, h)
	one(n / 10)
	start := time.Now()
	one(n)
	return time.Since(start) / time.Duration(n)
}

// hostsimStreams returns a function that runs n whole streams through h.
func hostsimStreams(b *testing.B, h *hostsim.Host) func(n int) {
	i := 0
	return func(n int) {
		for end := i + n; i < end; i++ {
			s := h.Stream(0)
			if res := s.RequestHeaders(benchRequests[i%len(benchRequests)], benchProps); res.Err != nil {
				b.Fatal(res.Err)
			}
			s.ResponseHeaders(benchResponse)
			if err := s.Finish(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// pairBlocks is how many blocks an interleaved pair measurement alternates
// (an even number: the order goes A B, B A, A B, ...).
const pairBlocks = 20

// hostsimPair measures hashlb (wasm, config) against the same-calls
// baseline (base, recipe) on two hosts that live side by side, in
// alternating blocks of n/pairBlocks streams each (A B then B A, so a drift
// of the machine weighs on both alike), after a warm-up of n/10 streams
// each. Each stream is timed alone and a block counts its median, as the
// V8 harness does: a stream that another process preempted is an outlier of
// its block, not a share of its mean. It returns the median over the blocks
// of the ratio hashlb ÷ baseline, and each module's median µs per stream.
func hostsimPair(b *testing.B, wasm, config, base, recipe []byte, n int) (ratio, hashlbUs, baseUs float64) {
	ctx := context.Background()
	start := func(m, c []byte) *hostsim.Host {
		h, err := hostsim.New(ctx, m, hostsim.Config{PluginConfig: c, LogLevel: hostsim.LogWarn})
		if err != nil {
			b.Fatal(err)
		}
		return h
	}
	hh, bh := start(wasm, config), start(base, recipe)
	defer hh.Close(ctx)
	defer bh.Close(ctx)
	hs, bs := hostsimStreams(b, hh), hostsimStreams(b, bh)
	hs(n / 10)
	bs(n / 10)
	block := max(n/pairBlocks, 1)
	us := make([]float64, block)
	timed := func(run func(int)) float64 {
		for i := range us {
			t := time.Now()
			run(1)
			us[i] = float64(time.Since(t).Nanoseconds()) / 1e3
		}
		return median(us)
	}
	var ratios, hv, bv []float64
	for i := 0; i < pairBlocks; i++ {
		var h, bl float64
		if i%2 == 0 {
			h, bl = timed(hs), timed(bs)
		} else {
			bl, h = timed(bs), timed(hs)
		}
		ratios, hv, bv = append(ratios, h/bl), append(hv, h), append(bv, bl)
	}
	for _, h := range []*hostsim.Host{hh, bh} {
		if err := h.Err(0); err != nil {
			b.Fatal(err)
		}
	}
	return median(ratios), median(hv), median(bv)
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
	Class     string  `json:"class"`
	GuestMax  float64 `json:"guestCpuMaxUs"`
	// --pair lines
	Side  string  `json:"side"`
	Ratio float64 `json:"ratio"`
	AP50  float64 `json:"aP50Us"`
	AP99  float64 `json:"aP99Us"`
	BP50  float64 `json:"bP50Us"`
	BP99  float64 `json:"bP99Us"`
}

type v8Stat struct{ p50, p99, compileMs, initMs float64 }

// v8Jobs writes the job file of hashlbv8.mjs for configs (name → plugin
// configuration, one job each, sorted by name; n measured requests after
// n/10 of warm-up each) into dir and returns its path.
func v8Jobs(b *testing.B, dir, file string, configs map[string][]byte, n int) string {
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
	for _, name := range slices.Sorted(maps.Keys(configs)) {
		jobs = append(jobs, map[string]any{"name": name, "config": string(configs[name])})
	}
	data, _ := json.Marshal(map[string]any{
		"defaults": map[string]any{"profile": hostsim.ProfileEnvoy133, "warmup": n / 10, "repeat": n, "logLevel": 3,
			"phases": json.RawMessage(phases), "slowMs": 1000},
		"jobs": jobs})
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// benchV8 runs hashlbv8.mjs with args under Node with Envoy's V8 flags and
// returns its output lines, decoded.
func benchV8(b *testing.B, node string, args ...string) []v8BenchLine {
	script := filepath.Join(repoRoot(b), filepath.FromSlash(v8Script))
	cmd := exec.Command(node, append(append(slices.Clone(v8Flags), script), args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("node: %v\n%s\n%s", err, stderr.String(), tail(stdout.String(), 2000))
	}
	out, err := jsonLines[v8BenchLine](&stdout)
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range out {
		if l.Type == "trap" || l.Type == "start" && !l.OK {
			b.Fatalf("V8 job %s: %+v", l.Job, l)
		}
	}
	return out
}

// v8Streams runs one node process over wasm with one job per configuration
// (name → plugin configuration) and returns µs per stream by job.
func v8Streams(b *testing.B, node string, wasm []byte, configs map[string][]byte, n int) map[string]v8Stat {
	dir := b.TempDir()
	wasmFile := filepath.Join(dir, "m.wasm")
	if err := os.WriteFile(wasmFile, wasm, 0o644); err != nil {
		b.Fatal(err)
	}
	out := map[string]v8Stat{}
	var compileMs float64
	for _, l := range benchV8(b, node, wasmFile, v8Jobs(b, dir, "jobs.json", configs, n)) {
		s := out[l.Job]
		switch l.Type {
		case "load":
			if l.CompileMs > 0 {
				compileMs = l.CompileMs
			}
		case "start":
			s.initMs = l.InitMs
		case "class":
			s.p50, s.p99 = l.P50, l.P99
		}
		s.compileMs = compileMs
		out[l.Job] = s
	}
	return out
}

// v8Pair is one configuration's interleaved measurement in V8.
type v8Pair struct {
	ratio, hashlbP50, hashlbP99, baseP50, baseP99, compileMs, initMs float64
}

// v8Pairs runs hashlb (configs) and the same-calls baseline (recipes, the
// same names) side by side in one node process (hashlbv8.mjs --pair):
// per configuration, pairBlocks alternating blocks of n/pairBlocks streams
// each, after n/10 of warm-up each.
func v8Pairs(b *testing.B, node string, wasm, base []byte, configs, recipes map[string][]byte, n int) map[string]v8Pair {
	dir := b.TempDir()
	wasmFile, baseFile := filepath.Join(dir, "hashlb.wasm"), filepath.Join(dir, "baseline.wasm")
	os.WriteFile(wasmFile, wasm, 0o644)
	os.WriteFile(baseFile, base, 0o644)
	lines := benchV8(b, node, "--pair", wasmFile, v8Jobs(b, dir, "hashlb.json", configs, n),
		baseFile, v8Jobs(b, dir, "baseline.json", recipes, n), strconv.Itoa(pairBlocks))
	out := map[string]v8Pair{}
	var compileMs float64
	for _, l := range lines {
		p := out[l.Job]
		switch l.Type {
		case "load":
			if l.Side == "A" {
				compileMs = l.CompileMs
			}
		case "start":
			if p.initMs == 0 { // A starts first
				p.initMs = l.InitMs
			}
		case "pair":
			p.ratio, p.hashlbP50, p.hashlbP99, p.baseP50, p.baseP99 = l.Ratio, l.AP50, l.AP99, l.BP50, l.BP99
		}
		p.compileMs = compileMs
		out[l.Job] = p
	}
	for name := range configs {
		if out[name].ratio == 0 {
			b.Fatalf("hashlbv8.mjs --pair: no pair line for %s", name)
		}
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

// r1Instructions adds R1: instructions per HRW decision in V8 (node with
// Envoy's flags) ÷ natively, from e2e/testdata/hrwloop/ir/ir.sh (valgrind's
// cachegrind), which the machine's load does not move.
func r1Instructions(b *testing.B, t *ratioTable) {
	args := []string{"e2e/testdata/hrwloop/ir/ir.sh"}
	for _, n := range r1Sizes {
		args = append(args, strconv.Itoa(n))
	}
	cmd := exec.Command("sh", args...)
	cmd.Dir = repoRoot(b)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("ir.sh: %v\n%s", err, out)
	}
	found := 0
	for _, line := range strings.Split(string(out), "\n") {
		var n int
		var v8, native, ratio float64
		if _, err := fmt.Sscanf(line, "%d services: V8 %g, native %g instructions per decision, ratio %g", &n, &v8, &native, &ratio); err != nil {
			continue
		}
		found++
		t.add(fmt.Sprintf("R1 HRW V8 ÷ native (instructions), %d services", n), "", "", nil, v8/native) // a figure, not a goal: the decision is under 10 % of a stream
		t.add(fmt.Sprintf("HRW V8 instructions per decision, %d services", n), "", "", nil, v8)
		t.add(fmt.Sprintf("HRW native instructions per decision, %d services", n), "", "", nil, native)
	}
	if found != len(r1Sizes) {
		b.Fatalf("ir.sh: %d sizes measured, want %d\n%s", found, len(r1Sizes), out)
	}
}

// r1Reps is how many timed runs of iters/r1Reps decisions R1 makes per size
// and engine in a round, interleaved (V8, wazero, native, V8, ...). Each
// ratio is the median of the per-run ratios, each ns figure the median of
// the runs: a run that the machine's other load stretched moves neither.
const r1Reps = 5

// hrwV8Script runs the hrwloop module in Node's V8 (with Envoy's flags) under
// node:wasi: per size n of its argument, a fresh instance and a warm-up of
// iters/10 decisions; then, per line "n count" on stdin, one timed
// hrw_run(count) on n's instance, answered with the ns per decision.
const hrwV8Script = `
import { readFileSync } from 'node:fs';
import { WASI } from 'node:wasi';
import { createInterface } from 'node:readline';
const [wasmPath, sizes] = process.argv.slice(2);
const mod = new WebAssembly.Module(readFileSync(wasmPath));
const insts = {};
for (const [n, iters] of JSON.parse(sizes)) {
  const wasi = new WASI({ version: 'preview1' });
  const inst = new WebAssembly.Instance(mod, { wasi_snapshot_preview1: wasi.wasiImport });
  wasi.initialize(inst);
  if (inst.exports.hrw_setup(n) !== 0) throw new Error('hrw_setup failed');
  inst.exports.hrw_run(Math.floor(iters / 10));
  insts[n] = inst;
}
process.stdout.write('ready\n');
for await (const line of createInterface({ input: process.stdin })) {
  const [n, count] = line.split(' ').map(Number);
  const t = process.hrtime.bigint();
  insts[n].exports.hrw_run(count);
  process.stdout.write(String(Number(process.hrtime.bigint() - t) / count) + '\n');
}
`

// hrwV8 starts the hrwloop module in V8 for every size of r1Sizes and
// returns a function timing count decisions over n services there (ns per
// decision), and one that ends the node process.
func hrwV8(b *testing.B, node, script, wasmFile string) (run func(n, count int) float64, stop func()) {
	var sizes [][2]int
	for _, n := range r1Sizes {
		sizes = append(sizes, [2]int{n, r1Iters(n)})
	}
	arg, _ := json.Marshal(sizes)
	cmd := exec.Command(node, append(slices.Clone(v8Flags), "--no-warnings", script, wasmFile, string(arg))...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	in, _ := cmd.StdinPipe()
	outPipe, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	out := bufio.NewScanner(outPipe)
	readLine := func() string {
		if !out.Scan() {
			cmd.Wait()
			b.Fatalf("node hrw: no answer: %v\n%s", out.Err(), stderr.String())
		}
		return out.Text()
	}
	if l := readLine(); l != "ready" {
		b.Fatalf("node hrw: %q", l)
	}
	run = func(n, count int) float64 {
		fmt.Fprintf(in, "%d %d\n", n, count)
		v, err := strconv.ParseFloat(readLine(), 64)
		if err != nil {
			b.Fatalf("node hrw: %v", err)
		}
		return v
	}
	return run, func() { in.Close(); cmd.Wait() }
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

// BenchmarkRatios measures every figure -ratios.rounds times and
// prints the table. Run it with -benchtime 1x (./build.sh bench does).
func BenchmarkRatios(b *testing.B) {
	ctx := context.Background()
	wasm, base, noop := module(b), baselineModule(b), noopModule(b)
	hrwWasm := buildModule(b, "./e2e/testdata/hrwloop")
	rounds, n := *ratioRounds, *ratioStreams
	var t ratioTable

	// Same-calls recipes and host calls per stream (deterministic: traced once).
	// R0: the method's inputs for benchRequests[0] and one replace per header
	// hashlb sets, nothing else; a persistence hit at most 2 more.
	recipes := map[string][]byte{}
	inputs := map[string]int{"URLHASH": 1, "DOMAINHASH": 1, "DESTINATIONIPHASH": 1, "SOURCEIPHASH": 1,
		"SRCIPDESTIPHASH": 2, "SRCIPSRCPORTHASH": 1, "CALLIDHASH": 1, "TOKEN": 1}
	plainCalls := 0
	for _, c := range r2Configs {
		recipe, calls := sameCallsBaseline(b, c.config)
		recipes[c.name] = recipe
		want := inputs[c.name] + 2
		goal, pass := fmt.Sprintf("= %d (inputs + 2)", want), func(v float64) bool { return v == float64(want) }
		if strings.Contains(c.name, "persistence") {
			goal, pass = fmt.Sprintf("≤ %d (plain + 2)", plainCalls+2), atMost(float64(plainCalls+2))
		} else if c.name == "URLHASH" {
			plainCalls = len(calls)
		}
		t.add("R0 host calls per stream, "+c.name, "", goal, pass, float64(len(calls)))
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
	benchStart := time.Now()
	for round := 0; round < rounds; round++ {
		// Progress on stderr, which go test passes on at once.
		stage := func(what string) {
			fmt.Fprintf(os.Stderr, "bench: round %d/%d, %s (%s so far)\n", round+1, rounds, what, time.Since(benchStart).Round(time.Second))
		}
		// R2 and R6 in hostsim.
		stage("R2/R6 under hostsim")
		noopNs := hostsimPerStream(b, noop, nil, n)
		t.add("hostsim µs/stream, noop", "µs", "", nil, float64(noopNs.Nanoseconds())/1e3)
		hashlbUs, baseUs := map[string]float64{}, map[string]float64{}
		for _, c := range r2Configs {
			ratio, hu, bu := hostsimPair(b, wasm, c.config, base, recipes[c.name], n)
			hashlbUs[c.name], baseUs[c.name] = hu, bu
			t.add("R2 hostsim, "+c.name, "", "≤ 1.5", atMost(1.5), ratio)
		}
		for _, c := range r2Configs {
			t.add("hostsim µs/stream, hashlb "+c.name, "µs", "", nil, hashlbUs[c.name])
			t.add("hostsim µs/stream, baseline "+c.name, "µs", "", nil, baseUs[c.name])
		}
		var persisted, plain []byte
		for _, c := range r2Configs {
			switch c.name {
			case "URLHASH+persistence":
				persisted = c.config
			case "URLHASH":
				plain = c.config
			}
		}
		r6, _, _ := hostsimPair(b, wasm, persisted, wasm, plain, n) // interleaved as R2
		t.add("R6 persistence hit ÷ plain (hostsim, URLHASH)", "", "≤ 1.5", atMost(1.5), r6)

		// R2 in V8: one node process per module, every configuration a job.
		stage("R2 in V8")
		if nodeErr == nil {
			hc, bc := map[string][]byte{}, map[string][]byte{}
			for _, c := range r2Configs {
				hc[c.name], bc[c.name] = c.config, recipes[c.name]
			}
			vn := v8Streams(b, node, noop, map[string][]byte{"noop": nil}, n)
			vp := v8Pairs(b, node, wasm, base, hc, bc, n)
			// The same-calls baseline makes hashlb's calls, which are the minimal
			// ones (R0): this is hashlb ÷ a module making exactly those.
			for _, c := range r2Configs {
				t.add("R2 V8 p50 ÷ minimal-calls module, "+c.name, "", "≤ 1.15", atMost(1.15), vp[c.name].ratio)
			}
			for _, c := range r2Configs {
				t.add("V8 µs/stream p50, hashlb "+c.name, "µs", "", nil, vp[c.name].hashlbP50)
				t.add("V8 µs/stream p99, hashlb "+c.name, "µs", "", nil, vp[c.name].hashlbP99)
				t.add("V8 µs/stream p50, baseline "+c.name, "µs", "", nil, vp[c.name].baseP50)
				t.add("V8 µs/stream p99, baseline "+c.name, "µs", "", nil, vp[c.name].baseP99)
			}
			t.add("V8 µs/stream p50, noop", "µs", "", nil, vn["noop"].p50)
			t.add("V8 µs/stream p99, noop", "µs", "", nil, vn["noop"].p99)
			t.add("V8 compile (TurboFan, --no-liftoff), hashlb", "ms", "", nil, vp[r2Configs[0].name].compileMs)
			t.add("V8 start (instantiate, _initialize, configure), hashlb", "ms", "", nil, vp[r2Configs[0].name].initMs)

			// The decision's cost against the pool's size (the rank cache from 64
			// services), each size interleaved with 10 services.
			sc := v8Scale(b, node, wasm, n)
			for _, zipf := range []bool{true, false} {
				keys := "all-new keys"
				if zipf {
					keys = "Zipf keys (s = 1.1, 10⁵)"
				}
				for _, size := range scaleSizes {
					p := sc[scaleName(size, zipf)]
					if size == scaleSizes[0] {
						p = sc[scaleName(scaleSizes[len(scaleSizes)-1], zipf)]
						p.hashlbP50, p.hashlbP99 = p.baseP50, p.baseP99
					}
					t.add(fmt.Sprintf("V8 µs/stream p50, URLHASH, %d services, %s", size, keys), "µs", "", nil, p.hashlbP50)
					t.add(fmt.Sprintf("V8 µs/stream p99, URLHASH, %d services, %s", size, keys), "µs", "", nil, p.hashlbP99)
				}
				for _, size := range scaleSizes[1:] {
					goal, check := "", (func(float64) bool)(nil)
					if zipf && size == 10000 {
						goal, check = "≤ 1.3", atMost(1.3)
					}
					t.add(fmt.Sprintf("V8 p50 at %d services ÷ at 10, %s (interleaved)", size, keys), "", goal, check, sc[scaleName(size, zipf)].ratio)
				}
			}
		}

		stage("R1, V8 and wazero against native")
		// R1: V8 (Envoy's engine) and wazero (hostsim's), each against native,
		// interleaved run by run.
		var inV8 func(n, count int) float64
		stopV8 := func() {}
		if nodeErr == nil {
			inV8, stopV8 = hrwV8(b, node, hrwScript, hrwFile)
		}
		for _, sz := range r1Sizes {
			per := r1Iters(sz) / r1Reps
			var v8s, wzs, nats, v8r, wzr []float64
			for r := 0; r < r1Reps; r++ {
				v8 := math.NaN()
				if inV8 != nil {
					v8 = inV8(sz, per)
				}
				wz := float64(guests[sz](per).Nanoseconds()) / float64(per)
				start := time.Now()
				natives[sz].Run(per)
				nat := float64(time.Since(start).Nanoseconds()) / float64(per)
				v8s, wzs, nats = append(v8s, v8), append(wzs, wz), append(nats, nat)
				v8r, wzr = append(v8r, v8/nat), append(wzr, wz/nat)
			}
			if inV8 != nil {
				// Timed, R1 moves with the shared machine's load (spreads of 1–4.6 in one
				// run); its verdict is the instruction count (r1Instructions).
				t.add(fmt.Sprintf("HRW V8 ÷ native time, %d services", sz), "", "", nil, median(v8r))
				t.add(fmt.Sprintf("HRW V8 ns/decision, %d services", sz), "ns", "", nil, median(v8s))
			}
			t.add(fmt.Sprintf("HRW wazero ÷ native time, %d services", sz), "", "", nil, median(wzr))
			t.add(fmt.Sprintf("HRW wazero ns/decision, %d services", sz), "ns", "", nil, median(wzs))
			t.add(fmt.Sprintf("HRW native ns/decision, %d services", sz), "ns", "", nil, median(nats))
		}
		stopV8()

		// R7.
		stage("R7 under wrk")
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

	nodePath := ""
	if nodeErr == nil {
		nodePath = node
	}
	limitFigures(b, &t, nodePath, wasm)

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
	if _, err := exec.LookPath("valgrind"); err != nil || nodeErr != nil {
		missing = append(missing, "no valgrind or node: R1 not measured (./build.sh bench installs valgrind)")
	} else {
		fmt.Fprintf(os.Stderr, "bench: R1 instruction counts under valgrind (%s so far)\n", time.Since(benchStart).Round(time.Second))
		r1Instructions(b, &t)
	}
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
