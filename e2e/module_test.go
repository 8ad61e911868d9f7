package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	moduleOnce  sync.Once
	moduleBytes []byte
	moduleErr   error
)

// module builds ./filter into a temporary file, once per test binary, and
// returns the compiled hashlb.wasm. The e2e tests build the module from the
// source they test rather than trusting dist/, which may be stale; a build
// failure fails the test (never a skip).
func module(t testing.TB) []byte {
	t.Helper()
	moduleOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hashlb-e2e-")
		if err != nil {
			moduleErr = err
			return
		}
		out := filepath.Join(dir, "hashlb.wasm")
		cmd := exec.Command("go", "build", "-trimpath", "-buildmode=c-shared", "-o", out, "./filter")
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if b, err := cmd.CombinedOutput(); err != nil {
			moduleErr = &buildError{err: err, out: string(b)}
			return
		}
		moduleBytes, moduleErr = os.ReadFile(out)
		os.RemoveAll(dir)
	})
	if moduleErr != nil {
		t.Fatalf("building the module: %v", moduleErr)
	}
	return moduleBytes
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }
