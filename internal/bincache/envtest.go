package bincache

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// KubeVersion is the k8s.io/kubernetes release the controller's wrapper
// module (cmd/hashlb-controller/internal/envtestbin) pins; EtcdVersion is
// the etcd server that release requires.
const (
	KubeVersion = "v1.37.2"
	EtcdVersion = "v3.7.0"
)

// EnvtestDir is the cache directory of the control plane's binaries:
// $HASHLB_ENVTEST_CACHE, else os.UserCacheDir()/hashlb/envtest.
func EnvtestDir() (string, error) {
	if d := os.Getenv("HASHLB_ENVTEST_CACHE"); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("bincache: no cache directory (set HASHLB_ENVTEST_CACHE): %w", err)
	}
	return filepath.Join(base, "hashlb", "envtest"), nil
}

// KubeAPIServer returns the kube-apiserver built from the wrapper module in
// directory wrapper, building it into EnvtestDir first when it is missing.
func KubeAPIServer(wrapper string) (string, error) {
	// The version Kubernetes' own build stamps in (hack/lib/version.sh);
	// without it the server reports v0.0.0-master.
	v := "k8s.io/component-base/version."
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubeVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	ldflags := "-X " + v + "gitVersion=" + KubeVersion + " -X " + v + "gitMajor=" + major + " -X " + v + "gitMinor=" + minor +
		" -X " + v + "gitTreeState=clean"
	return envtestBuild(wrapper, "kube-apiserver", KubeVersion, "k8s.io/kubernetes/cmd/kube-apiserver", ldflags,
		"first run only, shared by the controller's tests and e2e/istio: about 7 minutes of 2 idle cores and 2.9 GB")
}

// Etcd returns the etcd binary to run: $HASHLB_ETCD_BIN, else the first etcd
// on $PATH, else /usr/bin/etcd (Debian's etcd-server, which ./build.sh test
// installs), else one built from the wrapper module in directory wrapper
// and cached in EnvtestDir.
func Etcd(wrapper string) (string, error) {
	if p := os.Getenv("HASHLB_ETCD_BIN"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd", nil
	}
	return envtestBuild(wrapper, "etcd", EtcdVersion, "go.etcd.io/etcd/server/v3", "",
		"no etcd on this machine (Debian's etcd-server, which ./build.sh test installs, or $HASHLB_ETCD_BIN)")
}

func envtestBuild(wrapper, name, version, pkg, ldflags, why string) (string, error) {
	dir, err := EnvtestDir()
	if err != nil {
		return "", err
	}
	res, err := Get(Spec{Wrapper: wrapper, Dir: dir, Name: name, Version: version, Package: pkg, LDFlags: ldflags, Why: why})
	return res.Path, err
}
