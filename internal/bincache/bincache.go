// Package bincache builds a command from a pinned wrapper Go module once and
// keeps the binary in the user cache: the istiod (pilot-discovery) of each
// Istio release e2e/istio runs, and the control plane of the controller's
// tests (kube-apiserver and, on a machine without one, etcd), which
// cmd/hashlb-controller/internal/testenv and e2e/istio both take from here,
// so that either suite finds what the other built.
//
// A binary lives in DIR/<name>-<version>-<key>/<name>, where key hashes the
// wrapper's go.mod and go.sum, the Go version and the platform: a new pin or
// a new toolchain builds anew, anything else reuses. A lock file in that
// directory keeps two processes from building it at once; the second waits
// and takes the first one's binary.
//
// The cache, the key and the build are bincache.go; the control plane's
// binaries (their versions, link flags and cache directory, and where etcd
// is found first) are envtest.go.
package bincache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Spec says what to build and where to keep it.
type Spec struct {
	// Wrapper is the directory of the module that pins the command's
	// module (its go.mod requires it, its go.sum locks the tree).
	Wrapper string
	// Dir is the cache directory (the binary goes in a subdirectory).
	Dir string
	// Name is the binary's name; Version names the release in the
	// subdirectory's name.
	Name, Version string
	// Package is the import path to build.
	Package string
	// Tags and LDFlags are go build's -tags and -ldflags ("" for none).
	Tags, LDFlags string
	// Why is said on the progress line when the build starts ("first run
	// only; about 7 minutes of 2 cores").
	Why string
	// Progress receives the progress lines (os.Stderr when nil): one when
	// the build starts, one every 30 s while it runs, one at its end.
	Progress io.Writer
}

// Result is a binary and what its build cost (zero when it came from the
// cache).
type Result struct {
	Path    string
	Built   bool
	Wall    time.Duration
	CPU     time.Duration // user + system, the compiler processes included
	MaxRSSK int64         // the largest process's peak resident memory, kB
}

// Get returns the cached binary, building it first when it is missing.
func Get(s Spec) (Result, error) {
	if s.Progress == nil {
		s.Progress = os.Stderr
	}
	key, err := Key(s.Wrapper)
	if err != nil {
		return Result{}, err
	}
	dir := filepath.Join(s.Dir, s.Name+"-"+s.Version+"-"+key)
	bin := filepath.Join(dir, s.Name)
	if _, err := os.Stat(bin); err == nil {
		return Result{Path: bin}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Result{}, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return Result{}, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Fprintf(s.Progress, "bincache: %s %s is being built by another process (lock %s); waiting for it\n", s.Name, s.Version, lock.Name())
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			return Result{}, fmt.Errorf("bincache: lock %s: %w", lock.Name(), err)
		}
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return Result{Path: bin}, nil // built by the process this one waited for
	}
	return build(s, bin)
}

func build(s Spec, bin string) (Result, error) {
	fmt.Fprintf(s.Progress, "bincache: building %s %s (%s) into %s (%s)\n", s.Name, s.Version, s.Package, filepath.Dir(bin), s.Why)
	start := time.Now()
	tmp := bin + ".tmp"
	args := []string{"build", "-o", tmp}
	if s.Tags != "" {
		args = append(args, "-tags="+s.Tags)
	}
	if s.LDFlags != "" {
		args = append(args, "-ldflags="+s.LDFlags)
	}
	cmd := exec.Command("go", append(args, s.Package)...)
	cmd.Dir = s.Wrapper
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return Result{}, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return Result{}, fmt.Errorf("bincache: go build %s in %s: %w\n%s", s.Package, s.Wrapper, err, out.Bytes())
			}
			if err := os.Rename(tmp, bin); err != nil {
				return Result{}, err
			}
			r := Result{Path: bin, Built: true, Wall: time.Since(start),
				CPU: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
			if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				r.MaxRSSK = ru.Maxrss
			}
			fmt.Fprintf(s.Progress, "bincache: built %s %s in %s (%s of CPU, peak %d MB)\n", s.Name, s.Version,
				r.Wall.Round(time.Second), r.CPU.Round(time.Second), r.MaxRSSK/1024)
			return r, nil
		case <-tick.C:
			fmt.Fprintf(s.Progress, "bincache: still building %s %s (%s so far)\n", s.Name, s.Version, time.Since(start).Round(time.Second))
		}
	}
}

// Key hashes what decides a binary built in wrapper: its go.mod and go.sum,
// the Go version and the platform (12 hex digits).
func Key(wrapper string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(wrapper, f))
		if err != nil {
			return "", fmt.Errorf("bincache: the wrapper module: %w", err)
		}
		h.Write(data)
	}
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("bincache: go env GOVERSION: %w", err)
	}
	h.Write(bytes.TrimSpace(goVersion))
	h.Write([]byte(runtime.GOOS + "/" + runtime.GOARCH))
	return strings.ToLower(hex.EncodeToString(h.Sum(nil))[:12]), nil
}
