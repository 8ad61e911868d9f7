package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// sessionKeyEnv is the variable hashlb's session block needs in the VM's
// environment (lbcore.SessionKeyEnv; hostsim's commands import no lbcore).
const sessionKeyEnv = "HASHLB_SESSION_KEY"

// envFlags are the names -env gives the VMs, copied from this process's
// environment as Envoy's host_env_keys copies from Envoy's: a secret such as
// the session key never appears on a command line, where ps and shell
// history show it.
type envFlags []string

func (e *envFlags) String() string { return strings.Join(*e, ",") }

// Set takes one NAME. A NAME=VALUE is refused: the value would be on the
// command line.
func (e *envFlags) Set(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("want a variable NAME")
	case strings.Contains(name, "="):
		n, _, _ := strings.Cut(name, "=")
		return fmt.Errorf("%q: -env takes a NAME, and the value comes from this process's environment (%s=... hashlb-proxy -env %s), never from the command line", n+"=…", n, n)
	}
	if _, ok := os.LookupEnv(name); !ok {
		return fmt.Errorf("%s: not set in hashlb-proxy's environment", name)
	}
	if !slices.Contains(*e, name) {
		*e = append(*e, name)
	}
	return nil
}

// names reports whether name is among the flags.
func (e envFlags) names(name string) bool { return slices.Contains(e, name) }

// values is the VMs' environment: each name with its value in this process's
// environment.
func (e envFlags) values() map[string]string {
	if len(e) == 0 {
		return nil
	}
	m := make(map[string]string, len(e))
	for _, n := range e {
		m[n] = os.Getenv(n)
	}
	return m
}
