package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashlb/hashlb/e2e/istio/internal/istioenv"
	"github.com/hashlb/hashlb/internal/bincache"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// The demo's addresses: the README's (./build.sh run's) listener and
// backends.
const (
	listenPort = 10000
	tryLine    = "try: curl -si http://127.0.0.1:10000/some/path"
)

var backendAddrs = []string{"127.0.0.1:18081", "127.0.0.1:18082", "127.0.0.1:18083"}

func main() {
	wasm := flag.String("wasm", "dist/hashlb.wasm", "the module (./build.sh wasm), relative to the repository root")
	proxy := flag.String("proxy", "dist/hashlb-proxy", "hashlb-proxy, which runs the demo backends (-backends-only), relative to the repository root")
	envoy := flag.String("envoy", "", "the gateway's Envoy (default: 1.39.3, Istio 1.31's, where ./build.sh installs it)")
	flag.Parse()
	d := &demo{}
	err := d.run(*wasm, *proxy, *envoy)
	d.stop()
	switch {
	case errors.Is(err, errInterrupted):
		fmt.Println("istio: demo stopped")
		os.Exit(130)
	case err != nil:
		fmt.Fprintf(os.Stderr, "istio: %v\n", err)
		os.Exit(1)
	}
}

var errInterrupted = errors.New("interrupted")

// demo is what the demo started, to stop in reverse order.
type demo struct {
	stops []func()
}

func (d *demo) onStop(f func()) { d.stops = append(d.stops, f) }

func (d *demo) stop() {
	for i := len(d.stops) - 1; i >= 0; i-- {
		d.stops[i]()
	}
}

func say(format string, args ...any) { fmt.Printf("istio: "+format+"\n", args...) }

func (d *demo) run(wasm, proxy, envoy string) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	root, err := envoyrun.RepoRoot()
	if err != nil {
		return err
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(root, p)
	}
	wasm, proxy = abs(wasm), abs(proxy)
	for _, f := range []string{wasm, proxy} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%v (./build.sh istio builds it)", err)
		}
	}
	addrs := append([]string{fmt.Sprintf("127.0.0.1:%d", listenPort)}, backendAddrs...)
	for _, a := range append(addrs, istioenv.IstiodAddrs...) {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			return fmt.Errorf("%s is in use (is ./build.sh run, ./build.sh envoy or another demo still running?)", a)
		}
	}

	start := time.Now()
	say("kube-apiserver and etcd (the controller tests' build, cached in ~/.cache/hashlb/envtest)")
	kube, err := bincache.KubeAPIServer(istioenv.EnvtestWrapper(root))
	if err != nil {
		return err
	}
	etcd, err := bincache.Etcd(istioenv.EnvtestWrapper(root))
	if err != nil {
		return err
	}
	rel := istioenv.Releases[len(istioenv.Releases)-1]
	say("istiod %s (pilot-discovery, built from istio.io/istio on the first run and cached in ~/.cache/hashlb/istio)", rel.Name)
	r, err := istioenv.Prepare(root, rel, os.Stdout)
	if err != nil {
		return err
	}
	if envoy == "" {
		envoy = r.WasmEnvoy
	}
	dir, err := os.MkdirTemp("", "hashlb-istio-demo-")
	if err != nil {
		return err
	}
	d.onStop(func() { os.RemoveAll(dir) })

	say("the demo backends (hashlb-proxy -backends-only) on %s", strings.Join(backendAddrs, ", "))
	backends, err := startBackends(root, proxy, wasm)
	if err != nil {
		return err
	}
	d.onStop(backends.stop)

	say("kube-apiserver with Istio %s's CRDs, and istiod on 127.0.0.1", r.Name)
	cl, err := istioenv.StartCluster(istioenv.Options{
		Release: r, KubeAPIServer: kube, Etcd: etcd, Dir: dir,
		Namespaces: []string{"istio-system", "demo"}, Logf: say,
	})
	if err != nil {
		return err
	}
	d.onStop(func() { cl.Stop() })

	pc, err := demoPluginConfig(root)
	if err != nil {
		return err
	}
	ms, err := demoManifests(root, pc, wasm, listenPort)
	if err != nil {
		return err
	}
	for _, m := range ms {
		say("kubectl apply -f configs/istio/%s", m.name)
		if err := cl.Apply(m.name, m.data); err != nil {
			return err
		}
	}

	say("the ingress gateway: %s connected to istiod as router~127.0.0.1~istio-ingressgateway-0.istio-system", envoy)
	gw, err := envoyrun.Launch(envoyrun.Binary{Path: envoy, Version: envoy}, envoyrun.Options{
		Bootstrap: istioenv.Bootstrap("router", "istio-ingressgateway-0", "istio-system", istioenv.GatewayLabels),
		Dir:       dir, Concurrency: 2, ReadyTimeout: 5 * time.Minute,
	})
	if err != nil {
		return err
	}
	d.onStop(gw.Stop)
	if err := waitServing(sig, 3*time.Minute); err != nil {
		return fmt.Errorf("%v\nthe gateway's log (tail):\n%s\nistiod's log (tail):\n%s", err, gw.LogTail(20), cl.Istiod.Tail(20))
	}
	say("ready in %s: Istio %s's istiod and its ingress gateway (Envoy, admin %s) serve the demo on 127.0.0.1:%d; Ctrl-C stops everything",
		time.Since(start).Round(time.Second), r.Name, gw.Admin, listenPort)
	fmt.Println(tryLine)

	select {
	case <-sig:
		return errInterrupted
	case <-gw.Exited():
		return fmt.Errorf("the gateway's Envoy exited; its log (tail):\n%s", gw.LogTail(20))
	case <-cl.Istiod.Exited():
		return fmt.Errorf("istiod exited; its log (tail):\n%s", cl.Istiod.Tail(20))
	case <-backends.done:
		return errors.New("the demo backends exited")
	}
}

// waitServing waits until the gateway answers the README's first request
// through hashlb (200 with x-hashlb-decision): istiod pushes the listener,
// the route, the cluster and the plugin's ECDS resource one after another.
func waitServing(sig <-chan os.Signal, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	url := fmt.Sprintf("http://127.0.0.1:%d/some/path", listenPort)
	var last string
	for {
		resp, err := http.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && resp.Header.Get("X-Hashlb-Decision") != "" {
				return nil
			}
			last = fmt.Sprintf("%d, x-hashlb-decision %q", resp.StatusCode, resp.Header.Get("X-Hashlb-Decision"))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateway does not serve the demo through hashlb after %v (last: %s)", timeout, last)
		}
		select {
		case <-sig:
			return errInterrupted
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// backends is hashlb-proxy -backends-only running.
type backends struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startBackends starts the demo backends of configs/demo.json, as
// docs/deploy.md tells a user to, and waits until they are up.
func startBackends(root, proxy, wasm string) (*backends, error) {
	cmd := exec.Command(proxy, "-backends-only", "-wasm", wasm, "-config", filepath.Join(root, "configs", "demo.json"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b := &backends{cmd: cmd, done: make(chan struct{})}
	up := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "demo backends of") {
				up <- true
			}
		}
		close(up)
	}()
	go func() { cmd.Wait(); close(b.done) }()
	select {
	case ok := <-up:
		if ok {
			return b, nil
		}
		<-b.done
		return nil, errors.New("hashlb-proxy -backends-only exited before its backends were up")
	case <-time.After(time.Minute):
		b.stop()
		return nil, errors.New("hashlb-proxy -backends-only: backends not up within a minute")
	}
}

func (b *backends) stop() { istioenv.StopGroup(b.cmd.Process.Pid, b.done, 10*time.Second) }
