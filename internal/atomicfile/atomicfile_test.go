package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteReplaces: a new file in a directory made for it, then replaced
// by a new inode (a rename, what a directory watch sees), mode 0644, no
// temporary file left.
func TestWriteReplaces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ecds", "a.json")
	if err := Write(path, []byte("one")); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("two")); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "two" {
		t.Errorf("content %q, want %q", got, "two")
	}
	if os.SameFile(before, after) {
		t.Error("the file was rewritten in place, want a new file renamed over it")
	}
	if after.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", after.Mode().Perm())
	}
	if es, _ := os.ReadDir(filepath.Dir(path)); len(es) != 1 {
		t.Errorf("the directory holds %d entries, want the file alone", len(es))
	}
}

// TestWriteFailsLeavingTheOld: a path that is a directory is refused, and
// the directory keeps what it held, no temporary file among it.
func TestWriteFailsLeavingTheOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "taken")
	if err := os.MkdirAll(filepath.Join(path, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("x")); err == nil {
		t.Fatal("replacing a non-empty directory succeeded, want an error")
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 || es[0].Name() != "taken" || !es[0].IsDir() {
		t.Errorf("after the failed write the directory holds %v, want taken/ alone", es)
	}
	if _, err := os.Stat(filepath.Join(path, "inner")); err != nil {
		t.Errorf("the old directory lost its content: %v", err)
	}
}
