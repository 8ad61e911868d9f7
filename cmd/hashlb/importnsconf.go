package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashlb/hashlb/internal/nsconf"
)

const importUsage = `usage: hashlb import-nsconf ns.conf [-vserver NAME] [-o DIR]

Translates the load-balancing vservers of a NetScaler ns.conf into hashlb
configurations, one per "add lb vserver", named after the vserver.

  -o DIR        write each configuration to DIR/<vserver>.json (DIR is created);
                without -o they go to stdout, each after a "// <file>" line
  -vserver NAME write only lb vserver NAME; without -o, stdout is then exactly
                its JSON

The report on stderr lists every non-blank input line as translated, ignored,
not translated or failed, with the reason, and every warning (the nearest
method, a clamped value, a flag hashlb has no equivalent for).
Exit status: 0 when nothing failed, 1 when a line failed (the rest is still
written), 2 for a usage error, an unreadable file or one with no NetScaler
command in it.
`

// runImportNSConf implements "hashlb import-nsconf".
func runImportNSConf(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("import-nsconf", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	vserver := fs.String("vserver", "", "")
	dir := fs.String("o", "", "")
	// The file comes first in the synopsis; flags may come before or after.
	var files []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stderr, importUsage)
			} else {
				fmt.Fprintf(stderr, "hashlb import-nsconf: %v\n\n%s", err, importUsage)
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(files) != 1 {
		fmt.Fprintf(stderr, "hashlb import-nsconf: want one ns.conf, got %d\n\n%s", len(files), importUsage)
		return 2
	}
	src, err := os.ReadFile(files[0])
	if err != nil {
		fmt.Fprintf(stderr, "hashlb import-nsconf: %v\n", err)
		return 2
	}
	res := nsconf.Translate(files[0], src, *vserver)
	if res.NoCommand {
		fmt.Fprintf(stderr, "hashlb import-nsconf: %s: no NetScaler command found (an ns.conf has lines such as \"add lb vserver NAME HTTP\"; a NITRO JSON export is not one)\n", files[0])
		return 2
	}
	status := 0
	if res.Failed() {
		status = 1
	}
	switch {
	case *dir != "":
		if err := os.MkdirAll(*dir, 0o755); err != nil {
			fmt.Fprintf(stderr, "hashlb import-nsconf: %v\n", err)
			status = 1
			break
		}
		for _, o := range res.Outputs {
			if err := os.WriteFile(filepath.Join(*dir, o.File), o.JSON, 0o644); err != nil {
				fmt.Fprintf(stderr, "hashlb import-nsconf: %v\n", err)
				status = 1
			}
		}
	case *vserver != "":
		for _, o := range res.Outputs {
			stdout.Write(o.JSON)
		}
	default:
		for i, o := range res.Outputs {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			fmt.Fprintf(stdout, "// %s (lb vserver %s)\n", o.File, o.VServer)
			stdout.Write(o.JSON)
		}
	}
	res.WriteReport(stderr)
	return status
}
