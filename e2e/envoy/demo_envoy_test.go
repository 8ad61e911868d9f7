package envoy

// The README's quick-start curl lines through real Envoy, as they answer
// through hashlb-proxy: TestEnvoyYAMLAnswersAsTheReadme sends them to
// envoy.yaml as shipped; for the demo (./build.sh envoy),
// TestEnvoyDemoAnswersAsTheReadme runs the bootstrap the script runs
// (envoyrun.DemoBootstrap) on free ports with lbcore as the oracle;
// TestEnvoyDemoScript runs the script itself on the README's own ports, in a
// private network namespace so that nothing else on the machine can hold
// them, and stops it as Ctrl-C does.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/lbcore"
)

// request is the lbcore request a curl line makes (the filter strips the
// forged upstream header, so it plays no part).
func readmeRequest(t testing.TB, c envoyrun.ReadmeCurl) lbcore.Request {
	t.Helper()
	u := strings.TrimPrefix(c.URL, "http://")
	host, path, _ := strings.Cut(u, "/")
	return lbcore.Request{Target: "/" + path, Authority: host, Method: "GET"}
}

// check compares a with what the README says, for the backend name and
// address the answer must carry.
func checkReadmeAnswer(t testing.TB, c envoyrun.ReadmeCurl, a envoyrun.CurlAnswer, service, addr string) {
	t.Helper()
	wantBody := fmt.Sprintf("backend %s (%s)\n", service, addr)
	if a.Status != 200 || a.Body != wantBody {
		t.Errorf("%s: %d %q, want 200 %q", c.Line, a.Status, a.Body, wantBody)
	}
	if c.Decision != "" {
		want := regexp.MustCompile(`service=[^;]*`).ReplaceAllString(c.Decision, "service="+service)
		if a.Decision != want {
			t.Errorf("%s: X-Hashlb-Decision %q, want %q", c.Line, a.Decision, want)
		}
	}
}

func demoBootstrap(t testing.TB) []byte {
	t.Helper()
	b, err := envoyrun.DemoBootstrap(envoyrun.ReadRepoFile(t, "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEnvoyYAMLAnswersAsTheReadme starts envoy.yaml as shipped (only its
// ports moved to free ones) in front of three echo backends and sends the
// README's three requests: /some/path reaches the service lbcore ranks first
// twice, and a client's forged x-envoy-original-dst-host neither chooses the
// upstream nor reaches it.
func TestEnvoyYAMLAnswersAsTheReadme(t *testing.T) {
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		bs := envoyrun.StartBackends(t, 3)
		yaml := envoyrun.Ports(t, envoyrun.ReadRepoFile(t, "envoy.yaml"), map[int]int{
			9901: 0, 10000: 0, 18081: bs[0].Port(), 18082: bs[1].Port(), 18083: bs[2].Port(),
		})
		cfg := pluginConfigs(t, yaml)[0]
		e := envoyrun.Start(t, bin, envoyrun.Options{Bootstrap: yaml, Dir: envoyrun.WorkDir(t)}) // validated as shipped by TestBootstrapsStart
		url := "http://" + e.MustListener(t, "hashlb_listener")
		for _, c := range []struct {
			path, forged, want string
		}{
			{"/some/path", "", ""},
			{"/some/path", "", ""},
			{"/x", "203.0.113.9:80", ""},
		} {
			// The backends' ports are not the README's, so neither are the
			// hashes: lbcore says where each request must go.
			c.want = oracle(cfg, lbcore.Request{Target: c.path, Authority: "x", Method: "GET"})[0]
			req, _ := http.NewRequest("GET", url+c.path, nil)
			if c.forged != "" {
				req.Header.Set("x-envoy-original-dst-host", c.forged)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("X-Backend") != c.want {
				t.Errorf("GET %s (forged %q): %d from %q, want 200 from %s: %s", c.path, c.forged, resp.StatusCode, resp.Header.Get("X-Backend"), c.want, body)
			}
			if c.forged != "" && strings.Contains(string(body), c.forged) {
				t.Errorf("GET %s: the backend received the forged header: %s", c.path, body)
			}
		}
	})
}

// TestEnvoyDemoAnswersAsTheReadme: the bootstrap ./build.sh envoy runs, in
// front of the demo's own backends (hashlb-proxy -backends-only), answers the
// README's three curl lines as the README says: 200, "backend NAME (ADDR)"
// from the service lbcore ranks first, x-hashlb-decision where the README
// shows it, the forged x-envoy-original-dst-host ignored. The ports are free
// ones, so the names come from lbcore; with the README's ports lbcore must
// name the README's backends.
func TestEnvoyDemoAnswersAsTheReadme(t *testing.T) {
	lines := envoyrun.ReadmeCurls(t)
	demo := demoBootstrap(t)
	fixed := pluginConfigs(t, demo)[0]
	for _, c := range lines {
		got := oracle(fixed, readmeRequest(t, c))[0]
		if got != c.Service {
			t.Errorf("%s: lbcore sends it to %s with the README's ports, the README's body says %s", c.Line, got, c.Service)
		}
		if m := regexp.MustCompile(`service=([^;]*)`).FindStringSubmatch(c.Decision); m != nil && m[1] != got {
			t.Errorf("%s: lbcore sends it to %s with the README's ports, the README's X-Hashlb-Decision says %s", c.Line, got, m[1])
		}
	}
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		sub := startDemoBackendsFree(t, "configs/demo.json", []int{18081, 18082, 18083})
		sub[9901], sub[10000] = 0, 0
		yaml := envoyrun.Ports(t, demo, sub)
		dir := envoyrun.WorkDir(t)
		cfg := pluginConfigs(t, yaml)[0]
		e := envoyrun.Start(t, bin, envoyrun.Options{Bootstrap: yaml, Dir: dir})
		listener := e.MustListener(t, "hashlb_listener")
		for _, c := range lines {
			r := readmeRequest(t, c)
			name := oracle(cfg, r)[0]
			var addr string
			for _, s := range cfg.Services {
				if s.Name == name {
					addr = s.Address
				}
			}
			a := c.Send(t, listener)
			checkReadmeAnswer(t, c, a, name, addr)
			// Facts for docs/envoy-host.md: what Envoy adds to the answer.
			if a.Header.Get("Server") != "envoy" || a.Header.Get("X-Envoy-Upstream-Service-Time") == "" {
				t.Errorf("%s: server %q, x-envoy-upstream-service-time %q: want Envoy's own answer headers", c.Line, a.Header.Get("Server"), a.Header.Get("X-Envoy-Upstream-Service-Time"))
			}
		}
	})
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var out []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// hashlbProxy builds hostsim/cmd/hashlb-proxy once per process.
func hashlbProxy(t testing.TB) string {
	t.Helper()
	return built(t, envoyrun.BuildCommand, "./hostsim/cmd/hashlb-proxy")
}

// startDemoBackendsFree runs hashlb-proxy -backends-only (and args) on the
// plugin configuration file config (a repository path), as docs/deploy.md
// tells a user to, with each of the service ports ports moved to a free one,
// and waits until it says its backends are up; they stop when the test
// ends. A port taken between freePorts and the start (an outgoing
// connection of another test may get it as its local port) makes it try
// again on other ports, twice. It returns the moves.
func startDemoBackendsFree(t testing.TB, config string, ports []int, args ...string) map[int]int {
	t.Helper()
	for try := 1; ; try++ {
		free := freePorts(t, len(ports))
		sub := map[int]int{}
		for i, p := range ports {
			sub[p] = free[i]
		}
		err := tryDemoBackends(t, envoyrun.Ports(t, envoyrun.ReadRepoFile(t, config), sub), args...)
		if err == nil {
			return sub
		}
		if !errors.Is(err, errPortTaken) || try == 3 {
			t.Fatal(err)
		}
		t.Logf("try %d: %v; again on other ports", try, err)
	}
}

// errPortTaken is what tryDemoBackends returns when a backend's port was
// taken between freePorts and the backends' start (an outgoing connection of
// another test may get it as its local port).
var errPortTaken = errors.New("a demo backend's port was taken")

// tryDemoBackends starts the demo backends of the configuration config:
// errPortTaken (wrapped) when one of its ports is in use.
func tryDemoBackends(t testing.TB, config []byte, args ...string) error {
	t.Helper()
	mod, err := envoyrun.ModulePath()
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfgFile, config, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(hashlbProxy(t), append([]string{"-backends-only", "-wasm", mod, "-config", cfgFile}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "demo backends of") {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Wait()
			if strings.Contains(stderr.String(), "address already in use") {
				return fmt.Errorf("%w: %s", errPortTaken, stderr.String())
			}
			return fmt.Errorf("hashlb-proxy -backends-only exited before its backends were up: %s", stderr.String())
		}
	case <-time.After(2 * time.Minute):
		return errors.New("hashlb-proxy -backends-only: backends not up within 2 minutes")
	}
	return nil
}

// The fixed-port run: the test binary runs itself again in a new user and
// network namespace, where 127.0.0.1:10000, :9901 and :18081-18083 are free
// whatever runs on the machine; demoNetns names the copy of the repository
// to run the script in.
const demoNetns = "HASHLB_TEST_DEMO_NETNS"

// demoPorts are the ports the README's demo uses.
var demoPorts = []int{9901, 10000, 18081, 18082, 18083}

// TestEnvoyDemoScript runs ./build.sh envoy itself (in a copy of the
// repository, so that its build does not rewrite dist/ under other tests) on
// the README's ports, sends the README's three curl lines to
// 127.0.0.1:10000 and compares the answers with the README's text exactly;
// then it sends SIGINT to the script's process group, as Ctrl-C in a
// terminal does, and wants the script to stop Envoy and the backends: it
// says so, exits, no process of its group remains and no demo port
// accepts connections. Where no namespace can be made (user namespaces
// disabled), it runs on the host's ports if they are free; under CI they
// must be.
func TestEnvoyDemoScript(t *testing.T) {
	if repo := os.Getenv(demoNetns); repo != "" {
		// Inside the namespace: HASHLB_ENVOY_BINS names the Envoys.
		if err := loopbackUp(); err != nil {
			t.Fatalf("bringing lo up in the test's network namespace: %v", err)
		}
		eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) { runDemoScript(t, bin.Path, repo) })
		return
	}
	envoyrun.ReadmeCurls(t) // the README is readable before anything is built
	bins := envoyrun.Binaries(t)
	// One copy for every version, run one after the other: the second
	// run's builds find dist/ up to date.
	repo := copyRepo(t)
	var paths []string
	for _, b := range bins {
		paths = append(paths, b.Path)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEnvoyDemoScript$", "-test.count=1", "-test.v", "-test.timeout=8m")
	cmd.Env = append(os.Environ(), demoNetns+"="+repo, "HASHLB_ENVOY=", "HASHLB_ENVOY_BINS="+strings.Join(paths, " "))
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	out, err := cmd.CombinedOutput()
	var errno syscall.Errno
	if err != nil && errors.As(err, &errno) && (errno == syscall.EPERM || errno == syscall.EINVAL || errno == syscall.ENOSPC || errno == syscall.EUSERS || errno == syscall.ENOSYS) {
		// No namespace here: the host's ports, when nothing holds them.
		if busy := busyPorts(); len(busy) > 0 {
			msg := fmt.Sprintf("the demo's ports %v are in use on this machine and no network namespace can be made (%v): the fixed-port run of ./build.sh envoy is not done", busy, err)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		t.Logf("no private network namespace (%v): running on the host's ports, which are free", err)
		eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) { runDemoScript(t, bin.Path, repo) })
		return
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: TestEnvoyDemoScript") {
		t.Fatalf("./build.sh envoy in a network namespace: %v\n%s", err, out)
	}
	t.Logf("in a private network namespace:\n%s", out)
}

// runDemoScript is the fixed-port run itself.
func runDemoScript(t *testing.T, bin, repo string) {
	if busy := busyPorts(); len(busy) > 0 {
		t.Fatalf("the demo's ports %v are in use", busy)
	}
	cmd := exec.Command("./build.sh", "envoy")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "HASHLB_ENVOY="+bin)
	var addrs []string
	for _, p := range demoPorts {
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	envoyrun.RunDemo(t, envoyrun.DemoScript{
		Name: "./build.sh envoy", Cmd: cmd, Ready: 4 * time.Minute, Stop: waitCeiling,
		Stopped: "envoy: demo stopped", Addrs: addrs,
	})
}

// busyPorts returns the demo ports something accepts connections on.
func busyPorts() []int {
	var out []int
	for _, p := range demoPorts {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p), time.Second)
		if err == nil {
			c.Close()
			out = append(out, p)
		}
	}
	return out
}

// copyRepo copies the repository's files (not .git, not dist) into a
// temporary directory.
func copyRepo(t testing.TB) string {
	t.Helper()
	root, err := envoyrun.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if d.Name() == ".git" || rel == "dist" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// loopbackUp sets the IFF_UP flag of lo (a new network namespace starts
// with it down), as "ip link set lo up" does.
func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var ifr struct {
		name  [syscall.IFNAMSIZ]byte
		flags uint16
		_     [22]byte
	}
	copy(ifr.name[:], "lo")
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		return e
	}
	ifr.flags |= syscall.IFF_UP
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		return e
	}
	return nil
}
