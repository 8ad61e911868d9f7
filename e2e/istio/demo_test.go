package istio

import (
	"os/exec"
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
	cmd := exec.Command(env.Demo, "-wasm", env.Module, "-proxy", env.Proxy, "-envoy", r.WasmEnvoy)
	cmd.Dir = env.RepoRoot
	envoyrun.RunDemo(t, envoyrun.DemoScript{
		Name: "./build.sh istio's demo", Cmd: cmd, Ready: 8 * time.Minute, Stop: 2 * time.Minute,
		Stopped: "istio: demo stopped",
		Addrs:   append([]string{"127.0.0.1:10000", "127.0.0.1:18081", "127.0.0.1:18082", "127.0.0.1:18083"}, istioenv.IstiodAddrs...),
	})
}
