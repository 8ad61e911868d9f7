package hostsim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// testModules are built once per test run from testdata/<name>.
var (
	moduleDir  string
	moduleMu   sync.Mutex
	moduleWasm = map[string][]byte{}
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hostsim-modules-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	moduleDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// module builds testdata/<name> with the standard Go toolchain for wasip1
// (c-shared, a reactor) and returns its bytes; builds are cached for the run.
func module(t testing.TB, name string) []byte {
	t.Helper()
	moduleMu.Lock()
	defer moduleMu.Unlock()
	if b, ok := moduleWasm[name]; ok {
		return b
	}
	out := filepath.Join(moduleDir, name+".wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./testdata/"+name)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building testdata/%s: %v\n%s", name, err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	moduleWasm[name] = b
	return b
}

// newHost starts module name under cfg and closes it when the test ends.
func newHost(t testing.TB, name string, cfg Config) *Host {
	t.Helper()
	h, err := New(context.Background(), module(t, name), cfg)
	if err != nil {
		t.Fatalf("New(%s) = %v", name, err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}
