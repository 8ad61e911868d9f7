package e2e

// TestV8 runs the module in V8, Envoy's Wasm engine, through e2e/v8/hashlbv8.mjs: a Node script
// (built-in modules only) that loads it with exactly the imports, WASI return codes and restricted
// callbacks of Envoy 1.33 or 1.39 and drives the benign and the hostile corpus of internal/hostile
// through it (docs/envoy-host.md has the host's facts). hostsim runs the module under wazero, whose
// stack is not V8's: a JWT nested a few thousand levels deep passed there and overflowed V8's stack,
// which kills the VM and every later request of the worker.
//
//	go test ./e2e -run TestV8 -v
//	go test ./e2e -run TestV8 -v -v8.wasm=dist/hashlb.wasm   # a module built elsewhere
//
// For every example plugin config and a few configs of this file that reach the hostile paths,
// under envoy-1.33, with 10^4 requests per corpus after a warm-up: no trap; every request gets
// exactly one decision, the upstream header naming configured services, or a local 503 "no healthy
// service"; every hostile request is served in under 10 ms of CPU, values over the module's arena and
// the costliest configurations lbcore accepts (v8LimitConfigs) included (a bound on what one request
// can cost the worker, GC cycles included: none may happen; the module's CPU is the process's
// less the time in host functions, and a request over the bound is run again, up to 3 times, and
// counts its least, so that a loaded machine's preemptions do not fail it); and the guest's linear memory after the hostile run is at most
// 1.5 × that after a benign run of the same length. Under envoy-1.39, one pass over each corpus:
// no trap and one decision per request. Which service a request should get is not judged here
// (hostsim's tests and lbcore's oracle do that).
//
// The benign and the hostile phase run in two fresh VMs of the same compiled module, not one after
// the other in one VM: linear memory never shrinks, so after a benign phase in the same VM it would
// be the larger of the two runs' peaks and hide growth the hostile requests cause up to the benign
// peak; and a trap in one phase cannot end the other.
//
// Under CI=true a missing node fails the test; elsewhere it skips.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/hostile"
	"github.com/hashlb/hashlb/internal/lateness"
	"github.com/hashlb/hashlb/lbcore"
	"github.com/hashlb/hashlb/lbcore/fleet"
)

// v8Flags are the flags proxy-wasm-cpp-host gives V8 (src/v8/v8.cc).
var v8Flags = []string{"--no-liftoff", "--wasm-max-mem-pages=16384"}

// v8PhaseBudget is how long a phase may run before it is stopped: 30 s (ten
// times a normal run, or more) on a quiet machine, so that a module that
// hangs or has gone quadratic fails in a few minutes naming its slowest
// request, widened by how late this machine's timers fire now (a busy one
// runs node's phases as late), measured for a second.
func v8PhaseBudget() time.Duration {
	return lateness.Widen(30*time.Second, lateness.Measure(time.Second), 300)
}

var v8Wasm = flag.String("v8.wasm", "", "TestV8: check this module instead of one built from ./filter")

const (
	v8Script     = "e2e/v8/hashlbv8.mjs"
	v8Requests   = 10_000                // measured requests per phase under envoy-1.33
	v8MaxRequest = 10 * time.Millisecond // the CPU bound per hostile request after warm-up
	v8MemRatio   = 1.5                   // hostile memory ÷ benign memory, at most
)

// v8LocalConfigs reach the hostile paths the example configs do not: jwt() on the authorization
// header and the session cookie, replace() with a pattern that rescans its input after each short
// match, cookie and client-IP persistence keys, the client IP from x-forwarded-for, and a session
// cookie whose every hostile copy is a forged value.
var v8LocalConfigs = []struct{ name, config string }{
	{"local-token-jwt", `{"lbMethod": "TOKEN", "upstreamCount": 2,
	  "token": "${request.header.authorization | jwt(\"sub\") || request.cookie.session | jwt(\"sub\")}",
	  "services": [{"name": "a", "address": "10.0.0.1:80"}, {"name": "b", "address": "10.0.0.2:80"},
	    {"name": "c", "address": "10.0.0.3:80"}]}`},
	{"local-persistence-replace", `{"lbMethod": "URLHASH",
	  "persistence": {"keys": ["${request.url | replace(\"a.*b|a\", \"x\")}", "${request.cookie.session}", "${client.ip}"],
	    "tableSize": 10000, "expire": "10m"},
	  "services": [{"name": "a", "address": "10.0.0.1:80"}, {"name": "b", "address": "10.0.0.2:80", "weight": 2},
	    {"name": "c", "address": "[fd00::3]:80"}]}`},
	// A session cookie named as the corpus's session cookies: every hostile cookie is a forged session.
	{"local-session-cookie", `{"lbMethod": "URLHASH", "upstreamCount": 2,
	  "session": {"type": "cookie", "name": "session", "idleTimeout": "10m", "lifetime": "permanent"},
	  "persistence": {"keys": ["${client.ip}"], "tableSize": 10000, "expire": "10m"},
	  "services": [{"name": "a", "address": "10.0.0.1:80"}, {"name": "b", "address": "10.0.0.2:80", "weight": 0},
	    {"name": "c", "address": "10.0.0.3:80"}]}`},
	{"local-sourceip-xff", `{"lbMethod": "SOURCEIPHASH", "trustedForwardedHops": 1, "netmask": "255.255.255.0",
	  "services": [{"name": "a", "address": "10.0.0.1:80"}, {"name": "b", "address": "10.0.0.2:80"},
	    {"name": "c", "address": "10.0.0.3:80", "enabled": false}, {"name": "d", "address": "10.0.0.4:80"}]}`},
}

// v8Env is every V8 VM's environment: the session key (local-session-cookie needs one).
var v8Env = map[string]string{lbcore.SessionKeyEnv: "v8-session-key-0123456789abcdef0123456789"}

// v8HostileEtcdAnswers names the answers of HOSTILE_ETCD in hashlbv8.mjs, in its order.
var v8HostileEtcdAnswers = []string{"[×10^4 (200)", "[×10^4 (400)", `{"a":×10^4 (200)`, `{"a":×10^4 (400)`,
	"1 MiB value (200)", "1 MiB lease ID (200)", "1 MiB of spaces (400)", "31 levels, not etcd's shape (200)"}

// v8HostileEtcdConfig is a fleet configuration run against an etcd whose every answer is hostile
// (v8Run.hostileEtcd): nested 10^4 levels deep, or 1 MiB, status 200 or 400.
const v8HostileEtcdConfig = `{"lbMethod": "LEASTCONNECTION",
  "persistence": {"keys": ["${request.header.x-client-id || client.ip}"], "tableSize": 10000, "expire": "10m",
    "fleet": {"cluster": "hashlb_etcd", "timeout": "200ms"}},
  "services": [{"name": "a", "address": "10.0.0.1:80"}, {"name": "b", "address": "10.0.0.2:80"}]}`

// v8LimitConfigs are the costliest configurations lbcore accepts (lbcore/limits.go), one per
// kind: the most functions per expression over the longest values, jwt() decoding the longest
// token in every alternative of nine expressions, and replace() with the largest program, whose
// steps per decision MaxReplaceSteps bounds. Every hostile request must stay under v8MaxRequest
// through them too.
var v8LimitConfigs = func() []struct{ name, config string } {
	const svcs = `"services": [{"name": "a", "address": "10.0.0.1:80"}, {"name": "b", "address": "10.0.0.2:80"}]`
	expr := func(alts, fns int, v, f string) string {
		var b strings.Builder
		b.WriteString("${")
		for a := range alts {
			if a > 0 {
				b.WriteString(" || ")
			}
			b.WriteString(v)
			for range fns {
				b.WriteString(" | " + f)
			}
		}
		b.WriteString("}")
		return b.String()
	}
	keys := func(mk func(i int) string) string {
		var ks []string
		for i := range 8 {
			q, _ := json.Marshal(mk(i))
			ks = append(ks, string(q))
		}
		return strings.Join(ks, ", ")
	}
	quote := func(v string) string { q, _ := json.Marshal(v); return string(q) }
	bigRE := strings.Repeat("[a-z]{0,50}", 5)
	return []struct{ name, config string }{
		{"limit-functions", `{"lbMethod": "TOKEN", "token": ` + quote(expr(1, lbcore.MaxExprFuncs/2, "request.url", "lower | upper")) +
			`, "persistence": {"keys": [` + keys(func(i int) string {
			return expr(1, lbcore.MaxExprFuncs/2, fmt.Sprintf("request.header.x-client-id%d || request.cookie.session", i), "upper | lower")
		}) + `], "tableSize": 10000, "expire": "10m"}, ` + svcs + `}`},
		{"limit-jwt", `{"lbMethod": "TOKEN", "token": ` + quote(expr(lbcore.MaxExprAlts, 1, "request.header.authorization", `jwt("nope")`)) +
			`, "persistence": {"keys": [` + keys(func(i int) string {
			return expr(lbcore.MaxExprAlts, 1, "request.header.authorization", fmt.Sprintf(`jwt("k%d")`, i))
		}) + `], "tableSize": 10000, "expire": "10m"}, ` + svcs + `}`},
		{"limit-replace", `{"lbMethod": "TOKEN", "token": ` + quote(expr(1, lbcore.MaxExprFuncs, "request.url", `replace("`+bigRE+`x", "$0$0")`)) +
			`, "persistence": {"keys": [` + keys(func(i int) string {
			return expr(1, lbcore.MaxExprFuncs, "request.url", fmt.Sprintf(`replace("%s%d", "-")`, bigRE, i))
		}) + `], "tableSize": 10000, "expire": "10m"}, ` + svcs + `}`},
	}
}()

// v8WarmupConfig is the config of each node process's first run (see TestV8).
const v8WarmupConfig = `{"lbMethod": "TOKEN", "upstreamCount": 2, "debugHeader": true, "trustedForwardedHops": 1,
  "hashBalanceFactor": 150,
  "token": "${request.header.authorization | jwt(\"sub\") || request.cookie.session | jwt(\"sub\") || request.header.x-client-id | lower | prefix(64)}",
  "persistence": {"keys": ["${request.url | replace(\"a.*b|a\", \"x\")}", "${request.cookie.session | hash}",
    "${client.ip | mask(24)}", "${request.host || sip.callid}"], "tableSize": 10000, "expire": "10m"},
  "healthCheck": {}, "passiveHealth": {},
  "services": [{"name": "a", "address": "10.0.0.1:80"}, {"name": "b", "address": "10.0.0.2:80"},
    {"name": "c", "address": "[fd00::3]:80"}, {"name": "d", "address": "10.0.0.4:80", "weight": 3}]}`

// nodeForV8 finds node (>= 20); without it the test fails under CI and skips elsewhere.
func nodeForV8(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		var out []byte
		if out, err = exec.Command(node, "--version").Output(); err == nil {
			major, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), ".", 2)[0])
			if major < 20 {
				err = fmt.Errorf("%s is %s, need >= 20", node, strings.TrimSpace(string(out)))
			}
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node (>= 20) is needed for the V8 check: %v", err)
		}
		t.Skipf("no node >= 20 (%v): skipping the V8 check (it fails under CI=true)", err)
	}
	return node
}

// jsonLines decodes hashlbv8.mjs's output, one JSON value per line.
func jsonLines[T any](out *bytes.Buffer) ([]T, error) {
	var ls []T
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var l T
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("hashlbv8.mjs wrote a line that is not JSON (%v): %.300s", err, sc.Text())
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// v8Job is the job file of hashlbv8.mjs (see its header).
type v8Job struct {
	Name     string `json:"name"`
	Profile  string `json:"profile"`
	Config   string `json:"config"`
	RootID   string `json:"rootId"`
	Warmup   int    `json:"warmup"`
	Repeat   int    `json:"repeat"`
	Strings  string `json:"strings"`
	BudgetMs int    `json:"budgetMs"`
	// RecheckUs: a request over it runs again, 3 times at once and up to 7 more 25 ms apart, and counts its least (hashlbv8.mjs).
	RecheckUs int             `json:"recheckUs,omitempty"`
	Phases    json.RawMessage `json:"phases,omitempty"`
	// EtcdClusters are the clusters whose calls the script's MiniEtcd answers
	// (persistence.fleet); calls to others are never answered.
	EtcdClusters []string `json:"etcdClusters,omitempty"`
	// EtcdAnswers "hostile" makes MiniEtcd answer every call with a hostile
	// body: nested 10^4 deep, or 1 MiB.
	EtcdAnswers string `json:"etcdAnswers,omitempty"`
	// PerRequest asks for one line per request with its outcome; FinalTick
	// for a tick after a phase's last request (TestV8TCP).
	PerRequest bool `json:"perRequest,omitempty"`
	FinalTick  bool `json:"finalTick,omitempty"`
	// Filter is the Envoy filter that runs the plugin ("http" or
	// "network"), whatever its filterType says; "": the one it names.
	Filter string `json:"filter,omitempty"`
	// Env is the VM's environment; SessionCookie makes the script keep a
	// cookie jar of that name per x-v8-client (hashlbv8.mjs).
	Env           map[string]string `json:"env,omitempty"`
	SessionCookie string            `json:"sessionCookie,omitempty"`
}

// v8JobFile runs several jobs in one process; each takes what it does not set from Defaults.
type v8JobFile struct {
	Defaults v8Job   `json:"defaults"`
	Jobs     []v8Job `json:"jobs"`
}

type v8Phase struct {
	Name     string            `json:"name"`
	Requests []hostile.Request `json:"requests"`
}

// latin1 spells each byte of s as the rune of the same number, so that bytes that are not UTF-8
// cross JSON intact (encoding/json would replace them); the job says "strings": "latin1".
func latin1(s string) string {
	r := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		r[i] = rune(s[i])
	}
	return string(r)
}

func latin1Requests(rs []hostile.Request) []hostile.Request {
	out := make([]hostile.Request, len(rs))
	for i, r := range rs {
		hs := make([][2]string, len(r.Headers))
		for j, h := range r.Headers {
			hs[j] = [2]string{latin1(h[0]), latin1(h[1])}
		}
		out[i] = hostile.Request{Class: r.Class, Headers: hs, Source: latin1(r.Source), Dest: latin1(r.Dest)}
	}
	return out
}

// v8Line is any output line of hashlbv8.mjs; each type fills some fields.
type v8Line struct {
	Job       string           `json:"job"`
	Type      string           `json:"type"`
	OK        bool             `json:"ok"`
	Error     string           `json:"error"`
	Phase     string           `json:"phase"`
	Class     string           `json:"class"`
	Count     int              `json:"count"`
	P50       float64          `json:"p50Us"`
	P99       float64          `json:"p99Us"`
	Max       float64          `json:"maxUs"`
	CPUP99    float64          `json:"cpuP99Us"`
	CPUMax    float64          `json:"cpuMaxUs"`
	GuestMax  float64          `json:"guestCpuMaxUs"`
	MaxMemory int              `json:"maxMemory"`
	Outcomes  []v8Outcome      `json:"outcomes"`
	Other     int              `json:"otherOutcomes"`
	Sample    *v8Outcome       `json:"otherSample"`
	Requests  int              `json:"requests"`
	Planned   int              `json:"planned"`
	Memory    int              `json:"memory"`
	Trapped   bool             `json:"trapped"`
	Request   int              `json:"request"`
	Callback  string           `json:"callback"`
	Stderr    string           `json:"stderr"`
	Logs      any              `json:"logs"`
	ErrorLogs []string         `json:"errorLogs"`
	Traps     int              `json:"traps"`
	BudgetMs  int              `json:"budgetMs"`
	Ms        int              `json:"ms"`
	Metrics   map[string]int64 `json:"metrics"`
	Outcome   *v8Outcome       `json:"outcome"`
	Slowest   *struct {
		Class  string `json:"class"`
		Us     int    `json:"us"`
		CPUUs  int    `json:"cpuUs"`
		Warmup bool   `json:"warmup"`
	} `json:"slowest"`
}

type v8Outcome struct {
	Count    int      `json:"count"`
	Action   string   `json:"action"`
	Upstream []string `json:"upstream"`
	Service  []string `json:"service"`
	Local    *struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	} `json:"local"`
	LocalReplies int  `json:"localReplies"`
	Closed       int  `json:"closed"`
	Span         *int `json:"span"` // a connection's filter state life span, when not DownstreamConnection
	// Session is what the script's cookie jar saw (v8Job.SessionCookie).
	Session string `json:"session"`
}

// v8Run is one job of hashlbv8.mjs: one config under one profile.
type v8Run struct {
	name, profile string
	config        []byte
	warmup        int
	repeat        int
	hostileEtcd   bool // MiniEtcd answers every call with a hostile body
}

func TestV8(t *testing.T) {
	rig := newV8Rig(t, *v8Wasm)

	t.Run("harness", func(t *testing.T) { testV8Harness(t, rig.node, rig.script, rig.dir) })

	hostileReqs, benignReqs := hostile.Requests(), hostile.Benign()
	if len(hostileReqs) == 0 || len(benignReqs) == 0 {
		t.Fatalf("internal/hostile gave %d hostile and %d benign requests", len(hostileReqs), len(benignReqs))
	}
	phases, err := json.Marshal([]v8Phase{
		{Name: "benign", Requests: latin1Requests(benignReqs)},
		{Name: "hostile", Requests: latin1Requests(hostileReqs)},
	})
	if err != nil {
		t.Fatal(err)
	}
	corpus := len(hostileReqs)

	var runs []v8Run
	for _, name := range pluginConfigFiles(t) {
		runs = append(runs, v8Run{name: strings.TrimSuffix(name, ".json"), config: readRepoFile(t, "configs/"+name)})
	}
	for _, c := range append(slices.Clone(v8LocalConfigs), v8LimitConfigs...) {
		runs = append(runs, v8Run{name: c.name, config: []byte(c.config)})
	}
	runs = append(runs, v8Run{name: "local-fleet-hostile-etcd", config: []byte(v8HostileEtcdConfig), hostileEtcd: true})
	// envoy-1.33 is the floor and the strict profile: the full run. envoy-1.39 answers poll_oneoff
	// and allows more during start-up: one pass over the corpus is enough there.
	var all []v8Run
	for _, r := range runs {
		repeat := v8Requests
		if strings.HasPrefix(r.name, "limit-") {
			repeat = corpus // milliseconds a request by design: one measured pass
		}
		all = append(all, v8Run{name: r.name, profile: "envoy-1.33", config: r.config, warmup: 2 * corpus, repeat: repeat, hostileEtcd: r.hostileEtcd})
	}
	for _, r := range runs {
		all = append(all, v8Run{name: r.name, profile: "envoy-1.39", config: r.config, repeat: corpus, hostileEtcd: r.hostileEtcd})
	}

	// One node process per CPU, each running its share of the runs one after the other: V8 then
	// compiles the module once per process, not once per run. V8 compiles each function when it
	// is first called (in Envoy as here), and Go's garbage collector first runs after some
	// thousand requests: the first GC cycles of a process wait for V8 to compile the module's collector. So each
	// process starts with a warm-up run, checked like the others but not timed, whose config
	// reaches every expression function, persistence, health checks and x-forwarded-for; each
	// run then warms up on its own config with two passes over the hostile corpus.
	procs := min(runtime.NumCPU(), len(all))
	shares := make([][]v8Run, procs)
	for p := range procs {
		shares[p] = append(shares[p], v8Run{name: fmt.Sprintf("warm-up-%d", p), profile: "envoy-1.33",
			config: []byte(v8WarmupConfig), repeat: 5000})
	}
	for i, r := range all {
		shares[i%procs] = append(shares[i%procs], r)
	}
	for _, share := range shares {
		for _, r := range share {
			if _, err := lbcore.ParseConfig(r.config); err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
		}
	}
	budgetMs := int(v8PhaseBudget().Milliseconds())
	results := make([]map[string][]v8Line, procs)
	var wg sync.WaitGroup
	for p, share := range shares {
		var jobs []v8Job
		for _, r := range share {
			jobs = append(jobs, v8Job{Name: r.key(), Profile: r.profile, Config: latin1(string(r.config)), RootID: "hashlb",
				Warmup: r.warmup, Repeat: r.repeat, Strings: "latin1", BudgetMs: budgetMs,
				RecheckUs:    int(v8MaxRequest.Microseconds()),
				EtcdClusters: fleetClusters(r.config), EtcdAnswers: map[bool]string{true: "hostile"}[r.hostileEtcd],
				Env: v8Env})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[p] = rig.run(t, fmt.Sprintf("jobs-%d.json", p),
				v8JobFile{Defaults: v8Job{Phases: phases}, Jobs: jobs})
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for p, share := range shares {
		for _, r := range share {
			t.Run(r.key(), func(t *testing.T) { checkV8Run(t, r, results[p][r.key()]) })
		}
	}
}

func (r v8Run) key() string { return r.profile + "/" + r.name }

// v8Rig is what a V8 check runs: node, the harness script, the module in a
// file, and a test directory for the job files.
type v8Rig struct{ node, script, wasm, dir string }

// newV8Rig finds node (nodeForV8) and writes the module built from the tree
// into a test directory, or takes the module file wasm when it is not "".
func newV8Rig(t *testing.T, wasm string) v8Rig {
	r := v8Rig{node: nodeForV8(t), script: filepath.Join(repoRoot(t), filepath.FromSlash(v8Script)), wasm: wasm, dir: t.TempDir()}
	if r.wasm == "" {
		r.wasm = filepath.Join(r.dir, "hashlb.wasm")
		if err := os.WriteFile(r.wasm, module(t), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// run runs the jobs in one node process (runV8Jobs), written to the file
// name in the rig's directory.
func (r v8Rig) run(t *testing.T, name string, jobs v8JobFile) map[string][]v8Line {
	return runV8Jobs(t, r.node, r.script, r.wasm, filepath.Join(r.dir, name), jobs)
}

// runV8Jobs writes the jobs to file, runs node on them and returns each job's output lines.
func runV8Jobs(t *testing.T, node, script, wasmFile, file string, jobs v8JobFile) map[string][]v8Line {
	data, err := json.Marshal(jobs)
	if err != nil {
		t.Error(err)
		return nil
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Error(err)
		return nil
	}
	defer os.Remove(file)
	lines, err := runV8(node, script, wasmFile, file, 10*time.Minute)
	if err != nil {
		t.Error(err)
		return nil
	}
	out := map[string][]v8Line{}
	for _, l := range lines {
		out[l.Job] = append(out[l.Job], l)
	}
	for _, j := range jobs.Jobs {
		if ls := out[j.Name]; len(ls) == 0 || ls[len(ls)-1].Type != "summary" {
			t.Errorf("%s: no summary line from hashlbv8.mjs", j.Name)
		}
	}
	return out
}

// runV8 runs hashlbv8.mjs on one job file and parses its output. Exit status 1 is the module's
// failure, reported in the lines; any other is the harness's own.
func runV8(node, script, wasmFile, jobFile string, timeout time.Duration) ([]v8Line, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append(slices.Clone(v8Flags), script, wasmFile, jobFile)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
		return nil, fmt.Errorf("node %s: %v after %v\nstderr: %s\nlast output: %s", filepath.Base(jobFile), err,
			time.Since(start).Round(time.Millisecond), stderr.String(), tail(stdout.String(), 2000))
	}
	lines, err := jsonLines[v8Line](&stdout)
	if err != nil {
		return nil, err
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("hashlbv8.mjs wrote nothing\nstderr: %s", stderr.String())
	}
	return lines, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// checkV8Run asserts the properties of TestV8's doc comment on one run's output.
func checkV8Run(t *testing.T, r v8Run, lines []v8Line) {
	t.Helper()
	c, err := lbcore.ParseConfig(r.config)
	if err != nil {
		t.Fatal(err)
	}
	services := map[string]string{} // address -> name
	for _, s := range c.Services {
		services[s.Address] = s.Name
	}
	memory := map[string]int{}
	for _, l := range lines {
		switch l.Type {
		case "load", "start":
			if !l.OK {
				t.Errorf("%s %s: %s%s", l.Type, l.Phase, l.Error, v8Logs(l))
			}
		case "trap":
			t.Errorf("trap in phase %s, class %s, request %d, in %s: %s%s", l.Phase, l.Class, l.Request, l.Callback, l.Error,
				v8Logs(l))
		case "budget":
			t.Errorf("phase %s stopped after %d requests, over its time budget of %d ms%s", l.Phase, l.Requests, l.BudgetMs, v8Slowest(l))
		case "class":
			checkV8Class(t, c, services, l, r.warmup > 0)
		case "phase":
			if l.Requests != l.Planned && !l.Trapped {
				t.Errorf("phase %s ran %d of %d requests", l.Phase, l.Requests, l.Planned)
			}
			if !l.Trapped {
				memory[l.Phase] = l.Memory
			}
			// Every hostile answer is a failed call. A full run (10^4 requests, a second of the
			// guest's clock every 1000) gets every kind: three misses, then a probe a second; one pass
			// over the corpus gets the first three.
			want := int64(len(v8HostileEtcdAnswers))
			if r.warmup == 0 {
				want = fleet.FailLimit
			}
			if n := l.Metrics["hashlb.persistence_fleet_error"]; r.hostileEtcd && n < want {
				t.Errorf("phase %s against a hostile etcd: persistence_fleet_error = %d, want at least %d hostile answers counted as failed calls (metrics %v)",
					l.Phase, n, want, l.Metrics)
			}
			t.Logf("phase %s: %d requests in %d ms%s", l.Phase, l.Requests, l.Ms, v8Slowest(l))
		}
	}
	if b, h := memory["benign"], memory["hostile"]; b > 0 && h > 0 {
		ratio := float64(h) / float64(b)
		t.Logf("linear memory after %d requests: benign %.2f MiB, hostile %.2f MiB (%.2f×)", r.warmup+r.repeat,
			float64(b)/(1<<20), float64(h)/(1<<20), ratio)
		if r.warmup > 0 && ratio > v8MemRatio {
			t.Errorf("hostile requests grew linear memory to %.2f× a benign run's (%d vs %d bytes), limit %.1f×", ratio, h, b, v8MemRatio)
		}
	}
}

func v8Slowest(l v8Line) string {
	if s := l.Slowest; s != nil {
		return fmt.Sprintf("; slowest request: %s, %.1f ms (%.1f ms of CPU)%s", s.Class, float64(s.Us)/1000, float64(s.CPUUs)/1000,
			map[bool]string{true: ", in warm-up"}[s.Warmup])
	}
	return ""
}

func v8Logs(l v8Line) string {
	s := ""
	if l.Logs != nil {
		b, _ := json.Marshal(l.Logs)
		s += "\n  logs: " + string(b)
	}
	if l.Stderr != "" {
		s += "\n  stderr: " + tail(l.Stderr, 1500)
	}
	return s
}

// checkV8Class: each outcome is one decision, and hostile requests are served in time.
func checkV8Class(t *testing.T, c *lbcore.Config, services map[string]string, l v8Line, timed bool) {
	t.Helper()
	t.Logf("%-7s %-17s n=%-5d p50 %7.1f µs  p99 %8.1f µs  max %8.1f µs (cpu p99 %8.1f, max %8.1f, module's max %8.1f)  mem %5.2f MiB",
		l.Phase, l.Class, l.Count, l.P50, l.P99, l.Max, l.CPUP99, l.CPUMax, l.GuestMax, float64(l.MaxMemory)/(1<<20))
	if l.Other > 0 {
		t.Errorf("%s/%s: %d requests with outcomes beyond the %d distinct ones reported, e.g. %s", l.Phase, l.Class,
			l.Other, len(l.Outcomes), v8Show(l.Sample))
	}
	for i := range l.Outcomes {
		if problem := v8Decision(c, services, &l.Outcomes[i]); problem != "" {
			t.Errorf("%s/%s: %d requests %s: %s", l.Phase, l.Class, l.Outcomes[i].Count, problem, v8Show(&l.Outcomes[i]))
		}
	}
	// CPU time, not wall time: other processes on a loaded machine stretch wall time by hundreds
	// of milliseconds, which would fail the check for nothing the module did. The module's CPU:
	// the time in host functions is the script's JS here (header maps built and copied, its own
	// garbage collected), C++ in Envoy, and not the module's doing.
	if timed && l.Phase == "hostile" && l.GuestMax > float64(v8MaxRequest.Microseconds()) {
		t.Errorf("%s/%s: slowest request took %.1f ms of the module's CPU after warm-up (%.1f ms with the host's), limit %v (wall: p50 %.1f µs, p99 %.1f µs, max %.1f ms)",
			l.Phase, l.Class, l.GuestMax/1000, l.CPUMax/1000, v8MaxRequest, l.P50, l.P99, l.Max/1000)
	}
}

// v8Decision says what is wrong with an outcome, or "" if it is exactly one decision: the upstream
// header once, naming 1 to upstreamCount distinct configured services, and the service header once
// naming the first of them; or a local 503 "no healthy service". With persistence.fleet a request
// may pause while etcd (the script's MiniEtcd) answers, and must then be resumed with its decision.
func v8Decision(c *lbcore.Config, services map[string]string, o *v8Outcome) string {
	if c.Network() {
		return v8Connection(services, o)
	}
	switch {
	case o.Local != nil:
		if o.Local.Status != 503 || o.Local.Body != "no healthy service" || o.LocalReplies > 1 {
			return "got a local reply other than one 503 \"no healthy service\""
		}
		return ""
	case o.Action == "paused-then-continued" && (c.Persistence == nil || c.Persistence.Fleet == nil):
		return "were paused and resumed, which only persistence.fleet does (waiting for etcd)"
	case o.Action != "continue" && o.Action != "paused-then-continued":
		return "were left " + o.Action + " without a local reply"
	case o.Closed > 0:
		return "were closed"
	case len(o.Upstream) == 0:
		return "continued without the upstream header"
	case len(o.Upstream) > 1:
		return "continued with several upstream headers (a client copy survived)"
	}
	addrs := strings.Split(o.Upstream[0], ",")
	if len(addrs) > c.UpstreamCount {
		return fmt.Sprintf("name %d upstreams, upstreamCount is %d", len(addrs), c.UpstreamCount)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if _, ok := services[a]; !ok {
			return fmt.Sprintf("name upstream %q, not a configured service address", a)
		}
		if seen[a] {
			return fmt.Sprintf("name upstream %q twice", a)
		}
		seen[a] = true
	}
	if c.ServiceHeader != "" && (len(o.Service) != 1 || o.Service[0] != services[addrs[0]]) {
		return fmt.Sprintf("carry service header %q for upstream %s", o.Service, addrs[0])
	}
	if c.ServiceHeader == "" && len(o.Service) > 0 {
		return "carry a service header the config disables"
	}
	return ""
}

func v8Show(o *v8Outcome) string {
	b, _ := json.Marshal(o)
	return string(b)
}

// testV8Harness checks that the script refuses and traps as Envoy does, on modules written here
// byte by byte: an import Envoy lacks, and a WASI call _initialize may not make.
func testV8Harness(t *testing.T, node, script, dir string) {
	cases := []struct {
		name          string
		wasm          []byte
		typ, callback string // the line wanted
		error         string // in its error
	}{
		{"missing-import", wasmModule("env", "proxy_set_upstream_override_host", 2, false),
			"load", "", "Failed to load Wasm module due to a missing import: env.proxy_set_upstream_override_host"},
		{"restricted-callback", wasmModule("wasi_snapshot_preview1", "sched_yield", 0, true),
			"trap", "_initialize", "restricted_callback: wasi_snapshot_preview1.sched_yield called during _initialize"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wasm, job := filepath.Join(dir, tc.name+".wasm"), filepath.Join(dir, tc.name+".json")
			if err := os.WriteFile(wasm, tc.wasm, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(job, []byte(`{"profile": "envoy-1.33", "config": "{}", "phases": [{"name": "p"}]}`), 0o644); err != nil {
				t.Fatal(err)
			}
			lines, err := runV8(node, script, wasm, job, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range lines {
				if l.Type == tc.typ && !l.OK && l.Callback == tc.callback && strings.Contains(l.Error, tc.error) {
					return
				}
			}
			t.Errorf("no %q line with callback %q and error %q in\n%+v", tc.typ, tc.callback, tc.error, lines)
		})
	}
}

// wasmModule assembles a proxy-wasm module that imports mod.name (a function of params i32
// parameters returning i32), exports memory, proxy_abi_version_0_2_1 and proxy_on_memory_allocate,
// and, with callInit, an _initialize that calls the import.
func wasmModule(mod, name string, params int, callInit bool) []byte {
	str := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	section := func(id byte, body ...[]byte) []byte {
		b := bytes.Join(body, nil)
		return append([]byte{id, byte(len(b))}, b...)
	}
	importType := append([]byte{0x60, byte(params)}, bytes.Repeat([]byte{0x7f}, params)...)
	importType = append(importType, 1, 0x7f)
	types := section(1, []byte{3}, importType,
		[]byte{0x60, 0, 0},             // type 1: () -> ()
		[]byte{0x60, 1, 0x7f, 1, 0x7f}) // type 2: (i32) -> i32
	imports := section(2, []byte{1}, str(mod), str(name), []byte{0, 0})
	funcs := section(3, []byte{3, 1, 1, 2}) // functions 1, 2, 3: abi marker, _initialize, allocate
	memory := section(5, []byte{1, 0, 1})
	exports := section(7, []byte{4},
		str("memory"), []byte{2, 0},
		str("proxy_abi_version_0_2_1"), []byte{0, 1},
		str("_initialize"), []byte{0, 2},
		str("proxy_on_memory_allocate"), []byte{0, 3})
	initBody := []byte{0, 0x0b}
	if callInit {
		initBody = append(bytes.Repeat([]byte{0x41, 0}, params), 0x10, 0, 0x1a, 0x0b) // i32.const 0 × params; call 0; drop
		initBody = append([]byte{0}, initBody...)
	}
	code := section(10, []byte{3},
		[]byte{2, 0, 0x0b},
		append([]byte{byte(len(initBody))}, initBody...),
		[]byte{4, 0, 0x41, 0, 0x0b}) // allocate: i32.const 0
	return bytes.Join([][]byte{{0, 'a', 's', 'm', 1, 0, 0, 0}, types, imports, funcs, memory, exports, code}, nil)
}

// fleetClusters is the etcd cluster of a configuration with persistence.fleet.
func fleetClusters(config []byte) []string {
	c, err := lbcore.ParseConfig(config)
	if err != nil || c.Persistence == nil || c.Persistence.Fleet == nil {
		return nil
	}
	return []string{c.Persistence.Fleet.Cluster}
}

// v8Connection says what is wrong with a connection's outcome (filterType network), or "" if it
// went to one configured service through the ORIGINAL_DST filter state, for the connection's
// life: every configuration TestV8 runs has a selectable service.
func v8Connection(services map[string]string, o *v8Outcome) string {
	switch {
	case o.Action != "continue" || o.Closed > 0:
		return "were " + o.Action + " or closed although services are selectable"
	case len(o.Upstream) != 1:
		return "continued without the ORIGINAL_DST filter state"
	case services[o.Upstream[0]] == "":
		return fmt.Sprintf("went to %q, not a configured service address", o.Upstream[0])
	case o.Span != nil:
		return fmt.Sprintf("set the filter state with life span %d, not DownstreamConnection (2)", *o.Span)
	case len(o.Service) > 0 || o.Local != nil:
		return "carry a header or a local reply, which a connection has not"
	}
	return ""
}
