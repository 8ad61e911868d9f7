package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/internal/wasmpost"
)

// built caches the modules this test binary has built, by package directory
// and build tags.
var (
	builtMu sync.Mutex
	built   = map[string]*builtModule{}
)

type builtModule struct {
	once sync.Once
	wasm []byte
	err  error
}

// module builds ./filter into a temporary file, once per test binary, and
// returns the compiled hashlb.wasm. The e2e tests build the module from the
// source they test rather than trusting dist/, which may be stale; a build
// failure fails the test (never a skip).
func module(t testing.TB) []byte {
	t.Helper()
	return buildModule(t, "./filter")
}

// moduleHost runs the module on hostsim under c, closed when the test ends.
func moduleHost(t testing.TB, c hostsim.Config) *hostsim.Host {
	t.Helper()
	h, err := hostsim.New(context.Background(), module(t), c)
	if err != nil {
		t.Fatalf("hostsim.New: %v", err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// buildModule builds the proxy-wasm module in pkgDir (a package path relative
// to the repository root, such as "./e2e/testdata/noop") the way build.sh
// builds hashlb: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared, with
// the build tags tags when given, and for ./filter the step after the linker
// (internal/wasmpost). Each package and tags is built once per test binary.
func buildModule(t testing.TB, pkgDir string, tags ...string) []byte {
	t.Helper()
	args := []string{"build", "-trimpath", "-buildmode=c-shared"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	key := strings.Join(append([]string{pkgDir}, tags...), " ")
	builtMu.Lock()
	m := built[key]
	if m == nil {
		m = &builtModule{}
		built[key] = m
	}
	builtMu.Unlock()
	m.once.Do(func() {
		dir, err := os.MkdirTemp("", "hashlb-e2e-")
		if err != nil {
			m.err = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "module.wasm")
		cmd := exec.Command("go", append(args, "-o", out, pkgDir)...)
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if b, err := cmd.CombinedOutput(); err != nil {
			m.err = &buildError{err: err, out: string(b)}
			return
		}
		m.wasm, m.err = os.ReadFile(out)
		if m.err == nil && pkgDir == "./filter" {
			m.wasm, m.err = wasmpost.Finish(m.wasm) // as ./build.sh wasm ships it
		}
	})
	if m.err != nil {
		t.Fatalf("building %s: %v", key, m.err)
	}
	return m.wasm
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }
