package istio

import (
	"fmt"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/hashlb/hashlb/e2e/istio/internal/istioenv"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// sidecar is an upstream Envoy connected to istiod as the sidecar of a
// client workload: node sidecar~IP~POD.NS~NS.svc.cluster.local with the
// workload's labels in its metadata (no Pod object is needed for selectors
// to match) and INTERCEPTION_MODE NONE, the mode of a sidecar without
// iptables, whose outbound listeners istiod binds on 127.0.0.1
// (istioenv.Bootstrap); or, started by startGateway, as a gateway
// (router~…), whose listeners are the Gateways' servers.
type sidecar struct {
	*envoyrun.Envoy
}

// startSidecar starts the Envoy of r's Wasm tests as a sidecar of pod in namespace demo
// with labels (and envVars, "NAME=value", in its environment), and waits until Envoy is ready (its first listeners and
// their ECDS filters received and warm).
func startSidecar(t *testing.T, r releaseSetup, pod string, labels map[string]string, envVars ...string) *sidecar {
	t.Helper()
	return startSidecarOf(t, r, r.WasmEnvoy, pod, labels, envVars...)
}

// startSidecarOf is startSidecar with the envoy binary envoy.
func startSidecarOf(t *testing.T, r releaseSetup, envoy, pod string, labels map[string]string, envVars ...string) *sidecar {
	t.Helper()
	return startProxy(t, r, envoy, "sidecar", pod, "demo", labels, envVars...)
}

// startGateway starts the Envoy of r's Wasm tests as the ingress gateway
// istio-ingressgateway-0 in namespace istio-system, and waits until Envoy
// is ready.
func startGateway(t *testing.T, r releaseSetup) *sidecar {
	t.Helper()
	return startProxy(t, r, r.WasmEnvoy, "router", "istio-ingressgateway-0", "istio-system", istioenv.GatewayLabels)
}

// startProxy starts envoy connected to istiod as a proxy of kind ("sidecar"
// or "router") of pod in namespace ns with labels (and envVars,
// "NAME=value", in its environment), and waits until Envoy is ready (its
// first listeners and their ECDS filters received and warm).
func startProxy(t *testing.T, r releaseSetup, envoy, kind, pod, ns string, labels map[string]string, envVars ...string) *sidecar {
	t.Helper()
	bin := envoyrun.Binary{Path: envoy, Version: envoy}
	start := time.Now()
	e := envoyrun.Start(t, bin, envoyrun.Options{
		Bootstrap: istioenv.Bootstrap(kind, pod, ns, labels), Dir: t.TempDir(), Concurrency: 2,
		ReadyTimeout: 5 * time.Minute, Env: envVars,
	})
	t.Logf("Envoy %s connected to istiod %s as a %s and ready in %s", envoy, r.Name, kind, time.Since(start).Round(100*time.Millisecond))
	return &sidecar{e}
}

func (s *sidecar) configDump() (gjson.Result, error) {
	body, code, err := s.Get("/config_dump?include_eds")
	if err != nil {
		return gjson.Result{}, err
	}
	if code != 200 {
		return gjson.Result{}, fmt.Errorf("/config_dump: %d %s", code, body)
	}
	return gjson.Parse(body), nil
}

// applyShipped applies the files of configs/istio/ named, in order, as the
// tests apply them (shipped), and returns each one's content by name.
func applyShipped(t *testing.T, cl *cluster, names []string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, f := range names {
		files[f] = shipped(t, f)
		if err := cl.Apply(f, files[f]); err != nil {
			t.Fatal(err)
		}
	}
	return files
}
