package istio

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/hashlb/hashlb/internal/envoyrun"
)

// sidecar is an upstream Envoy connected to istiod as the sidecar of a
// client workload: node sidecar~IP~POD.NS~NS.svc.cluster.local with the
// workload's labels in its metadata (no Pod object is needed for selectors
// to match) and INTERCEPTION_MODE NONE, the mode of a sidecar without
// iptables, whose outbound listeners istiod binds on 127.0.0.1; or, started
// by startGateway, as a gateway (router~…), whose listeners are the
// Gateways' servers.
type sidecar struct {
	*envoyrun.Envoy
}

// bootstrap is what pilot-agent would give Envoy, reduced to what upstream
// Envoy needs: the node (kind "sidecar" or "router") and ADS over plaintext
// gRPC to istiod.
func bootstrap(kind, pod, ns string, labels map[string]string) []byte {
	var ls []string
	for k, v := range labels {
		ls = append(ls, fmt.Sprintf("%s: %q", k, v))
	}
	return []byte(fmt.Sprintf(`node:
  id: %[4]s~127.0.0.1~%[1]s.%[2]s~%[2]s.svc.cluster.local
  cluster: %[1]s.%[2]s
  metadata:
    NAME: %[1]s
    NAMESPACE: %[2]s
    LABELS: {%[3]s}
    INTERCEPTION_MODE: NONE
    CLUSTER_ID: Kubernetes
    MESH_ID: cluster.local
dynamic_resources:
  ads_config:
    api_type: GRPC
    transport_api_version: V3
    grpc_services:
    - envoy_grpc: {cluster_name: xds-grpc}
  cds_config: {ads: {}, resource_api_version: V3}
  lds_config: {ads: {}, resource_api_version: V3}
static_resources:
  clusters:
  - name: xds-grpc
    type: STATIC
    connect_timeout: 5s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: xds-grpc
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 15010}}}
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: 0}}
`, pod, ns, strings.Join(ls, ", "), kind))
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

// gatewayLabels are the labels of Istio's default ingress gateway, which
// configs/istio/gateway/'s files select.
var gatewayLabels = map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}

// startGateway starts the Envoy of r's Wasm tests as the ingress gateway
// istio-ingressgateway-0 in namespace istio-system, and waits until Envoy
// is ready.
func startGateway(t *testing.T, r releaseSetup) *sidecar {
	t.Helper()
	return startProxy(t, r, r.WasmEnvoy, "router", "istio-ingressgateway-0", "istio-system", gatewayLabels)
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
		Bootstrap: bootstrap(kind, pod, ns, labels), Dir: t.TempDir(), Concurrency: 2,
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
		if err := cl.apply(f, files[f]); err != nil {
			t.Fatal(err)
		}
	}
	return files
}
