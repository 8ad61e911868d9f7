package bincache

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A wrapper module is built once: the second Get finds the binary, and a
// changed pin gives a new key and a new build.
func TestGetBuildsOnceAndKeysOnThePins(t *testing.T) {
	wrapper := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(wrapper, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/wrapper\n\ngo 1.24\n")
	write("go.sum", "")
	write("main.go", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"built\") }\n")
	var progress bytes.Buffer
	spec := Spec{Wrapper: wrapper, Dir: t.TempDir(), Name: "hello", Version: "v1", Package: ".", Why: "test", Progress: &progress}

	first, err := Get(spec)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Built {
		t.Errorf("first Get: Built = false, want a build")
	}
	out, err := exec.Command(first.Path).Output()
	if err != nil || string(out) != "built\n" {
		t.Fatalf("running %s: %q, %v", first.Path, out, err)
	}
	again, err := Get(spec)
	if err != nil {
		t.Fatal(err)
	}
	if again.Built || again.Path != first.Path {
		t.Errorf("second Get = %+v, want the cached %s without a build", again, first.Path)
	}

	write("go.mod", "module example.com/wrapper\n\ngo 1.25\n")
	changed, err := Get(spec)
	if err != nil {
		t.Fatal(err)
	}
	if !changed.Built || changed.Path == first.Path {
		t.Errorf("after a new go.mod: %+v, want a new build beside %s", changed, first.Path)
	}
	if !bytes.Contains(progress.Bytes(), []byte("bincache: building hello v1")) {
		t.Errorf("progress does not announce the build:\n%s", progress.Bytes())
	}
}

// A directory that is no wrapper module (no go.mod, no go.sum) is a clear
// error.
func TestKeyNeedsTheWrapperModule(t *testing.T) {
	if _, err := Key(t.TempDir()); err == nil {
		t.Fatal("Key of an empty directory: no error")
	}
}

// The environment's choices come first: the cache directory and the etcd
// binary.
func TestEnvtestEnvironment(t *testing.T) {
	t.Setenv("HASHLB_ENVTEST_CACHE", "/some/cache")
	if d, err := EnvtestDir(); err != nil || d != "/some/cache" {
		t.Errorf("EnvtestDir() = %q, %v; want /some/cache", d, err)
	}
	t.Setenv("HASHLB_ETCD_BIN", "/some/etcd")
	if p, err := Etcd(t.TempDir()); err != nil || p != "/some/etcd" {
		t.Errorf("Etcd() = %q, %v; want /some/etcd", p, err)
	}
}
