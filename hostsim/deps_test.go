package hostsim

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hostsimPath is this package's import path; anything else of the module is
// out of bounds for hostsim.
const hostsimPath = "github.com/hashlb/hashlb/hostsim"

// TestDependencies enforces hostsim's import rule: Go's standard library and
// wazero (with the golang.org/x/sys it needs) only. Never lbcore, filter, the
// proxy-wasm SDK or any other package of this module, so the host cannot
// share the module's bugs. It covers hostsim and its tests natively, and the
// test modules in testdata for wasip1. hostsim/cmd/hashlb-proxy, a demo
// command, may also run etcd's server in process (-etcd), and nothing of this
// module but hostsim.
func TestDependencies(t *testing.T) {
	check := func(t *testing.T, what string, env []string, allowedDep func(string) bool, pkgs ...string) {
		t.Helper()
		args := append([]string{"list", "-deps", "-test", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, pkgs...)
		cmd := exec.Command("go", args...)
		cmd.Env = append(cmd.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if dep, _, _ := strings.Cut(line, " "); dep != "" && !allowedDep(dep) {
				t.Errorf("%s depends on %s: hostsim may import only std and wazero (never lbcore or filter)", what, dep)
			}
		}
	}

	for _, r := range []struct {
		name, call string
		allowed    func(string) bool
		paths      map[string]bool
	}{
		{"rule", "allowedDep", allowedDep, map[string]bool{
			"github.com/hashlb/hashlb/hostsim":                     true,
			"github.com/hashlb/hashlb/hostsim/cmd/hashlb-proxy":    true,
			"github.com/tetratelabs/wazero/api":                    true,
			"github.com/hashlb/hashlb/lbcore":                      false,
			"github.com/hashlb/hashlb/filter":                      false,
			"github.com/hashlb/hashlb/hostsimx":                    false,
			"github.com/higress-group/proxy-wasm-go-sdk/proxywasm": false,
			"github.com/tetratelabs/wazero-extra":                  false,
		}},
		{"cmd rule", "allowedCmdDep", allowedCmdDep, map[string]bool{
			"github.com/hashlb/hashlb/hostsim":                     true,
			"go.etcd.io/etcd/server/v3/embed":                      true,
			"google.golang.org/grpc":                               true,
			"github.com/hashlb/hashlb/lbcore":                      false,
			"github.com/hashlb/hashlb/filter":                      false,
			"github.com/hashlb/hashlb/internal/hostile":            false,
			"github.com/higress-group/proxy-wasm-go-sdk/proxywasm": false,
		}},
	} {
		t.Run(r.name, func(t *testing.T) {
			for path, want := range r.paths {
				if got := r.allowed(path); got != want {
					t.Errorf("%s(%q) = %v, want %v", r.call, path, got, want)
				}
			}
		})
	}
	t.Run("native", func(t *testing.T) { check(t, "hostsim or its tests", nil, allowedDep, ".") })
	t.Run("cmd", func(t *testing.T) { check(t, "a hostsim command", nil, allowedCmdDep, "./cmd/...") })

	dirs, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	var mods []string
	for _, d := range dirs {
		if gos, _ := filepath.Glob(filepath.Join("testdata", d.Name(), "*.go")); d.IsDir() && len(gos) > 0 {
			mods = append(mods, "./"+filepath.ToSlash(filepath.Join("testdata", d.Name())))
		}
	}
	if len(mods) == 0 {
		t.Fatal("no test modules found in testdata")
	}
	t.Run("testdata", func(t *testing.T) {
		check(t, "a hostsim test module", []string{"GOOS=wasip1", "GOARCH=wasm"}, allowedDep, mods...)
	})
}

// allowedDep reports whether hostsim may depend on the non-standard package
// path. go list -test also lists the test binary as "pkg.test" and test
// variants as "pkg [pkg.test]"; callers pass the part before the space.
func allowedDep(path string) bool {
	path = strings.TrimSuffix(path, ".test")
	switch {
	case path == hostsimPath, strings.HasPrefix(path, hostsimPath+"/"):
		return true
	case path == "github.com/tetratelabs/wazero", strings.HasPrefix(path, "github.com/tetratelabs/wazero/"):
		return true
	case strings.HasPrefix(path, "golang.org/x/sys/"): // wazero's
		return true
	}
	return false
}

// allowedCmdDep reports whether a hostsim command may depend on path: what
// hostsim may, and any package outside this module (etcd's server for -etcd)
// except the proxy-wasm SDK the module is built with.
func allowedCmdDep(path string) bool {
	path = strings.TrimSuffix(path, ".test")
	switch {
	case allowedDep(path):
		return true
	case strings.HasPrefix(path, "github.com/hashlb/hashlb/"), path == "github.com/hashlb/hashlb":
		return false
	case strings.Contains(path, "proxy-wasm"):
		return false
	}
	return true
}
