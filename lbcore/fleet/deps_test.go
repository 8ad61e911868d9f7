package fleet

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies enforces the fleet package's import rule: lbcore, Go's
// standard library, xxhash and gjson (with its own two helpers) only. Never
// the proxy-wasm SDK, wazero, filter or hostsim: the host's calls are the
// filter's.
func TestDependencies(t *testing.T) {
	for _, goos := range []string{"", "wasip1"} {
		cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
		if goos != "" {
			cmd.Env = append(cmd.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps (GOOS=%q): %v\n%s", goos, err, out)
		}
		allowed := map[string]bool{
			"github.com/hashlb/hashlb/lbcore/fleet": true,
			"github.com/hashlb/hashlb/lbcore":       true,
			"github.com/cespare/xxhash/v2":          true,
			"github.com/tidwall/gjson":              true,
			"github.com/tidwall/match":              true, // gjson's
			"github.com/tidwall/pretty":             true, // gjson's
		}
		for _, dep := range strings.Fields(string(out)) {
			if !allowed[dep] {
				t.Errorf("lbcore/fleet (GOOS=%q) depends on %s: only lbcore, std, xxhash and gjson are allowed", goos, dep)
			}
		}
	}
}
