// Package testenv starts a real Kubernetes control plane for the
// controller's tests: controller-runtime's envtest, with a kube-apiserver
// built here from the Go module k8s.io/kubernetes (pinned by the wrapper
// module in ../envtestbin) and etcd, with stand-ins for Istio's WasmPlugin
// and TrafficExtension CRDs (testdata/; each file names its source) and the
// experimental channel's HTTPRoute and ReferenceGrant CRDs, read from the
// module cache's copy of sigs.k8s.io/gateway-api, installed.
//
// The kube-apiserver binary is built once and cached outside the
// repository (os.UserCacheDir()/hashlb/envtest/<version>-<hash>, or
// $HASHLB_ENVTEST_CACHE), keyed by the wrapper's go.mod, go.sum and the Go
// version, so a cold first run compiles Kubernetes and later runs start in
// seconds. etcd is $HASHLB_ETCD_BIN, else the first etcd on $PATH or
// /usr/bin/etcd (Debian's etcd-server, which ./build.sh test installs), else
// one built the same way from go.etcd.io/etcd/server/v3 (the version
// k8s.io/kubernetes requires).
//
// The environment, the binaries and their cache are testenv.go; finding the
// Gateway API module and its CRD files is gatewayapi.go.
package testenv

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KubeVersion is the k8s.io/kubernetes release the wrapper module pins;
// EtcdVersion is the etcd server it requires.
const (
	KubeVersion = "v1.37.2"
	EtcdVersion = "v3.7.0"
)

const modulePath = "github.com/hashlb/hashlb/cmd/hashlb-controller"

// Env is a running control plane.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// KubeConfig is the same as a kubeconfig file's content.
	KubeConfig []byte
	env        *envtest.Environment
}

// Start builds (or finds) the binaries and starts etcd and kube-apiserver.
func Start() (*Env, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	apiserver, err := KubeAPIServer(root)
	if err != nil {
		return nil, err
	}
	etcd, err := Etcd(root)
	if err != nil {
		return nil, err
	}
	gateway, err := GatewayAPICRDs(root, "experimental")
	if err != nil {
		return nil, err
	}
	te := &envtest.Environment{
		CRDDirectoryPaths:        append([]string{filepath.Join(root, "internal", "testenv", "testdata")}, gateway...),
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	te.ControlPlane.GetAPIServer().Path = apiserver
	te.ControlPlane.Etcd = &envtest.Etcd{Path: etcd}
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("envtest with %s and %s: %w", apiserver, etcd, err)
	}
	return &Env{Config: cfg, KubeConfig: te.KubeConfig, env: te}, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error { return e.env.Stop() }

// moduleRoot is the controller module's directory, found from the working
// directory (go test runs a package's tests in its own directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.HasPrefix(data, []byte("module "+modulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("testenv: no go.mod of %s above the working directory", modulePath)
		}
		dir = parent
	}
}

// Etcd returns the etcd binary to run, building it when the machine has none.
func Etcd(root string) (string, error) {
	if p := os.Getenv("HASHLB_ETCD_BIN"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd", nil
	}
	return cachedBuild(root, "etcd", EtcdVersion, "go.etcd.io/etcd/server/v3", "",
		"no etcd on this machine (Debian's etcd-server, which ./build.sh test installs, or $HASHLB_ETCD_BIN)")
}

// KubeAPIServer returns the cached kube-apiserver built from the wrapper
// module under root, building it first if it is missing.
func KubeAPIServer(root string) (string, error) {
	// The version Kubernetes' own build stamps in (hack/lib/version.sh);
	// without it the server reports v0.0.0-master.
	v := "k8s.io/component-base/version."
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubeVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	ldflags := "-X " + v + "gitVersion=" + KubeVersion + " -X " + v + "gitMajor=" + major + " -X " + v + "gitMinor=" + minor +
		" -X " + v + "gitTreeState=clean"
	return cachedBuild(root, "kube-apiserver", KubeVersion, "k8s.io/kubernetes/cmd/kube-apiserver", ldflags,
		"first run only; about 7 minutes of 2 cores and 2.9 GB")
}

// cachedBuild returns the binary name built from package pkg of the
// wrapper module under root, building it into the cache first if it is
// missing. A lock file keeps two test processes from building it at once.
func cachedBuild(root, name, version, pkg, ldflags, why string) (string, error) {
	wrapper := filepath.Join(root, "internal", "envtestbin")
	key, err := cacheKey(wrapper)
	if err != nil {
		return "", err
	}
	dir := os.Getenv("HASHLB_ENVTEST_CACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("testenv: no cache directory (set HASHLB_ENVTEST_CACHE): %w", err)
		}
		dir = filepath.Join(base, "hashlb", "envtest")
	}
	dir = filepath.Join(dir, name+"-"+version+"-"+key)
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("testenv: lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // another process built it while this one waited
	}
	fmt.Fprintf(os.Stderr, "testenv: building %s %s into %s (%s)\n", name, version, dir, why)
	start := time.Now()
	tmp := bin + ".tmp"
	args := []string{"build", "-o", tmp}
	if ldflags != "" {
		args = append(args, "-ldflags="+ldflags)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = wrapper
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("testenv: go build %s in %s: %w\n%s", pkg, wrapper, err, out.Bytes())
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "testenv: built %s in %s\n", name, time.Since(start).Round(time.Second))
	return bin, nil
}

// cacheKey hashes what decides the binary: the wrapper's pins and the Go
// toolchain.
func cacheKey(wrapper string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(wrapper, f))
		if err != nil {
			return "", fmt.Errorf("testenv: the kube-apiserver wrapper module: %w", err)
		}
		h.Write(data)
	}
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("testenv: go env GOVERSION: %w", err)
	}
	h.Write(bytes.TrimSpace(goVersion))
	h.Write([]byte(runtime.GOOS + "/" + runtime.GOARCH))
	return strings.ToLower(hex.EncodeToString(h.Sum(nil))[:12]), nil
}
