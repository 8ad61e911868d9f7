package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/lbcore"
)

// The ns.conf corpus: testdata/nsconf/<case>/ns.conf, written from the
// NetScaler command reference (see internal/nsconf), with its golden
// configurations in want/ and its golden report in report.golden.
// go test ./cmd/hashlb -run NSConf -update rewrites them.

// nsconfCorpus lists every case of the corpus and what it covers; a
// directory of testdata/nsconf not listed here fails TestNSConfCorpusListed.
var nsconfCorpus = []struct {
	name     string
	covers   string
	wantExit int
}{
	{name: "citrix-s1s2s3", covers: "the Citrix S1/S2/S3 example: three services behind a URLHASH vserver"},
	{name: "hash-methods", covers: "every hashing method, -hashLength, -netmask, -v6netmasklen, -backupLBMethod, weights, -hashId, -state DISABLED, IPv6, the default method"},
	{name: "token-rules", covers: "TOKEN with every translated expression form, ALT chains, a named expression, an expression not understood, TOKEN without -rule"},
	{name: "persistence", covers: "SOURCEIP with masks and clamped timeouts, DESTIP, SRCIPDESTIP, CALLID, RULE, the types hashlb lacks, set lb vserver"},
	{name: "service-groups", covers: "service groups and members, group and server state, monitors, -usePortForHashLb NO and its collisions", wantExit: 1},
	{name: "nearest-methods", covers: "methods and backup methods hashlb lacks, flags it has no equivalent for"},
	{name: "malformed", covers: "unbalanced quotes, unknown flags, bad values, binds to missing services and vservers, duplicates, domain names, ignored lines", wantExit: 1},
	{name: "readme", covers: "the worked example of docs/nsconf.md", wantExit: 1},
	{name: "full-save", covers: "a full save ns config: appliance lines, internal services, built-in monitors, SSL and SSL_BRIDGE services, " +
		"HTTP and HTTP-ECV monitors bound to services and a service group, mixed monitors in one vserver, TCP/PING/DNS/USER/LDAP monitors, " +
		"a jsessionid RULE wrapped over two lines inside its quote"},
	{name: "monitor-destport-zero", covers: "-destPort 0: the probe goes to the service's own port"},
	{name: "monitor-retries", covers: "-failureRetries M of -retries N (fewer, 0, more)"},
	{name: "builtin-monitor-set", covers: "set lb monitor on the built-in http and https-ecv monitors, applied to the services bound to them; tcp-default, which the appliance fixes; a customised built-in nothing is bound to"},
	{name: "persist-masks", covers: "-persistMask and -v6persistmasklen on DESTIP and SRCIPDESTIP persistence"},
	{name: "default-monitor", covers: "services bound to no monitor: tcp-default (ping-default for UDP) written as passiveHealth, with a service bound to a TCP monitor beside them"},
	{name: "health-monitor-no", covers: "-healthMonitor NO on services and a service group: no probe when every service has it, a warning on its line when the configuration probes others"},
	{name: "two-monitors", covers: "services bound to two monitors: which is kept and why (a tie, and one bound to more), what the other's check misses"},
	{name: "disabled-vserver", covers: "a DISABLED vserver (-state DISABLED, disable lb vserver): written with every service disabled, naming the ones to enable; enable lb vserver"},
	{name: "single-quoted-names", covers: "names and a value in single quotes, which the CLI takes as double quotes"},
	{name: "slow-start", covers: "-newServiceRequest N PERCENT with -newServiceRequestIncrementInterval (add and set lb vserver, a window in whole seconds and one rounded up to the millisecond); PER_SECOND, the default unit, no interval, a non-hashing method and 100 PERCENT, which are not"},
	{name: "wrapped-commands", covers: "a monitor wrapped over three lines, its quote closed on the second and its -destPort and -secure on the third; a vserver whose flags go on on the next line"},
}

// TestNSConfCorpus runs import-nsconf -o on every case: its exit status,
// its report and the configurations it writes are the golden ones, and every
// configuration passes lbcore.ParseConfig, as hashlb check does.
func TestNSConfCorpus(t *testing.T) {
	for _, tc := range nsconfCorpus {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := filepath.Abs(filepath.Join("testdata", "nsconf", tc.name))
			if err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			t.Chdir(dir) // the report names the file as given: ns.conf:N
			var stdout, stderr bytes.Buffer
			code := run([]string{"import-nsconf", "ns.conf", "-o", out}, &stdout, &stderr)
			if code != tc.wantExit {
				t.Errorf("import-nsconf %s: exit %d, want %d\n%s", tc.name, code, tc.wantExit, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("import-nsconf -o printed to stdout:\n%s", stdout.String())
			}
			checkEveryLineOnce(t, "ns.conf", stderr.String())
			got := readJSONDir(t, out)
			for name, js := range got {
				if _, err := lbcore.ParseConfig(js); err != nil {
					t.Errorf("%s: ParseConfig: %v\n%s", name, err, js)
				}
			}
			if len(got) > 0 {
				var checkOut, checkErr bytes.Buffer
				files, _ := filepath.Glob(filepath.Join(out, "*.json"))
				if code := run(append([]string{"check"}, files...), &checkOut, &checkErr); code != 0 {
					t.Errorf("hashlb check of the written configurations: exit %d\n%s%s", code, checkOut.String(), checkErr.String())
				}
			}
			if *update {
				os.RemoveAll("want")
				if err := os.MkdirAll("want", 0o755); err != nil {
					t.Fatal(err)
				}
				for name, js := range got {
					if err := os.WriteFile(filepath.Join("want", name), js, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile("report.golden", stderr.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want := readJSONDir(t, "want")
			for _, name := range sortedKeys(got, want) {
				if !bytes.Equal(got[name], want[name]) {
					t.Errorf("%s/want/%s:\ngot\n%s\nwant\n%s", tc.name, name, got[name], want[name])
				}
			}
			report, err := os.ReadFile("report.golden")
			if err != nil {
				t.Fatalf("%v (go test ./cmd/hashlb -run NSConf -update creates it)", err)
			}
			if stderr.String() != string(report) {
				t.Errorf("%s: report:\n%s\nwant (report.golden):\n%s", tc.name, stderr.String(), report)
			}
		})
	}
}

// checkEveryLineOnce: the report has one status line ("file:N: status…",
// warnings apart) for every non-blank line of file, and none for another.
func checkEveryLineOnce(t *testing.T, file, report string) {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for _, l := range strings.Split(report, "\n") {
		rest, ok := strings.CutPrefix(l, file+":")
		if !ok {
			continue
		}
		num, tail, ok := strings.Cut(rest, ": ")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || strings.HasPrefix(tail, "warning: ") {
			continue
		}
		seen[n]++
	}
	for i, line := range strings.Split(strings.TrimSuffix(string(src), "\n"), "\n") {
		blank := strings.TrimSpace(line) == ""
		if c := seen[i+1]; (blank && c != 0) || (!blank && c != 1) {
			t.Errorf("%s:%d (%q) is reported %d times, want %d", file, i+1, line, c, map[bool]int{true: 0, false: 1}[blank])
		}
		delete(seen, i+1)
	}
	for n := range seen {
		t.Errorf("the report has a line %s:%d, which the file does not", file, n)
	}
}

// readJSONDir returns the *.json files of dir by name (none if dir is
// missing).
func readJSONDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

func sortedKeys(ms ...map[string][]byte) []string {
	var out []string
	for _, m := range ms {
		for k := range m {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestNSConfCorpusListed: every case directory is in nsconfCorpus, with an
// ns.conf.
func TestNSConfCorpusListed(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join("testdata", "nsconf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if !slices.ContainsFunc(nsconfCorpus, func(c struct {
			name     string
			covers   string
			wantExit int
		}) bool {
			return c.name == e.Name()
		}) {
			t.Errorf("testdata/nsconf/%s is not in nsconfCorpus", e.Name())
		}
		if _, err := os.Stat(filepath.Join("testdata", "nsconf", e.Name(), "ns.conf")); err != nil {
			t.Errorf("testdata/nsconf/%s: %v", e.Name(), err)
		}
	}
}

// TestNSConfOutputs: without -o the configurations go to stdout, each after
// a "// file" line; with -vserver stdout is exactly that vserver's JSON and
// the report lists only its lines.
func TestNSConfOutputs(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantExit   int
		wantStdout string // the golden file of stdout, in testdata/nsconf/<case>/
		wantReport []string
	}{
		{name: "stdout", args: []string{"ns.conf"}, wantStdout: "stdout.golden",
			wantReport: []string{"ns.conf: 14 lines: 10 translated, 1 ignored, 0 ignored (built-in), 2 not translated, 1 failed; 7 warnings; 2 configurations"}, wantExit: 1},
		{name: "one vserver", args: []string{"ns.conf", "-vserver", "vs_static"}, wantStdout: "want/vs_static.json",
			wantReport: []string{"ns.conf: lb vserver vs_static: 7 lines: 7 translated, 0 ignored, 0 ignored (built-in), 0 not translated, 0 failed; 4 warnings; 1 configuration; 7 lines about other vservers or none not listed"}},
		{name: "flags before the file", args: []string{"-vserver", "vs_shop", "ns.conf"}, wantStdout: "want/vs_shop.json", wantExit: 1,
			wantReport: []string{"ns.conf:12: failed: bind lb vserver vs_shop web3_http: web3_http not written: its server web3 (ns.conf:3) is a domain name, not an IP address"}},
		{name: "no such vserver", args: []string{"ns.conf", "-vserver", "vs_nope"}, wantExit: 1,
			wantReport: []string{`ns.conf: no lb vserver named "vs_nope" (the file has: vs_shop, vs_static)`}},
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "nsconf", "readme"))
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"import-nsconf"}, tt.args...), &stdout, &stderr)
			if code != tt.wantExit {
				t.Errorf("import-nsconf %s: exit %d, want %d\n%s", strings.Join(tt.args, " "), code, tt.wantExit, stderr.String())
			}
			for _, l := range tt.wantReport {
				if !slices.Contains(strings.Split(stderr.String(), "\n"), l) {
					t.Errorf("import-nsconf %s: report lacks %q:\n%s", strings.Join(tt.args, " "), l, stderr.String())
				}
			}
			want := []byte{}
			if tt.wantStdout != "" {
				if *update && tt.wantStdout == "stdout.golden" {
					os.WriteFile(tt.wantStdout, stdout.Bytes(), 0o644)
				}
				if want, err = os.ReadFile(tt.wantStdout); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(stdout.Bytes(), want) {
				t.Errorf("import-nsconf %s: stdout\n%s\nwant (%s)\n%s", strings.Join(tt.args, " "), stdout.Bytes(), tt.wantStdout, want)
			}
		})
	}
}

func TestNSConfUsage(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{name: "no file", args: nil, wantStderr: "hashlb import-nsconf: want one ns.conf, got 0\n"},
		{name: "two files", args: []string{"a.conf", "b.conf"}, wantStderr: "want one ns.conf, got 2"},
		{name: "unknown flag", args: []string{"-x", "ns.conf"}, wantStderr: "hashlb import-nsconf: flag provided but not defined: -x"},
		{name: "flag without value", args: []string{"ns.conf", "-o"}, wantStderr: "flag needs an argument: -o"},
		{name: "unreadable file", args: []string{filepath.Join(t.TempDir(), "missing.conf")}, wantStderr: "missing.conf: no such file or directory"},
		{name: "a JSON export", args: []string{writeTemp(t, "export.json", "{\n  \"lbvserver\": [\n    {\"name\": \"vs1\", \"servicetype\": \"HTTP\"}\n  ]\n}\n")},
			wantStderr: "export.json: no NetScaler command found"},
		{name: "comments only", args: []string{writeTemp(t, "ns.conf", "# NS13.1 Build 37.38\n#\n")}, wantStderr: "ns.conf: no NetScaler command found"},
		{name: "an empty file", args: []string{writeTemp(t, "empty.conf", "")}, wantStderr: "empty.conf: no NetScaler command found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"import-nsconf"}, tt.args...), &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tt.wantStderr) || stdout.Len() != 0 {
				t.Errorf("import-nsconf %q: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr.String(), tt.wantStderr)
			}
		})
	}
}

// TestNSConfOutputDirCreated: -o creates the directory, and an unwritable
// one fails with exit 1 after the report.
func TestNSConfOutputDirCreated(t *testing.T) {
	src, err := filepath.Abs(filepath.Join("testdata", "nsconf", "citrix-s1s2s3", "ns.conf"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "a", "b")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"import-nsconf", src, "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("import-nsconf -o %s: exit %d\n%s", out, code, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(out, "vs_hash.json")); err != nil {
		t.Error(err)
	}
	blocker := filepath.Join(t.TempDir(), "file")
	os.WriteFile(blocker, nil, 0o644)
	stderr.Reset()
	if code := run([]string{"import-nsconf", src, "-o", blocker}, &stdout, &stderr); code != 1 {
		t.Errorf("import-nsconf -o onto a file: exit %d, want 1\n%s", code, stderr.String())
	}
}

// TestNSConfDocMigration holds docs/nsconf.md to the readme case: its
// ns.conf, the configurations written and the report are the files of
// testdata/nsconf/readme, verbatim.
func TestNSConfDocMigration(t *testing.T) {
	doc, err := os.ReadFile("../../docs/nsconf.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := codeBlocks(string(doc))
	dir := filepath.Join("testdata", "nsconf", "readme")
	for _, f := range []string{"ns.conf", "want/vs_shop.json", "want/vs_static.json", "report.golden"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(blocks, string(b)) {
			t.Errorf("docs/nsconf.md has no code block equal to testdata/nsconf/readme/%s:\n%s", f, b)
		}
	}
}

// codeBlocks returns the fenced code blocks of a markdown text, each with a
// trailing newline.
func codeBlocks(md string) []string {
	var out []string
	var cur strings.Builder
	in := false
	for _, line := range strings.Split(md, "\n") {
		switch {
		case strings.HasPrefix(line, "```") && !in:
			in = true
			cur.Reset()
		case line == "```" && in:
			in = false
			out = append(out, cur.String())
		case in:
			cur.WriteString(line + "\n")
		}
	}
	return out
}

// writeTemp writes a file in a fresh directory and returns its path.
func writeTemp(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
