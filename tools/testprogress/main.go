package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string // build events
}

// pkgState is what is known of one package while it runs.
type pkgState struct {
	start   time.Time
	running []string            // tests started and not ended, in start order
	output  map[string][]string // test ("" for the package) → its output lines
	// said is each running test's last line of its own (not go test's
	// framing): what a long step, such as building a dependency, says it
	// is doing.
	said map[string]string
	// subs is each top-level test's direct subtests' time, summed: a
	// test whose subtests run in parallel ends having taken none itself.
	subs map[string]float64
}

type progress struct {
	mu       sync.Mutex
	out      io.Writer
	start    time.Time
	pkgs     map[string]*pkgState
	passed   []string
	failed   []string
	failures int // failed tests
	skipped  []string
	building bool
	took     map[string]float64 // package → seconds, for the summary
	slow     []testTime         // the slowest top-level tests, for the summary
}

// testTime is how long one top-level test took.
type testTime struct {
	name string // package and test
	secs float64
}

// slowest is how many top-level tests the summary names by their time.
const slowest = 10

func main() {
	p := &progress{out: os.Stdout, start: time.Now(), pkgs: map[string]*pkgState{}}
	stop := make(chan struct{})
	go p.beat(30*time.Second, stop)
	ok := p.read(os.Stdin)
	close(stop)
	if !p.summary() || !ok {
		os.Exit(1)
	}
}

// beat prints what is running every interval until stop is closed.
func (p *progress) beat(interval time.Duration, stop chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.mu.Lock()
			fmt.Fprintf(p.out, "test: %s: %s\n", p.since(p.start), p.runningText())
			p.mu.Unlock()
		}
	}
}

func (p *progress) since(t time.Time) string { return time.Since(t).Round(time.Second).String() }

// runningText names the running packages with their running tests.
func (p *progress) runningText() string {
	if len(p.pkgs) == 0 {
		return "building or linking the next test binary"
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(p.pkgs)) {
		st := p.pkgs[name]
		s := short(name) + " " + p.since(st.start)
		if n := len(st.running); n > 0 {
			last := st.running[n-1]
			s += " (" + last
			if said := st.said[last]; said != "" {
				s += ": " + said
			}
			if n > 1 {
				s += fmt.Sprintf(" and %d more", n-1)
			}
			s += ")"
		}
		parts = append(parts, s)
	}
	return "running " + strings.Join(parts, ", ")
}

// read consumes the event stream; it reports false when a line was not an
// event or a package never ended.
func (p *progress) read(r io.Reader) bool {
	ok := true
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			// Not an event (go test's own errors, a build failure's text): pass it on.
			fmt.Fprintln(p.out, sc.Text())
			continue
		}
		p.mu.Lock()
		p.event(e)
		p.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for name := range p.pkgs {
		fmt.Fprintf(p.out, "test: %s: no result (the run ended)\n", short(name))
		p.failed = append(p.failed, name)
		ok = false
	}
	return ok
}

func (p *progress) event(e event) {
	switch e.Action {
	case "build-output":
		fmt.Fprint(p.out, e.Output)
		return
	case "build-fail":
		fmt.Fprintf(p.out, "test: %s: build failed\n", e.ImportPath)
		p.failed = append(p.failed, e.ImportPath)
		return
	}
	if e.Package == "" {
		return
	}
	st := p.pkgs[e.Package]
	if st == nil {
		if e.Action == "skip" && e.Test == "" { // no test files: say nothing
			return
		}
		st = &pkgState{start: time.Now(), output: map[string][]string{}}
		p.pkgs[e.Package] = st
		fmt.Fprintf(p.out, "test: %s: started (%s since the start)\n", short(e.Package), p.since(p.start))
	}
	switch e.Action {
	case "run":
		if e.Test != "" {
			st.running = append(st.running, e.Test)
		}
	case "output":
		if rest, ok := strings.CutPrefix(e.Output, summaryPrefix); ok && e.Test == "" {
			fmt.Fprintf(p.out, "test: %s: %s", short(e.Package), rest)
			return
		}
		st.output[e.Test] = append(st.output[e.Test], e.Output)
		if line := strings.TrimSpace(e.Output); e.Test != "" && line != "" && !framing(line) {
			if len(line) > maxSaid {
				line = line[:maxSaid] + "…"
			}
			if st.said == nil {
				st.said = map[string]string{}
			}
			st.said[e.Test] = line
		}
	case "pass", "fail", "skip":
		if e.Test != "" {
			st.running = slices.DeleteFunc(st.running, func(t string) bool { return t == e.Test })
			switch e.Action {
			case "fail":
				p.failures++
				fmt.Fprintf(p.out, "test: %s: %s failed:\n%s", short(e.Package), e.Test, strings.Join(st.output[e.Test], ""))
			case "skip":
				p.skipped = append(p.skipped, short(e.Package)+" "+e.Test)
			}
			delete(st.output, e.Test)
			delete(st.said, e.Test)
			switch parent, _, sub := strings.Cut(e.Test, "/"); {
			case !sub:
				p.keepSlow(testTime{short(e.Package) + " " + e.Test, max(e.Elapsed, st.subs[e.Test])})
				delete(st.subs, e.Test)
			case !strings.Contains(e.Test[len(parent)+1:], "/"):
				if st.subs == nil {
					st.subs = map[string]float64{}
				}
				st.subs[parent] += e.Elapsed
			}
			return
		}
		delete(p.pkgs, e.Package)
		if p.took == nil {
			p.took = map[string]float64{}
		}
		p.took[short(e.Package)] = e.Elapsed
		if e.Action == "fail" {
			p.failed = append(p.failed, e.Package)
			// The package's own output (a panic, TestMain's words), and the
			// end of what the tests still running said: a timeout's report is
			// attributed to the test it stopped.
			fmt.Fprintf(p.out, "test: %s: FAIL (%.1fs)\n%s", short(e.Package), e.Elapsed, strings.Join(st.output[""], ""))
			for _, name := range st.running {
				out := st.output[name]
				fmt.Fprintf(p.out, "test: %s: %s was still running:\n%s", short(e.Package), name, strings.Join(out[max(0, len(out)-60):], ""))
			}
			return
		}
		p.passed = append(p.passed, e.Package)
		fmt.Fprintf(p.out, "test: %s: ok (%.1fs)\n", short(e.Package), e.Elapsed)
	}
}

// summaryPrefix starts a line a package prints outside its tests (from
// TestMain) for the run's output: it is printed as it comes, without the
// prefix.
const summaryPrefix = "summary: "

// maxSaid bounds the bytes of a test's own line that the beat repeats.
const maxSaid = 200

// framing reports whether an output line is go test's own (=== RUN, --- PASS,
// PASS, ok …) rather than the test's.
func framing(line string) bool {
	return strings.HasPrefix(line, "=== ") || strings.HasPrefix(line, "--- ") || line == "PASS" || line == "FAIL"
}

// summary prints the totals and reports whether everything passed.
func (p *progress) summary() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.skipped {
		fmt.Fprintf(p.out, "test: skipped: %s\n", s)
	}
	if times := p.times(); times != "" {
		fmt.Fprintf(p.out, "test: time per package: %s\n", times)
	}
	if len(p.slow) > 0 {
		var parts []string
		for _, t := range p.slow {
			parts = append(parts, fmt.Sprintf("%s %.0fs", t.name, t.secs))
		}
		fmt.Fprintf(p.out, "test: slowest tests: %s\n", strings.Join(parts, ", "))
	}
	if len(p.failed) > 0 {
		fmt.Fprintf(p.out, "test: FAIL after %s: %d packages ok, %d failed (%s), %d tests failed\n",
			p.since(p.start), len(p.passed), len(p.failed), strings.Join(shortAll(p.failed), ", "), p.failures)
		return false
	}
	fmt.Fprintf(p.out, "test: ok after %s: %d packages\n", p.since(p.start), len(p.passed))
	return true
}

// times lists the packages that took a second or more, the slowest first.
func (p *progress) times() string {
	var pkgs []string
	for pkg, secs := range p.took {
		if secs >= 1 {
			pkgs = append(pkgs, pkg)
		}
	}
	sort.Slice(pkgs, func(i, j int) bool { return p.took[pkgs[i]] > p.took[pkgs[j]] })
	for i, pkg := range pkgs {
		pkgs[i] = fmt.Sprintf("%s %.0fs", pkg, p.took[pkg])
	}
	return strings.Join(pkgs, ", ")
}

// keepSlow keeps t if it is among the slowest tests seen.
func (p *progress) keepSlow(t testTime) {
	i, _ := slices.BinarySearchFunc(p.slow, t, func(a, b testTime) int {
		switch {
		case a.secs > b.secs:
			return -1
		case a.secs < b.secs:
			return 1
		}
		return 0
	})
	if i < slowest {
		p.slow = slices.Insert(p.slow, i, t)[:min(len(p.slow)+1, slowest)]
	}
}

// short drops the module path.
func short(pkg string) string {
	if rest, ok := strings.CutPrefix(pkg, "github.com/hashlb/hashlb/"); ok {
		return rest
	}
	if pkg == "github.com/hashlb/hashlb" {
		return "."
	}
	return pkg
}

func shortAll(pkgs []string) []string {
	out := make([]string, len(pkgs))
	for i, p := range pkgs {
		out[i] = short(p)
	}
	return out
}
