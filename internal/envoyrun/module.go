package envoyrun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/internal/wasmpost"
)

// RepoRoot is the directory of the repository's go.mod, found upward from
// the working directory (a test's package directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/hashlb/hashlb\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("envoyrun: no github.com/hashlb/hashlb go.mod above the working directory")
		}
		dir = parent
	}
}

// ModulePath builds ./filter the way build.sh does (GOOS=wasip1
// GOARCH=wasm, -buildmode=c-shared, then internal/wasmpost), once per
// process, and returns the path of the .wasm. The tests build the module
// from the source they test, never trusting a dist/ that may be stale; a
// build failure is an error.
func ModulePath() (string, error) { return buildWasm(buildKey{module, "./filter"}, "./filter", nil) }

// finishModule rewrites the module at path as ./build.sh wasm ships it
// (wasmpost.Finish).
func finishModule(path string) error {
	b, err := os.ReadFile(path)
	if err == nil {
		b, err = wasmpost.Finish(b)
	}
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		return fmt.Errorf("finishing ./filter's module: %w", err)
	}
	return nil
}

// RemoveModule deletes the module ModulePath built (a TestMain calls it).
func RemoveModule() { removeBuilds(module) }

// WorkDir returns a new directory for one Envoy, holding dist/hashlb.wasm
// (the module ModulePath built), so that the shipped bootstraps' relative
// module path resolves as it does from the repository root.
func WorkDir(t testing.TB) string {
	t.Helper()
	m, err := ModulePath()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "dist"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(m, filepath.Join(dir, "dist", "hashlb.wasm")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ReadRepoFile reads a file of the repository by its path from the root.
func ReadRepoFile(t testing.TB, rel string) []byte {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Replace returns s with each old, new pair of kv replaced, failing the
// test when an old string does not occur: a substitution that silently
// matches nothing would test the file unchanged against the wrong ports.
func Replace(t testing.TB, s []byte, kv ...string) []byte {
	t.Helper()
	out := string(s)
	for i := 0; i+1 < len(kv); i += 2 {
		if !strings.Contains(out, kv[i]) {
			t.Fatalf("substitution: %q not found", kv[i])
		}
		out = strings.ReplaceAll(out, kv[i], kv[i+1])
	}
	return []byte(out)
}
