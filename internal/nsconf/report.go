package nsconf

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Status is what became of one input line.
type Status uint8

// The statuses, in the report's words.
const (
	// Translated: the line is in a written configuration.
	Translated Status = iota
	// Ignored: not load balancing (or not used by any lb vserver), nothing
	// to translate.
	Ignored
	// NotTranslated: load balancing that hashlb has no equivalent for; the
	// reason says what to do by hand. Not a failure.
	NotTranslated
	// Failed: malformed, or naming something missing, or something a written
	// configuration lacks because of it. The exit status is 1.
	Failed
	// BuiltIn: the appliance's own objects (its internal services, its
	// built-in monitors), ignored and counted apart.
	BuiltIn
)

var statusNames = [...]string{"translated", "ignored", "not translated", "failed", "ignored (built-in)"}

// String returns the status as the report writes it.
func (s Status) String() string { return statusNames[s] }

// Entry is the report of one non-blank input line.
type Entry struct {
	// Line is the 1-based line number.
	Line int
	// Status is what became of the line.
	Status Status
	// What names the command: its words and its object's name.
	What string
	// Detail is why a line was ignored, not translated or failed, or what a
	// translated lb vserver became.
	Detail string
	// Warnings are the parts of the line translated approximately (the
	// nearest method, a clamped value) or not at all, each with why.
	Warnings []string

	refs []ref // the objects the line is about, for -vserver
	// ifUsed: the line counts as translated only if a written configuration
	// uses what it adds (a server, service, group member, expression).
	ifUsed bool
	// concerns is the set of lb vservers the line is about (computed at the
	// end from refs); all: every vserver.
	concerns map[string]bool
	all      bool
}

// Output is one written hashlb configuration.
type Output struct {
	// VServer is the NetScaler lb vserver's name.
	VServer string
	// File is the file name the configuration is written to: the vserver's
	// name, sanitised, with ".json".
	File string
	// JSON is the configuration, which lbcore.ParseConfig accepts.
	JSON []byte
}

// Result is a translated ns.conf.
type Result struct {
	// File is the name the report gives the input.
	File string
	// VServer, when set, is the only lb vserver written (-vserver), and the
	// report lists only the lines that concern it.
	VServer string
	// Entries are the input's non-blank lines, in order.
	Entries []*Entry
	// Outputs are the written configurations, in the order of their add lb
	// vserver lines.
	Outputs []Output
	// Missing is set when VServer names no lb vserver of the file.
	Missing bool
	// NoCommand is set when no line is a NetScaler command: the file is not
	// an ns.conf (a NITRO JSON export, say), and nothing is translated.
	NoCommand bool
	// vservers are the file's lb vservers, sorted.
	vservers []string
}

// Translate reads an ns.conf (src; file is its name in the report) and
// translates its load-balancing vservers. vserver, if not empty, selects the
// one to write. It never fails as a whole: every problem is in an entry.
func Translate(file string, src []byte, vserver string) *Result {
	t := newTranslator(file)
	src = bytes.TrimPrefix(src, []byte("\xef\xbb\xbf"))
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64*1024), len(src)+1)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	for i := 0; i < len(lines); i++ {
		if end, joined, ok := joinWrapped(lines, i); ok {
			t.read(i+1, joined)
			cmd := t.entries[len(t.entries)-1]
			cmd.Warnings = append(cmd.Warnings, fmt.Sprintf("the command is wrapped over lines %d-%d: read as one line, the breaks as spaces", i+1, end+1))
			for k := i + 1; k <= end; k++ {
				if strings.TrimSpace(lines[k]) != "" {
					t.entries = append(t.entries, &Entry{Line: k + 1, Status: Ignored, refs: cmd.refs,
						Detail: fmt.Sprintf("continues %s (a command wrapped over lines)", t.at(i+1))})
				}
			}
			i = end
			continue
		}
		t.read(i+1, lines[i])
	}
	res := &Result{File: file, VServer: vserver, Entries: t.entries, NoCommand: t.commands == 0}
	for _, v := range t.vsOrder {
		res.vservers = append(res.vservers, v.name)
	}
	slices.Sort(res.vservers)
	outs := t.build()
	t.settle()
	if vserver != "" {
		res.Missing = true
		for _, o := range outs {
			if o.VServer == vserver {
				res.Outputs = []Output{o}
				res.Missing = false
			}
		}
		if _, ok := t.vservers[vserver]; ok {
			res.Missing = false
		}
	} else {
		res.Outputs = outs
	}
	return res
}

// shown returns the entries the report lists: all, or with -vserver those
// that concern it.
func (r *Result) shown() []*Entry {
	if r.VServer == "" {
		return r.Entries
	}
	var out []*Entry
	for _, e := range r.Entries {
		if e.all || e.concerns[r.VServer] {
			out = append(out, e)
		}
	}
	return out
}

// Failed reports whether any listed line failed, or -vserver named no lb
// vserver: the exit status is then 1.
func (r *Result) Failed() bool {
	if r.Missing || r.NoCommand {
		return true
	}
	for _, e := range r.shown() {
		if e.Status == Failed {
			return true
		}
	}
	return false
}

// WriteReport writes the report: one line per listed input line,
// "file:line: status: what[: detail]", each warning after it as
// "file:line: warning: …", then a summary.
func (r *Result) WriteReport(w io.Writer) error {
	bw := bufio.NewWriter(w)
	shown := r.shown()
	var count [len(statusNames)]int
	warnings := 0
	for _, e := range shown {
		count[e.Status]++
		warnings += len(e.Warnings)
		fmt.Fprintf(bw, "%s:%d: %s", r.File, e.Line, e.Status)
		if e.What != "" {
			fmt.Fprintf(bw, ": %s", e.What)
		}
		if e.Detail != "" {
			fmt.Fprintf(bw, ": %s", e.Detail)
		}
		bw.WriteByte('\n')
		for _, m := range e.Warnings {
			fmt.Fprintf(bw, "%s:%d: warning: %s\n", r.File, e.Line, m)
		}
	}
	scope := r.File
	if r.VServer != "" {
		scope += ": lb vserver " + r.VServer
		if r.Missing {
			fmt.Fprintf(bw, "%s: no lb vserver named %q (the file has: %s)\n", r.File, r.VServer, strings.Join(r.vservers, ", "))
		}
	}
	parts := make([]string, 0, len(statusNames))
	for _, s := range []Status{Translated, Ignored, BuiltIn, NotTranslated, Failed} {
		parts = append(parts, fmt.Sprintf("%d %s", count[s], s))
	}
	fmt.Fprintf(bw, "%s: %d line%s: %s; %d warning%s; %d configuration%s", scope, len(shown), plural(len(shown)),
		strings.Join(parts, ", "), warnings, plural(warnings), len(r.Outputs), plural(len(r.Outputs)))
	if hidden := len(r.Entries) - len(shown); hidden > 0 {
		fmt.Fprintf(bw, "; %d lines about other vservers or none not listed", hidden)
	}
	bw.WriteByte('\n')
	return bw.Flush()
}

// settle computes each entry's concerns from its refs.
func (t *translator) settle() {
	all := map[string]bool{}
	for _, v := range t.vsOrder {
		all[v.name] = true
	}
	for _, e := range t.entries {
		e.concerns = map[string]bool{}
		for _, rf := range e.refs {
			switch rf.kind {
			case 'g':
				e.all = true
			case 'v':
				e.concerns[rf.name] = true
			case 's':
				for v := range t.boundBy[rf.name] {
					e.concerns[v] = true
				}
			case 'h':
				for user := range t.serverUsers[rf.name] {
					for v := range t.boundBy[user] {
						e.concerns[v] = true
					}
				}
			case 'x':
				for v := range t.exprUsers[rf.name] {
					e.concerns[v] = true
				}
			case 'm':
				for target, binds := range t.monBinds {
					for _, b := range binds {
						if b.mon.name == rf.name {
							for v := range t.boundBy[target] {
								e.concerns[v] = true
							}
						}
					}
				}
			}
		}
	}
}
