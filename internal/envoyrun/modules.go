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
	out := filepath.Join(dir, filepath.Base(pkg)+".wasm")
	cmd := exec.Command("go", "build", "-trimpath", "-buildmode=c-shared", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("building %s: %v\n%s", pkg, err, b)
	}
	testMods[pkg] = out
	return out, nil
}

// RemoveModules deletes what BuildModule built (a TestMain calls it).
func RemoveModules() {
	testModsMu.Lock()
	defer testModsMu.Unlock()
	for pkg, p := range testMods {
		os.RemoveAll(filepath.Dir(p))
		delete(testMods, pkg)
	}
}
