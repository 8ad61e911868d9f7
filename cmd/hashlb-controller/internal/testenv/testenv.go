// Package testenv starts a real Kubernetes control plane for the
// controller's tests: controller-runtime's envtest, with a kube-apiserver
// built here from the Go module k8s.io/kubernetes (pinned by the wrapper
// module in ../envtestbin) and etcd, with stand-ins for Istio's WasmPlugin
// and TrafficExtension CRDs (testdata/; each file names its source) and the
// experimental channel's HTTPRoute and ReferenceGrant CRDs, read from the
// module cache's copy of sigs.k8s.io/gateway-api, installed.
//
// The kube-apiserver binary is built once and cached outside the
// repository (os.UserCacheDir()/hashlb/envtest/<name>-<version>-<key>, or
// $HASHLB_ENVTEST_CACHE), keyed by the wrapper's go.mod, go.sum, the Go
// version and the platform, so a cold first run compiles Kubernetes and
// later runs start in seconds. etcd is $HASHLB_ETCD_BIN, else the first etcd
// on $PATH or /usr/bin/etcd (Debian's etcd-server, which ./build.sh test
// installs), else one built the same way from go.etcd.io/etcd/server/v3 (the
// version k8s.io/kubernetes requires). The versions, the build and the cache
// are the repository's internal/bincache, which e2e/istio shares, so either
// suite finds what the other built.
//
// The environment and the binaries are testenv.go; finding the Gateway API
// module and its CRD files is gatewayapi.go; decoding the shipped manifests
// of configs/istio/controller and applying the ServiceAccount and RBAC the
// controller runs as is manifests.go.
package testenv

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/hashlb/hashlb/internal/bincache"
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

// Etcd returns the etcd binary to run (bincache.Etcd: the machine's, else
// one built from the wrapper module under root).
func Etcd(root string) (string, error) { return bincache.Etcd(wrapper(root)) }

// KubeAPIServer returns the cached kube-apiserver built from the wrapper
// module under root, building it first if it is missing.
func KubeAPIServer(root string) (string, error) { return bincache.KubeAPIServer(wrapper(root)) }

// wrapper is the directory of the module that pins kube-apiserver and etcd.
func wrapper(root string) string { return filepath.Join(root, "internal", "envtestbin") }
