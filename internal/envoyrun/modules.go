package envoyrun

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// BuildModule builds a test module (a package path from the repository
// root, such as "./e2e/envoy/testdata/hostprobe") for wasip1 as build.sh
// builds hashlb, once per process, and returns the .wasm's path.
func BuildModule(pkg string) (string, error) {
	return build(pkg, ".wasm", "-buildmode=c-shared", "GOOS=wasip1", "GOARCH=wasm")
}

// BuildCommand builds a command of the repository (a package path from its
// root, such as "./cmd/hashlb") for this machine, once per process, and
// returns the executable's path. A failed build is an error naming it.
func BuildCommand(pkg string) (string, error) {
	return build(pkg, "", "")
}

// build runs go build -trimpath [mode] on pkg with env added, once per
// package and process, into a directory of its own (RemoveModules deletes
// it); the output is named after the package's last element and suffix.
func build(pkg, suffix, mode string, env ...string) (string, error) {
	args := []string{"-trimpath"}
	if mode != "" {
		args = append(args, mode)
	}
	out, err := goBuild(buildKey{modules, pkg}, "hashlb-envoyrun-mod-", filepath.Base(pkg)+suffix, env, append(args, pkg)...)
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
	modules  = "modules"
	lbPolicy = "lbpolicy"
)

// builds is what goBuild built in this process: the output's path.
var (
	buildsMu sync.Mutex
	builds   = map[buildKey]string{}
)

// goBuild runs go build args -o DIR/out in the repository's root with env
// added, DIR a new temporary directory (named by pattern), once per key and
// process, and returns the output's path; a failed build removes DIR and
// says go build's output in its error.
func goBuild(key buildKey, pattern, out string, env []string, args ...string) (string, error) {
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
