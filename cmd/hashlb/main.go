// Command hashlb is the operator's tool for hashlb configurations, run
// natively with the module's own decision code (lbcore):
//
//	hashlb check FILE…                  validate plugin configurations (also
//	                                    embedded in envoy.yaml or Istio manifests)
//	hashlb explain CONFIG -url … […]    why a request goes where it goes
//	hashlb import-nsconf ns.conf […]    NetScaler load-balancing vservers to
//	                                    hashlb configurations
//
// Its parts, by file: the dispatch to a subcommand and the flag set and usage
// every command shares (main.go); check, which reads each FILE with
// internal/deploycheck and reports its findings (check.go); explain, run by
// explain.go, from its flags and the configuration they name
// (explain_parse.go) through lbcore's explanation made a report
// (explain_model.go) to text or JSON (explain_render.go), and for the
// load-balancing policy from a cluster and its hosts (explain_policy.go);
// and import-nsconf over internal/nsconf (importnsconf.go).
//
// Exit status: 0 when everything was fine, 1 when a check, a translation or a
// request failed, 2 for a usage error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// commands maps a subcommand to its entry point; each gets its own
// arguments and returns the exit status.
var commands = map[string]func(args []string, stdout, stderr io.Writer) int{
	"check":         runCheck,
	"explain":       runExplain,
	"import-nsconf": runImportNSConf,
}

const usage = `usage: hashlb <command> [arguments]

commands:
  check FILE…                validate hashlb plugin configurations, or the ones
                             embedded in an Envoy bootstrap or Istio manifest,
                             and cross-check them against their surroundings
  explain CONFIG -url URL …  show how a request is decided: key bytes, ranking,
                             choice, failover order, persistence key
  import-nsconf ns.conf      translate NetScaler load-balancing vservers into
                             hashlb configurations

"hashlb <command> -h" describes a command and its flags.
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "hashlb: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	return cmd(args[1:], stdout, stderr)
}

// command is one subcommand's flag set and usage, in Go's flag conventions:
// the usage is the synopsis, the description and the flags' own
// descriptions (flag.PrintDefaults); -h prints it on stdout and exits 0; a
// usage error prints the problem and the usage on stderr and exits 2.
type command struct {
	name, synopsis, about string
	flags                 *flag.FlagSet
	stdout, stderr        io.Writer
}

func newCommand(name, synopsis, about string, stdout, stderr io.Writer) *command {
	c := &command{name: name, synopsis: synopsis, about: about, stdout: stdout, stderr: stderr,
		flags: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.flags.SetOutput(io.Discard)
	return c
}

// writeUsage writes the command's usage to w.
func (c *command) writeUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: hashlb %s %s\n\n%s", c.name, c.synopsis, c.about)
	n := 0
	c.flags.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, "\nflags (before or after the arguments):\n")
		c.flags.SetOutput(w)
		c.flags.PrintDefaults()
		c.flags.SetOutput(io.Discard)
	}
}

// usageErr reports a usage error and returns exit status 2.
func (c *command) usageErr(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "hashlb %s: %s\n\n", c.name, fmt.Sprintf(format, a...))
	c.writeUsage(c.stderr)
	return 2
}

// parse parses args, flags before and after the arguments, and returns the
// arguments; with done set, the command is over and code is its exit status
// (0 for -h, 2 for a usage error).
func (c *command) parse(args []string) (rest []string, code int, done bool) {
	for {
		if err := c.flags.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				c.writeUsage(c.stdout)
				return nil, 0, true
			}
			return nil, c.usageErr("%v", err), true
		}
		if c.flags.NArg() == 0 {
			return rest, 0, false
		}
		rest = append(rest, c.flags.Arg(0))
		args = c.flags.Args()[1:]
	}
}
