package envoyrun

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// BuildModule builds a module of the repository (a package path from its
// root, such as "./e2e/envoy/testdata/hostprobe") for wasip1 as build.sh
// builds hashlb, with the build tags tags when given, once per package, tags
// and process, and returns the .wasm's path. ./filter comes out as ./build.sh
// wasm ships it (internal/wasmpost).
func BuildModule(pkg string, tags ...string) (string, error) {
	return buildWasm(buildKey{modules, strings.Join(append([]string{pkg}, tags...), " ")}, pkg, tags)
}

// buildWasm builds pkg for wasip1 under key, tags and all, and finishes
// ./filter's module with wasmpost.Finish.
func buildWasm(key buildKey, pkg string, tags []string) (string, error) {
	args := []string{"-trimpath", "-buildmode=c-shared"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	name, finish := filepath.Base(pkg)+".wasm", (func(string) error)(nil)
	if pkg == "./filter" {
		name, finish = "hashlb.wasm", finishModule
	}
	out, err := goBuild(key, "hashlb-envoyrun-mod-", name, []string{"GOOS=wasip1", "GOARCH=wasm"}, finish, append(args, pkg)...)
	if err != nil {
		return "", fmt.Errorf("building %s: %v", key.name, err)
	}
	return out, nil
}

// BuildCommand builds a command of the repository (a package path from its
// root, such as "./cmd/hashlb") for this machine, once per process, and
// returns the executable's path. A failed build is an error naming it.
func BuildCommand(pkg string) (string, error) {
	out, err := goBuild(buildKey{modules, pkg}, "hashlb-envoyrun-mod-", filepath.Base(pkg), nil, nil, "-trimpath", pkg)
	if err != nil {
		return "", fmt.Errorf("building %s: %v", pkg, err)
	}
	return out, nil
}

// RemoveModules deletes what BuildModule and BuildCommand built (a
// TestMain calls it).
func RemoveModules() { removeBuilds(modules) }

// buildKey names a build of goBuild: its kind, then a test module or
// command by package, the policy by ldflags.
type buildKey struct{ kind, name string }

// The kinds of builds.
const (
	module   = "module" // ./filter for ModulePath
	modules  = "modules"
	lbPolicy = "lbpolicy"
)

// builds is what goBuild built in this process: the output's path.
var (
	buildsMu sync.Mutex
	builds   = map[buildKey]string{}
)

// goBuild runs go build args -o DIR/out in the repository's root with env
// added, DIR a new temporary directory (named by pattern), then post on the
// output when given, once per key and process, and returns the output's
// path; a failed build removes DIR and says go build's output in its error.
func goBuild(key buildKey, pattern, out string, env []string, post func(path string) error, args ...string) (string, error) {
	buildsMu.Lock()
	defer buildsMu.Unlock()
	if p, ok := builds[key]; ok {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	out = filepath.Join(dir, out)
	cmd := exec.Command("go", append([]string{"build", "-o", out}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("%v\n%s", err, b)
	}
	if post != nil {
		if err := post(out); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	builds[key] = out
	return out, nil
}

// removeBuilds deletes the directories of the builds of a kind.
func removeBuilds(kind string) {
	buildsMu.Lock()
	defer buildsMu.Unlock()
	for k, p := range builds {
		if k.kind == kind {
			os.RemoveAll(filepath.Dir(p))
			delete(builds, k)
		}
	}
}
