package istioenv

import (
	"fmt"
	"slices"
	"strings"
)

// GatewayLabels are the labels of Istio's default ingress gateway, which
// configs/istio/gateway/'s files select.
var GatewayLabels = map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}

// Bootstrap is what pilot-agent would give Envoy, reduced to what upstream
// Envoy needs: the node, of kind "sidecar" or "router" (a gateway), as
// NAME.NS with the workload's labels in its metadata (no Pod object is
// needed for selectors to match) and INTERCEPTION_MODE NONE, the mode of a
// sidecar without iptables, whose outbound listeners istiod binds on
// 127.0.0.1; and ADS over plaintext gRPC to istiod (XDSAddr). Admin is on a
// free port of 127.0.0.1.
func Bootstrap(kind, pod, ns string, labels map[string]string) []byte {
	var ls []string
	for k, v := range labels {
		ls = append(ls, fmt.Sprintf("%s: %q", k, v))
	}
	slices.Sort(ls)
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
