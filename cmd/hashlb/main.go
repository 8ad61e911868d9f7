// Command hashlb is the operator's tool for hashlb configurations, run
// natively with the module's own decision code (lbcore):
//
//	hashlb check FILE…                  validate plugin configurations (also
//	                                    embedded in envoy.yaml or Istio manifests)
//	hashlb explain CONFIG -url … […]    why a request goes where it goes
//	hashlb import-nsconf ns.conf […]    NetScaler load-balancing vservers to
//	                                    hashlb configurations
//
// Exit status: 0 when everything was fine, 1 when a check, a translation or a
// request failed, 2 for a usage error.
package main

import (
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
                             embedded in an Envoy bootstrap or Istio manifest
  explain CONFIG -url URL …  show how a request is decided: key bytes, ranking,
                             choice, failover order, persistence key
  import-nsconf ns.conf      translate NetScaler load-balancing vservers into
                             hashlb configurations

"hashlb <command> -h" describes a command's flags.
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" || args[0] == "--help" {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "hashlb: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	return cmd(args[1:], stdout, stderr)
}
