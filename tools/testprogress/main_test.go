package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestProgress(t *testing.T) {
	tests := []struct {
		name   string
		events string
		ok     bool
		want   []string // lines of the output, in order
	}{
		{name: "passing packages", ok: true, events: `{"Action":"start","Package":"github.com/hashlb/hashlb/lbcore"}
{"Action":"run","Package":"github.com/hashlb/hashlb/lbcore","Test":"TestA"}
{"Action":"output","Package":"github.com/hashlb/hashlb/lbcore","Test":"TestA","Output":"noise\n"}
{"Action":"pass","Package":"github.com/hashlb/hashlb/lbcore","Test":"TestA"}
{"Action":"pass","Package":"github.com/hashlb/hashlb/lbcore","Elapsed":1.5}
{"Action":"skip","Package":"github.com/hashlb/hashlb/cmd/empty"}`,
			want: []string{"test: lbcore: started", "test: lbcore: ok (1.5s)", "test: time per package: lbcore 2s", "test: slowest tests: lbcore TestA 0s", "test: ok after"}},
		{name: "a package's summary line", ok: true, events: `{"Action":"start","Package":"github.com/hashlb/hashlb/e2e/envoy"}
{"Action":"output","Package":"github.com/hashlb/hashlb/e2e/envoy","Output":"summary: envoyrun: 3 Envoys started\n"}
{"Action":"output","Package":"github.com/hashlb/hashlb/e2e/envoy","Output":"other noise\n"}
{"Action":"pass","Package":"github.com/hashlb/hashlb/e2e/envoy","Elapsed":2}`,
			want: []string{"test: e2e/envoy: envoyrun: 3 Envoys started\n", "test: e2e/envoy: ok (2.0s)"}},
		{name: "the slowest tests", ok: true, events: slowEvents(12),
			want: []string{"test: slowest tests: lbcore Test12 12s, lbcore Test11 11s", "lbcore Test1 10s, lbcore Test9 9s", "lbcore Test4 4s\ntest: ok after"}},
		{name: "a failing test", events: `{"Action":"start","Package":"github.com/hashlb/hashlb/e2e"}
{"Action":"run","Package":"github.com/hashlb/hashlb/e2e","Test":"TestB"}
{"Action":"output","Package":"github.com/hashlb/hashlb/e2e","Test":"TestB","Output":"    b_test.go:9: want 2\n"}
{"Action":"fail","Package":"github.com/hashlb/hashlb/e2e","Test":"TestB"}
{"Action":"fail","Package":"github.com/hashlb/hashlb/e2e","Elapsed":2}`,
			want: []string{"test: e2e: TestB failed:", "b_test.go:9: want 2", "test: e2e: FAIL (2.0s)", "1 tests failed"}},
		{name: "a timeout", events: `{"Action":"start","Package":"github.com/hashlb/hashlb/e2e"}
{"Action":"run","Package":"github.com/hashlb/hashlb/e2e","Test":"TestSlow"}
{"Action":"output","Package":"github.com/hashlb/hashlb/e2e","Test":"TestSlow","Output":"panic: test timed out after 15m0s\n"}
{"Action":"fail","Package":"github.com/hashlb/hashlb/e2e","Elapsed":900}`,
			want: []string{"test: e2e: FAIL (900.0s)", "TestSlow was still running:", "panic: test timed out"}},
		{name: "the run ends inside a package", events: `{"Action":"start","Package":"github.com/hashlb/hashlb/e2e"}`,
			want: []string{"test: e2e: no result (the run ended)", "test: FAIL"}},
		{name: "a build failure", events: `{"ImportPath":"github.com/hashlb/hashlb/x","Action":"build-output","Output":"x.go:1: syntax error\n"}
{"ImportPath":"github.com/hashlb/hashlb/x","Action":"build-fail"}`,
			want: []string{"x.go:1: syntax error", "build failed", "test: FAIL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			p := &progress{out: &out, start: time.Now(), pkgs: map[string]*pkgState{}}
			ok := p.read(strings.NewReader(tt.events))
			ok = p.summary() && ok
			if ok != tt.ok {
				t.Errorf("reported ok = %v, want %v:\n%s", ok, tt.ok, out.String())
			}
			rest := out.String()
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("output\n%s\nwant %q (after the lines before it)", out.String(), w)
				}
				rest = rest[i+len(w):]
			}
			if strings.Contains(out.String(), "noise") {
				t.Errorf("a passing test's output was printed:\n%s", out.String())
			}
		})
	}
}

func TestBeat(t *testing.T) {
	var out strings.Builder
	p := &progress{out: &out, start: time.Now(), pkgs: map[string]*pkgState{
		"github.com/hashlb/hashlb/e2e": {start: time.Now(), running: []string{"TestA", "TestB"}, output: map[string][]string{}}}}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { p.beat(time.Millisecond, stop); close(done) }()
	printed := func() string {
		p.mu.Lock()
		defer p.mu.Unlock()
		return out.String()
	}
	for deadline := time.Now().Add(10 * time.Second); printed() == "" && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	<-done
	if got := printed(); !strings.Contains(got, "running e2e") || !strings.Contains(got, "(TestB and 1 more)") {
		t.Errorf("beat printed %q, want the running package and test", got)
	}
}

// TestBeatSaysWhatALongStepDoes: the beat names what the running test last
// said of its own (a dependency it builds), not go test's framing.
func TestBeatSaysWhatALongStepDoes(t *testing.T) {
	var out strings.Builder
	p := &progress{out: &out, start: time.Now(), pkgs: map[string]*pkgState{}}
	p.read(strings.NewReader(`{"Action":"start","Package":"github.com/hashlb/hashlb/cmd/hashlb-controller"}
{"Action":"run","Package":"github.com/hashlb/hashlb/cmd/hashlb-controller","Test":"TestCommand"}
{"Action":"output","Package":"github.com/hashlb/hashlb/cmd/hashlb-controller","Test":"TestCommand","Output":"=== RUN   TestCommand\n"}
{"Action":"output","Package":"github.com/hashlb/hashlb/cmd/hashlb-controller","Test":"TestCommand","Output":"testenv: building kube-apiserver v1.34.1 into /c (first run only)\n"}`))
	if got, want := p.runningText(), "running cmd/hashlb-controller 0s (TestCommand: testenv: building kube-apiserver v1.34.1 into /c (first run only))"; got != want {
		t.Errorf("runningText() = %q, want %q", got, want)
	}
}

// slowEvents is a package of n passing tests, TestK taking K seconds, each
// with a sub-subtest that took longer than the slowest test; TestK's time is
// its own or, when it ran parallel subtests, theirs summed (Test1 ran two
// of 5 s).
func slowEvents(n int) string {
	var b strings.Builder
	b.WriteString(`{"Action":"start","Package":"github.com/hashlb/hashlb/lbcore"}` + "\n")
	for _, v := range []string{"1.36", "1.40"} {
		fmt.Fprintf(&b, `{"Action":"pass","Package":"github.com/hashlb/hashlb/lbcore","Test":"Test1/%s","Elapsed":5}`+"\n", v)
	}
	for k := 1; k <= n; k++ {
		fmt.Fprintf(&b, `{"Action":"pass","Package":"github.com/hashlb/hashlb/lbcore","Test":"Test%d/a/b","Elapsed":%d}`+"\n", k, 100+k)
		fmt.Fprintf(&b, `{"Action":"pass","Package":"github.com/hashlb/hashlb/lbcore","Test":"Test%d","Elapsed":%d}`+"\n", k, k)
	}
	b.WriteString(`{"Action":"pass","Package":"github.com/hashlb/hashlb/lbcore","Elapsed":80}`)
	return b.String()
}
