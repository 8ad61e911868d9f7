package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/hashlb/hashlb/internal/deploycheck"
	"github.com/hashlb/hashlb/lbcore"
	"gopkg.in/yaml.v3"
)

const checkAbout = `Validates hashlb plugin configurations exactly as the module does and prints
every problem as the plugin logs it, "FILE: problem" (or "FILE: WHERE:
problem" for a configuration embedded in a larger file), and
"FILE: ok (METHOD over N services)" for a good one. FILE may be "-" (stdin).

A FILE is one of
  - a plugin configuration (JSON);
  - an Envoy configuration (YAML or JSON: a bootstrap, or xDS resources): the
    configuration.value of every envoy.filters.http.wasm (or
    envoy.filters.network.wasm) filter that is hashlb's (its name, root_id,
    vm_id or module path mentions hashlb), and the lb_policy_config.value of
    every cluster's dynamic-module load-balancing policy that is hashlb's
    (DynamicModulesLoadBalancerConfig whose name, lb_policy_name or module
    mentions hashlb), validated as the policy does (its refusals included);
  - Kubernetes manifests (YAML, "---" between documents): every Istio
    WasmPlugin and TrafficExtension that is hashlb's (its name, url or
    pluginName mentions hashlb; spec.pluginConfig, a TrafficExtension's
    spec.wasm.pluginConfig, turned into JSON as Istio does), and every
    EnvoyFilter patch holding a hashlb wasm filter. Other resources are listed
    and skipped;
  - configs/schema.json (the JSON Schema of the configuration), skipped.

Each valid configuration is then held to its surroundings: the endpoints of
the cluster that follows its header against its services, the header that
cluster reads, fail_open with ORIGINAL_DST, the filter kind against
filterType, the fleet cluster, retries, one hashlb per filter chain. A
policy is held to its cluster: the hosts it reads (load_assignment, or the
EDS file of path_config_source, looked for in the working directory, which
is taken to be Envoy's, else beside FILE) as hashlb services (identities,
weights), health_checks or outlier_detection, ignore_health_on_host_removal,
do_not_close, its place in the cluster's policies. A
finding names the file, the path and line of the node to change, and what to
change (docs/cli.md).

An Envoy configuration without a hashlb filter, or a file that is none of
these, is an error; so is a run in which no file holds a hashlb configuration.

A warning (printed on stdout, "warning: …") is worth changing but does not
fail the run: an override_host cluster with fail_open, the session key
written inline in an Envoy file or an Istio manifest. -strict makes every
warning an error.

Exit status: 0 when every configuration is valid and safe in its
surroundings (with -strict: and nothing is warned about), 1 otherwise, 2 for
a usage error.
`

// runCheck implements "hashlb check".
func runCheck(args []string, stdout, stderr io.Writer) int {
	c := newCommand("check", "FILE…", checkAbout, stdout, stderr)
	strict := c.flags.Bool("strict", false, "make every warning an error (exit status 1), such as an inline session key")
	files, code, done := c.parse(args)
	if done {
		return code
	}
	if len(files) == 0 {
		return c.usageErr("no FILE given")
	}
	named, status := scanFiles(files, stderr)
	findings := deploycheck.Check(named)
	if *strict {
		for i := range findings {
			findings[i].Warning = false
		}
	}
	found, bad := reportConfigs(named, findings, stdout, stderr)
	if reportFindings(findings, stdout, stderr) || bad {
		status = 1
	}
	if found == 0 && status == 0 {
		fmt.Fprintln(stderr, "hashlb check: no hashlb configuration in any FILE")
		status = 1
	}
	return status
}

// scanFiles reads every FILE; status is 1 when one cannot be read (said on
// stderr).
func scanFiles(files []string, stderr io.Writer) (named []deploycheck.Named, status int) {
	for _, file := range files {
		src, err := deploycheck.ScanFile(file)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", file, err)
			status = 1
			continue
		}
		named = append(named, deploycheck.Named{Name: file, File: src})
	}
	return named, status
}

// reportConfigs parses every configuration found: its problems go to
// stderr (bad), "ok" to stdout unless a finding about its surroundings is
// an error. found counts the configurations.
func reportConfigs(named []deploycheck.Named, findings []deploycheck.Finding, stdout, stderr io.Writer) (found int, bad bool) {
	failed := map[*yaml.Node]bool{}
	for _, f := range findings {
		if !f.Warning && f.Plugin != nil {
			failed[f.Plugin] = true
		}
	}
	for _, src := range named {
		file := src.Name
		found += len(src.Configs())
		for _, e := range src.Items {
			if e.Skipped != "" {
				fmt.Fprintf(stdout, "%s: %s\n", file, e.Skipped)
				continue
			}
			cfg, problems := e.Parse()
			if problems != nil {
				for _, p := range problems {
					fmt.Fprintf(stderr, "%s%s\n", e.Prefix(file), p)
				}
				bad = true
				continue
			}
			switch {
			case failed[e.Node]:
			case e.Policy == nil:
				fmt.Fprintf(stdout, "%sok (%s over %s)\n", e.Prefix(file), cfg.LBMethod, plural(len(cfg.Services), "service"))
			case e.Policy.Unknown != "":
				fmt.Fprintf(stdout, "%sok (%s; hosts not checked: %s)\n", e.Prefix(file), cfg.LBMethod, e.Policy.Unknown)
			default:
				fmt.Fprintf(stdout, "%sok (%s over %s from %s%s)\n", e.Prefix(file), cfg.LBMethod, plural(len(e.Policy.Hosts), "host"), e.Policy.From, fleetNote(cfg))
			}
		}
	}
	return found, bad
}

// reportFindings prints the cross-checks' findings, warnings on stdout and
// errors on stderr, and reports whether there was an error.
func reportFindings(findings []deploycheck.Finding, stdout, stderr io.Writer) (failed bool) {
	for _, f := range findings {
		w := stderr
		if f.Warning {
			w = stdout
		} else {
			failed = true
		}
		fmt.Fprintf(w, "%s: %s: %s\n", f.File, f.Where, f)
	}
	return failed
}

// plural writes "1 service", "3 services".
// fleetNote is what "ok" adds for a policy whose persistence has a fleet:
// the etcd members its client dials.
func fleetNote(cfg *lbcore.Config) string {
	if cfg.Persistence == nil || cfg.Persistence.Fleet == nil || len(cfg.Persistence.Fleet.Endpoints) == 0 {
		return ""
	}
	return "; persistence.fleet over " + plural(len(cfg.Persistence.Fleet.Endpoints), "etcd endpoint")
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
