package e2e

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// built caches the modules this test binary has read, by package directory
// and build tags.
var built sync.Map

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
// builds hashlb, with the build tags tags when given, and ./filter finished
// as it ships (envoyrun.BuildModule), and returns it. Each package and tags
// is built and read once per test binary.
func buildModule(t testing.TB, pkgDir string, tags ...string) []byte {
	t.Helper()
	key := strings.Join(append([]string{pkgDir}, tags...), " ")
	if b, ok := built.Load(key); ok {
		return b.([]byte)
	}
	path, err := envoyrun.BuildModule(pkgDir, tags...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := built.LoadOrStore(key, b)
	return v.([]byte)
}
