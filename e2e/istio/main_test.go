package istio

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/hashlb/hashlb/e2e/istio/internal/istioenv"
	"github.com/hashlb/hashlb/internal/bincache"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// releaseSetup is one Istio release ready to run (its istiod, CRDs and
// Envoy binaries).
type releaseSetup = istioenv.ReleaseSetup

// setup is what the outer process prepares (builds, downloads) before the
// tests run in their network namespace, which has no way out.
type setup struct {
	KubeAPIServer string
	Etcd          string
	Module        string // hashlb.wasm, built from ./filter
	Controller    string // hashlb-controller, built from cmd/hashlb-controller
	Proxy         string // hashlb-proxy, built from hostsim/cmd/hashlb-proxy (the demo's backends)
	Demo          string // ./build.sh istio's program, built from cmd/istiodemo
	LBPolicy      string // the directory of libhashlb_lbpolicy.so, built from cmd/hashlb-lbpolicy
	RepoRoot      string
	Releases      []releaseSetup
	// ./build.sh oci's image of Module, for TestPilotAgent: the OCI layout
	// hashlb-oci wrote and what it printed (the manifest's digest, the
	// module's sha256).
	OCILayout, OCIManifest, OCIModuleSHA256 string
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
	if s.OCILayout != "" {
		defer os.RemoveAll(filepath.Dir(s.OCILayout))
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
	if s.Controller, s.Proxy, s.Demo, err = buildCommands(root); err != nil {
		return s, err
	}
	if s.LBPolicy, err = envoyrun.BuildLBPolicy(""); err != nil {
		return s, err
	}
	if s.KubeAPIServer, err = bincache.KubeAPIServer(istioenv.EnvtestWrapper(root)); err != nil {
		return s, err
	}
	if s.Etcd, err = bincache.Etcd(istioenv.EnvtestWrapper(root)); err != nil {
		return s, err
	}
	want := os.Getenv("HASHLB_ISTIO_RELEASES") // every release by default
	for _, r := range istioenv.Releases {
		if want != "" && !strings.Contains(","+want+",", ","+r.Name+",") {
			continue
		}
		rs, err := istioenv.Prepare(root, r, nil)
		if err != nil {
			return s, err
		}
		if runs("TestPilotAgent") {
			if rs.Agent, err = istioenv.PrepareAgent(root, r, nil); err != nil {
				return s, err
			}
		}
		s.Releases = append(s.Releases, rs)
	}
	if runs("TestPilotAgent") {
		s.OCILayout, s.OCIManifest, s.OCIModuleSHA256, err = packOCI(root, s.Module)
	}
	return s, err
}

// runs says whether -test.run selects the top-level test name (every test
// without -test.run): what only some tests need is prepared for them only.
func runs(name string) bool {
	flag.Parse()
	f := flag.Lookup("test.run")
	if f == nil || f.Value.String() == "" {
		return true
	}
	top, _, _ := strings.Cut(f.Value.String(), "/")
	re, err := regexp.Compile(top)
	return err != nil || re.MatchString(name)
}

// ociOut is what hashlb-oci prints that the tests use: the module's sha256
// and the manifest's digest.
var ociOut = regexp.MustCompile(`(?m)^module\s+sha256:([0-9a-f]{64})\s.*\n^manifest\s+(sha256:[0-9a-f]{64})\s`)

// packOCI packs module as ./build.sh oci does (hashlb-oci, tag latest) into
// a temporary directory and returns the layout and what hashlb-oci printed.
func packOCI(root, module string) (dir, manifest, moduleSHA string, err error) {
	tmp, err := os.MkdirTemp("", "hashlb-istio-oci-")
	if err != nil {
		return "", "", "", err
	}
	dir = filepath.Join(tmp, "oci")
	out, err := istioenv.GoCmd(root, "run", "./tools/ocipack/cmd/hashlb-oci", "-in", module, "-out", dir, "-tag", "latest")
	if err != nil {
		os.RemoveAll(tmp)
		return "", "", "", err
	}
	m := ociOut.FindStringSubmatch(out)
	if m == nil {
		os.RemoveAll(tmp)
		return "", "", "", fmt.Errorf("hashlb-oci printed no module and manifest lines:\n%s", out)
	}
	return dir, m[2], m[1], nil
}

// buildCommands builds hashlb-controller, hashlb-proxy and cmd/istiodemo
// from the tree into one temporary directory.
func buildCommands(root string) (controller, proxy, demo string, err error) {
	dir, err := os.MkdirTemp("", "hashlb-istio-controller-")
	if err != nil {
		return "", "", "", err
	}
	controller, proxy, demo = filepath.Join(dir, "hashlb-controller"), filepath.Join(dir, "hashlb-proxy"), filepath.Join(dir, "istiodemo")
	for _, b := range []struct{ module, pkg, out string }{
		{filepath.Join(root, "cmd", "hashlb-controller"), ".", controller},
		{root, "./hostsim/cmd/hashlb-proxy", proxy},
		{filepath.Join(root, "e2e", "istio"), "./cmd/istiodemo", demo},
	} {
		if _, err := istioenv.GoCmd(b.module, "build", "-o", b.out, b.pkg); err != nil {
			os.RemoveAll(dir)
			return "", "", "", err
		}
	}
	return controller, proxy, demo, nil
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
