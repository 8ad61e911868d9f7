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
type envFlags struct {
	list []string
	// refused is the first problem of a -env value, reported after the
	// flags are parsed: an error from Set would make the flag package
	// print the value, which may be a secret given as NAME=VALUE.
	refused string
}

func (e *envFlags) String() string { return strings.Join(e.list, ",") }

// Set takes one NAME. A NAME=VALUE is refused (by check): the value would be
// on the command line.
func (e *envFlags) Set(name string) error {
	if e.refused != "" {
		return nil
	}
	switch n, _, hasValue := strings.Cut(name, "="); {
	case hasValue:
		e.refused = fmt.Sprintf("-env %s=…: -env takes a NAME, and the value comes from this process's environment (%s=... hashlb-proxy -env %s), never from the command line", n, n, n)
	case name == "":
		e.refused = "-env: want a variable NAME"
	default:
		if _, ok := os.LookupEnv(name); !ok {
			e.refused = fmt.Sprintf("-env %s: not set in hashlb-proxy's environment", name)
		} else if !slices.Contains(e.list, name) {
			e.list = append(e.list, name)
		}
	}
	return nil
}

// check returns what Set refused, if anything.
func (e *envFlags) check() error {
	if e.refused != "" {
		return fmt.Errorf("%s", e.refused)
	}
	return nil
}

// has reports whether -env names name.
func (e *envFlags) has(name string) bool { return slices.Contains(e.list, name) }

// values is the VMs' environment: each name with its value in this process's
// environment.
func (e *envFlags) values() map[string]string {
	if len(e.list) == 0 {
		return nil
	}
	m := make(map[string]string, len(e.list))
	for _, n := range e.list {
		m[n] = os.Getenv(n)
	}
	return m
}
