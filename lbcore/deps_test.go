package lbcore

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies enforces the import rule of lbcore and of its fleet
// package: Go's standard library, xxhash and gjson (with its own two
// helpers) only, and lbcore for the fleet. Never the proxy-wasm SDK,
// wazero, filter or hostsim: the host's calls are the filter's.
func TestDependencies(t *testing.T) {
	common := []string{"github.com/cespare/xxhash/v2", "github.com/tidwall/gjson",
		"github.com/tidwall/match", "github.com/tidwall/pretty"} // the last two are gjson's
	for _, pkg := range []struct {
		dir, path string
		also      []string
	}{
		{".", "github.com/hashlb/hashlb/lbcore", nil},
		{"./fleet", "github.com/hashlb/hashlb/lbcore/fleet", []string{"github.com/hashlb/hashlb/lbcore"}},
	} {
		allowed := map[string]bool{pkg.path: true}
		for _, d := range append(common, pkg.also...) {
			allowed[d] = true
		}
		for _, goos := range []string{"", "wasip1"} {
			cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg.dir)
			if goos != "" {
				cmd.Env = append(cmd.Environ(), "GOOS=wasip1", "GOARCH=wasm")
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("go list -deps %s (GOOS=%q): %v\n%s", pkg.dir, goos, err, out)
			}
			for _, dep := range strings.Fields(string(out)) {
				if !allowed[dep] {
					t.Errorf("%s (GOOS=%q) depends on %s: only std, xxhash and gjson are allowed (and lbcore, for the fleet)", pkg.path, goos, dep)
				}
			}
		}
	}
}
