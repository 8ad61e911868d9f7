package envoy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/loadgen"
)

// The profile of BenchmarkEnvoyPeers: after the rounds, each peer's Envoy
// is sampled by perf (the cpu-clock software event: this machine's virtual
// CPUs have no hardware counters) during one more closed-loop run, and the
// samples are counted by where the CPU was: the kernel (sockets, epoll,
// scheduling), Envoy's own code (the binary: HTTP codec, router, load
// balancer, and the V8 runtime and proxy-wasm host functions, which are
// linked into it), code V8 generated at run time (the module compiled by
// V8, and V8's stubs and trampolines between Envoy and the module: mapped
// anonymously, so perf sees no file), and the C library. The release
// binary is stripped, so perf cannot name functions inside it; the split
// by mapping is what a profile of it can tell, and the no-op module's row
// separates a Wasm filter's fixed cost (V8 entry, contexts, the ABI's
// callbacks) from hashlb's own.

// peerPerfCategories are the columns of the profile table, in order.
var peerPerfCategories = []string{"kernel", "envoy", "jit", "libc", "other"}

// peerPerfCategory classifies one dso of perf report.
func peerPerfCategory(dso string) string {
	switch {
	case strings.HasPrefix(dso, "[kernel") || strings.HasPrefix(dso, "[vdso]"):
		return "kernel"
	case dso == "envoy":
		return "envoy"
	case strings.HasPrefix(dso, "[anon") || strings.HasPrefix(dso, "//anon") || strings.HasPrefix(dso, "[unknown]") ||
		strings.HasPrefix(dso, "perf-") || strings.HasPrefix(dso, "[JIT]") || strings.HasPrefix(dso, "memfd:"):
		return "jit"
	case strings.HasPrefix(dso, "libc") || strings.HasPrefix(dso, "libm") || strings.HasPrefix(dso, "ld-linux") || strings.HasPrefix(dso, "libpthread"):
		return "libc"
	}
	return "other"
}

// peerPerfWorks reports whether perf can sample a process here.
func peerPerfWorks() (string, error) {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(perf, "record", "-e", "cpu-clock", "-o", "/dev/null", "-q", "--", "true").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("perf record: %v: %s", err, bytes.TrimSpace(out))
	}
	return perf, nil
}

// peerProfiles samples every peer and returns the profile's table (or a
// line saying why there is none).
func peerProfiles(b *testing.B, runs []*peerRun) string {
	perf, err := peerPerfWorks()
	if err != nil {
		return fmt.Sprintf("No profile: %v.\n\n", err)
	}
	dir := b.TempDir()
	for _, r := range runs {
		file := filepath.Join(dir, r.key+".data")
		// perf samples for a fixed time that spans the load generator's run
		// with a margin either side (attaching to every thread takes a
		// moment on a busy machine); the idle margins add few samples.
		window := *peerDur + time.Second
		cmd := exec.Command(perf, "record", "-e", "cpu-clock", "-F", "1999", "-q", "-o", file, "-p", strconv.Itoa(r.e.Pid()),
			"--", "sleep", strconv.FormatFloat(window.Seconds(), 'f', 3, 64))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return fmt.Sprintf("No profile: perf record: %v.\n\n", err)
		}
		time.Sleep(500 * time.Millisecond)
		res := loadgen.Closed(context.Background(), r.addr, r.req, *peerConns, *peerDur)
		if err := cmd.Wait(); err != nil {
			return fmt.Sprintf("No profile: perf record: %v: %s\n\n", err, stderr.String())
		}
		peerAnswered(b, r, res)
		out, err := exec.Command(perf, "report", "-i", file, "--stdio", "--sort", "dso", "-q", "--percent-limit", "0").CombinedOutput()
		if err != nil {
			return fmt.Sprintf("No profile: perf report: %v: %s\n\n", err, out)
		}
		r.prof = map[string]float64{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 || !strings.HasSuffix(f[0], "%") {
				continue
			}
			pct, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
			if err != nil {
				continue
			}
			r.prof[peerPerfCategory(strings.Join(f[1:], " "))] += pct / 100
		}
		os.Remove(file)
	}
	var sb strings.Builder
	sb.WriteString("Where each peer's Envoy CPU goes (perf, cpu-clock samples during one more closed-loop run; µs per request = the share × the median CPU µs/req above):\n\n")
	sb.WriteString("| peer | kernel µs | Envoy binary µs | V8-generated code µs | libc µs | other µs |\n|---|---|---|---|---|---|\n")
	for _, r := range runs {
		cpu := peerMedian(r.cpuUs)
		fmt.Fprintf(&sb, "| %s |", r.name)
		for _, c := range peerPerfCategories {
			fmt.Fprintf(&sb, " %.1f (%.0f %%) |", r.prof[c]*cpu, r.prof[c]*100)
		}
		sb.WriteString("\n")
	}
	sb.WriteString("\n")
	sb.WriteString(peerProfileDiffs(runs))
	return sb.String()
}

// peerProfileDiffs is the table of differences between peers, category by
// category (µs per request): where a row's extra CPU goes.
func peerProfileDiffs(runs []*peerRun) string {
	by := map[string]*peerRun{}
	for _, r := range runs {
		by[r.key] = r
	}
	cat := func(key, c string) float64 {
		r := by[key]
		if c == "total" {
			return peerMedian(r.cpuUs)
		}
		return r.prof[c] * peerMedian(r.cpuUs)
	}
	type diff struct {
		what string
		plus []string // keys added
		less []string // keys subtracted
	}
	diffs := []diff{
		{"a Wasm filter's floor: no-op module − limit", []string{pNoop}, []string{pLimit}},
		{"Envoy's steering by header: override_host − limit", []string{pOverride}, []string{pLimit}},
		{"ring_hash − limit", []string{pRing}, []string{pLimit}},
		{"**hashlb URLHASH − ring_hash**", []string{pHashlb}, []string{pRing}},
		{"hashlb's own (host calls it makes + its Wasm code): hashlb − no-op − (override_host − limit)", []string{pHashlb, pLimit}, []string{pNoop, pOverride}},
		{"persistence hit: hashlb+persistence − hashlb", []string{pPersist}, []string{pHashlb}},
		{"**hashlb 10⁴ − maglev 10⁴**", []string{pHashlbN}, []string{pMaglevN}},
		{"10⁴ services: hashlb 10⁴ − hashlb", []string{pHashlbN}, []string{pHashlb}},
		{"10⁴ endpoints: maglev 10⁴ − maglev", []string{pMaglevN}, []string{pMaglev}},
		{"Envoy's steering by header at 10⁴: override_host 10⁴ − override_host", []string{pOverrideN}, []string{pOverride}},
		{"hashlb's own at 10⁴: hashlb 10⁴ − no-op − (override_host 10⁴ − limit)", []string{pHashlbN, pLimit}, []string{pNoop, pOverrideN}},
		{"**hashlb policy − ring_hash**", []string{pPolicy}, []string{pRing}},
		{"**hashlb policy 10⁴ − ring_hash 10⁴**", []string{pPolicyN}, []string{pRingN}},
		{"hashlb policy − hashlb Wasm", []string{pPolicy}, []string{pHashlb}},
	}
	var sb strings.Builder
	sb.WriteString("Differences, µs of Envoy CPU per request (from the two tables above):\n\n")
	sb.WriteString("| difference | total | kernel | Envoy binary | V8-generated code | libc | other |\n|---|---|---|---|---|---|---|\n")
	for _, d := range diffs {
		if slices.ContainsFunc(append(d.plus, d.less...), func(k string) bool { return by[k] == nil }) {
			continue // a benchmark without that row
		}
		fmt.Fprintf(&sb, "| %s |", d.what)
		for _, c := range append([]string{"total"}, peerPerfCategories...) {
			v := 0.0
			for _, k := range d.plus {
				v += cat(k, c)
			}
			for _, k := range d.less {
				v -= cat(k, c)
			}
			fmt.Fprintf(&sb, " %+.1f |", v)
		}
		sb.WriteString("\n")
	}
	sb.WriteString("\n")
	return sb.String()
}
