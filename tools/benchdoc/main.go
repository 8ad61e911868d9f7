// Command benchdoc puts what ./build.sh bench measured into
// docs/performance.md: it composes the results section from the bench's
// output files (internal/benchdoc.Section), with the machine the run
// measured on, and replaces the text between the section's markers with it
// (internal/benchdoc.Splice). ./build.sh bench runs it last:
//
//	go run ./tools/benchdoc -doc docs/performance.md -load dist/bench-load.txt \
//		-envoys "$HASHLB_ENVOY_BINS" -table "Title=dist/performance.md" -gobench "Title=dist/go-bench.out" …
//
// -table parts are the bench's Markdown as written; -gobench parts are go
// test -bench output, of which the result lines become a table. Parts
// appear in the order given. A file that is missing or empty is said to be
// so in its part, and the command exits 1 after writing the document, so a
// bench that lost a table does not pass unnoticed.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/hashlb/hashlb/internal/benchdoc"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// part is one -table or -gobench flag.
type part struct {
	title, file string
	goBench     bool
}

type parts struct {
	list    *[]part
	goBench bool
}

func (p parts) String() string { return "" }

func (p parts) Set(v string) error {
	title, file, ok := strings.Cut(v, "=")
	if !ok || title == "" || file == "" {
		return fmt.Errorf("%q: want Title=file", v)
	}
	*p.list = append(*p.list, part{title, file, p.goBench})
	return nil
}

func main() {
	var list []part
	doc := flag.String("doc", "docs/performance.md", "the document whose section between the markers is replaced")
	load := flag.String("load", "", "the 1-minute load averages sampled during the run, one a line")
	envoys := flag.String("envoys", "", "the Envoy binaries the run measured, space-separated (their --version is asked)")
	flag.Var(parts{&list, false}, "table", "Title=file: a Markdown table the bench wrote (repeatable)")
	flag.Var(parts{&list, true}, "gobench", "Title=file: go test -bench output, its result lines as a table (repeatable)")
	flag.Parse()
	if err := run(*doc, *load, *envoys, list); err != nil {
		fmt.Fprintln(os.Stderr, "benchdoc:", err)
		os.Exit(1)
	}
}

func run(docFile, loadFile, envoys string, list []part) error {
	m := machine(loadFile, envoys)
	var ps []benchdoc.Part
	var missing []string
	for _, p := range list {
		data, err := os.ReadFile(p.file)
		text := string(data)
		if p.goBench && err == nil {
			text = benchdoc.GoBenchTable(text)
		}
		if err != nil || strings.TrimSpace(text) == "" {
			text = "Not measured: the run wrote nothing to " + p.file + "."
			missing = append(missing, p.file)
		}
		ps = append(ps, benchdoc.Part{Title: p.title, Text: text})
	}
	data, err := os.ReadFile(docFile)
	if err != nil {
		return err
	}
	out, err := benchdoc.Splice(string(data), benchdoc.Section(m, ps))
	if err != nil {
		return fmt.Errorf("%s: %v", docFile, err)
	}
	if err := os.WriteFile(docFile, []byte(out), 0o644); err != nil {
		return err
	}
	fmt.Printf("benchdoc: %s: the results section rewritten (%d tables)\n", docFile, len(ps))
	if len(missing) > 0 {
		return fmt.Errorf("no results in %s", strings.Join(missing, ", "))
	}
	return nil
}

// machine describes this machine: the bench's tables are measured here.
func machine(loadFile, envoys string) benchdoc.Machine {
	m := benchdoc.Machine{Cores: runtime.NumCPU(), Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH}
	if info, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if r := regexp.MustCompile(`(?m)^model name\s*:\s*(.+)$`).FindSubmatch(info); r != nil {
			m.CPU = strings.Join(strings.Fields(string(r[1])), " ")
		}
	}
	if loadFile != "" {
		if data, err := os.ReadFile(loadFile); err == nil {
			for _, f := range strings.Fields(string(data)) {
				if v, err := strconv.ParseFloat(f, 64); err == nil {
					m.Load = append(m.Load, v)
				}
			}
		}
	}
	m.Node = firstLine("node", "--version")
	m.Valgrind = firstLine("valgrind", "--version")
	bins, err := envoyrun.Probe(strings.Fields(envoys))
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchdoc:", err)
	}
	for _, b := range bins {
		if !slices.Contains(m.Envoys, b.Version) {
			m.Envoys = append(m.Envoys, b.Version)
		}
	}
	return m
}

// firstLine is the first non-empty line cmd prints, "" when it cannot run.
func firstLine(name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}
