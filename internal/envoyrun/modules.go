package envoyrun

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

var (
	testModsMu sync.Mutex
	testMods   = map[string]string{}
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
	testModsMu.Lock()
	defer testModsMu.Unlock()
	if p, ok := testMods[pkg]; ok {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "hashlb-envoyrun-mod-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, filepath.Base(pkg)+suffix)
	args := []string{"build", "-trimpath"}
	if mode != "" {
		args = append(args, mode)
	}
	cmd := exec.Command("go", append(args, "-o", out, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("building %s: %v\n%s", pkg, err, b)
	}
	testMods[pkg] = out
	return out, nil
}

// RemoveModules deletes what BuildModule and BuildCommand built (a
// TestMain calls it).
func RemoveModules() {
	testModsMu.Lock()
	defer testModsMu.Unlock()
	for pkg, p := range testMods {
		os.RemoveAll(filepath.Dir(p))
		delete(testMods, pkg)
	}
}
