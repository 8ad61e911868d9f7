// Package atomicfile replaces a file so that a reader sees the old content
// or the new, never a part: hashlb-controller's ECDS files (Envoy's
// path_config_source watches the directory for the rename and reloads), and
// the real-Envoy tests that write them as the controller does.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data, mode 0644: a temporary file in the same
// directory (made if missing), written, synced, then renamed over path. On
// an error path is as it was and the temporary file is gone.
func Write(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
