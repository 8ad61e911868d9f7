package istio

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashlb/hashlb/e2e/istio/internal/istioenv"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// TestIstioDemo runs ./build.sh istio's program (cmd/istiodemo) as the
// script does, on the README's ports (the test's network namespace has them
// free), sends the README's three curl lines to 127.0.0.1:10000 through
// istiod's ingress gateway and compares the answers with the README's text
// exactly, as e2e/envoy's TestEnvoyDemoScript does for ./build.sh envoy:
// the same lines answer the same through Istio. Then SIGINT, as Ctrl-C
// sends it, stops the demo: exit status 130, "istio: demo stopped", and no
// port of the demo or of istiod accepts connections. Its two waits are
// ceilings that only catch a hung demo, not speed bounds: the start is
// istioenv's own waits (kube-apiserver, istiod, Envoy, istiod's pushes)
// added up, the stop the SIGTERM-then-SIGKILL waits of each process.
func TestIstioDemo(t *testing.T) {
	lines := envoyrun.ReadmeCurls(t)
	want := istioenv.Releases[len(istioenv.Releases)-1].Name
	var r *releaseSetup
	for i := range env.Releases {
		if env.Releases[i].Name == want {
			r = &env.Releases[i]
		}
	}
	if r == nil {
		t.Skipf("the demo runs Istio %s, which HASHLB_ISTIO_RELEASES leaves out", want)
	}
	start := time.Now()
	cmd := exec.Command(env.Demo, "-wasm", env.Module, "-proxy", env.Proxy, "-envoy", r.WasmEnvoy)
	cmd.Dir = env.RepoRoot
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	pgid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	var mu sync.Mutex
	var output strings.Builder
	tryLine := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			output.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if s, ok := strings.CutPrefix(sc.Text(), "try: "); ok {
				tryLine <- s
			}
		}
	}()
	out := func() string { mu.Lock(); defer mu.Unlock(); return output.String() }
	var try string
	select {
	case try = <-tryLine:
	case err := <-exited:
		t.Fatalf("the demo exited (%v) before it printed a line to try:\n%s", err, out())
	case <-time.After(8 * time.Minute):
		t.Fatalf("the demo printed no line to try within 8 minutes:\n%s", out())
	}
	t.Logf("./build.sh istio's demo ready after %v", time.Since(start).Round(100*time.Millisecond))
	if try != lines[0].Line {
		t.Errorf("the demo says to try %q, the README's first line is %q", try, lines[0].Line)
	}
	for _, c := range lines {
		a := c.Send(t, "")
		if a.Status != 200 || a.Body != c.Body+"\n" {
			t.Errorf("%s: %d %q, the README says %q", c.Line, a.Status, a.Body, c.Body)
		}
		if c.Decision != "" && a.Decision != c.Decision {
			t.Errorf("%s: X-Hashlb-Decision %q, the README says %q", c.Line, a.Decision, c.Decision)
		}
	}
	syscall.Kill(-pgid, syscall.SIGINT)
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Errorf("after Ctrl-C the demo exited with %v, want status 130", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the demo still runs 2 minutes after Ctrl-C:\n%s", out())
	}
	if !strings.Contains(out(), "istio: demo stopped") {
		t.Errorf("the demo did not say it stopped:\n%s", out())
	}
	addrs := append([]string{"127.0.0.1:10000", "127.0.0.1:18081", "127.0.0.1:18082", "127.0.0.1:18083"}, istioenv.IstiodAddrs...)
	for _, a := range addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Errorf("after Ctrl-C %s still accepts connections", a)
		}
	}
	if t.Failed() {
		t.Logf("the demo printed:\n%s", out())
	}
}
