package benchdoc

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// The markers. Begin is a line of its own; the end marker is EndPrefix, the
// SHA-256 of the text between the two marker lines in hex, and " -->".
const (
	Begin     = "<!-- bench:begin -->"
	EndPrefix = "<!-- bench:end sha256="
	endSuffix = " -->"
	// Header is the first line of every generated section.
	Header = "*Written by `./build.sh bench` (tools/benchdoc, internal/benchdoc): the bench's own tables, as the run printed them. Change the bench, not this text.*"
)

// Machine is what the section says of the machine the run measured on.
type Machine struct {
	Cores    int       // logical CPUs
	CPU      string    // model name, "" when unknown
	Load     []float64 // the 1-minute load average, sampled during the run
	Go       string    // go version
	Node     string    // node --version, "" when absent
	Valgrind string    // valgrind --version, "" when absent
	Envoys   []string  // the Envoy versions measured
}

// Part is one table of the run: a heading and the text the bench wrote,
// or, when it wrote nothing, why.
type Part struct {
	Title, Text string
}

// Section renders the text between the markers (without them): the header
// line, the machine line, then each part under a "###" heading, the part's
// own headings a level below it.
func Section(m Machine, parts []Part) string {
	var sb strings.Builder
	sb.WriteString(Header + "\n\n")
	sb.WriteString(m.line() + "\n")
	for _, p := range parts {
		// The part's own headings go one level below its title.
		lines := strings.Split(strings.TrimRight(p.Text, "\n"), "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, "#") {
				lines[i] = "#" + l
			}
		}
		fmt.Fprintf(&sb, "\n### %s\n\n%s\n", p.Title, strings.Join(lines, "\n"))
	}
	return sb.String()
}

// line is the machine as one paragraph.
func (m Machine) line() string {
	var s []string
	cpu := fmt.Sprintf("%d cores", m.Cores)
	if m.CPU != "" {
		cpu += " (" + m.CPU + ")"
	}
	s = append(s, "Machine: "+cpu)
	if len(m.Load) > 0 {
		lo, hi, sum := m.Load[0], m.Load[0], 0.0
		for _, v := range m.Load {
			lo, hi, sum = min(lo, v), max(hi, v), sum+v
		}
		s = append(s, fmt.Sprintf("1-minute load average during the run %.1f–%.1f (mean %.1f over %d samples, one every 30 s; the bench's own processes count in it)",
			lo, hi, sum/float64(len(m.Load)), len(m.Load)))
	} else {
		s = append(s, "load average not sampled")
	}
	s = append(s, m.Go)
	if m.Node != "" {
		s = append(s, "Node "+m.Node)
	}
	if m.Valgrind != "" {
		s = append(s, m.Valgrind)
	}
	if len(m.Envoys) > 0 {
		s = append(s, "Envoy "+strings.Join(m.Envoys, ", "))
	}
	return strings.Join(s, "; ") + "."
}

// Splice returns doc with the text between its markers replaced by section
// and the end marker's digest renewed, whatever was there. doc must hold
// Begin on a line of its own, then a line starting with EndPrefix.
func Splice(doc, section string) (string, error) {
	before, _, _, after, err := cut(doc)
	if err != nil {
		return "", err
	}
	return before + Begin + "\n" + section + endLine(section) + after, nil
}

// Verify says why doc's section is not what Section and Splice wrote: a
// marker missing, the header line missing, or an end marker whose digest
// does not match the text (an edit by hand).
func Verify(doc string) error {
	_, inner, end, _, err := cut(doc)
	if err != nil {
		return err
	}
	if end != endLine(inner) {
		return fmt.Errorf("the end marker %q does not match the text between the markers: edited by hand? ./build.sh bench writes it", strings.TrimSpace(end))
	}
	if !strings.HasPrefix(inner, Header+"\n") {
		return errors.New("the section does not start with the generator's header line")
	}
	return nil
}

// endLine is the end marker for section, with its newline.
func endLine(section string) string {
	sum := sha256.Sum256([]byte(section))
	return EndPrefix + hex.EncodeToString(sum[:]) + endSuffix + "\n"
}

// cut splits doc around its markers: the text before the Begin line, the
// text between the marker lines, the end marker's line (with its newline)
// and the text after it.
func cut(doc string) (before, inner, end, after string, err error) {
	b := strings.Index(doc, "\n"+Begin+"\n")
	if b < 0 {
		return "", "", "", "", fmt.Errorf("no line %q", Begin)
	}
	before, rest := doc[:b+1], doc[b+1+len(Begin)+1:]
	if strings.Contains(rest, "\n"+Begin+"\n") {
		return "", "", "", "", fmt.Errorf("two lines %q", Begin)
	}
	e := 0
	if !strings.HasPrefix(rest, EndPrefix) {
		if e = strings.Index(rest, "\n"+EndPrefix); e < 0 {
			return "", "", "", "", fmt.Errorf("no line starting %q after %q", EndPrefix, Begin)
		}
		e++
	}
	inner = rest[:e]
	line, after, _ := strings.Cut(rest[e:], "\n")
	return before, inner, line + "\n", after, nil
}

// GoBenchTable renders the result lines of go test -bench output (lines
// "BenchmarkName-N  iterations  value unit  value unit …") as a table: the
// benchmark's name without the GOMAXPROCS suffix, and its figures. ns/op
// is left out where it is no figure: 0 (a benchmark that reports its own
// metrics) or over one iteration (the length of a run of -benchtime 1x); a
// line left with no figure is left out. A benchmark that failed ("--- FAIL:
// Benchmark…") is a row that says so. "" when out has neither.
func GoBenchTable(out string) string {
	var sb strings.Builder
	row := func(name, figs string) {
		if sb.Len() == 0 {
			sb.WriteString("| benchmark | figures |\n|---|---|\n")
		}
		fmt.Fprintf(&sb, "| %s | %s |\n", name, figs)
	}
	for _, line := range strings.Split(out, "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- FAIL: Benchmark"); ok {
			name, _, _ = strings.Cut(name, " ")
			row("Benchmark"+name, "**failed** (the bench's output says why)")
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		var iters int
		if _, err := fmt.Sscanf(f[1], "%d", &iters); err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 && strings.Trim(name[i+1:], "0123456789") == "" {
			name = name[:i]
		}
		var figs []string
		for i := 2; i+1 < len(f); i += 2 {
			if f[i+1] == "ns/op" && (f[i] == "0" || iters == 1) {
				continue
			}
			figs = append(figs, f[i]+" "+f[i+1])
		}
		if len(figs) == 0 {
			continue
		}
		row(name, strings.Join(figs, ", "))
	}
	return sb.String()
}
