package nsconf

import (
	"fmt"
	"strings"
)

// tlsSnippet is the upstream TLS context an Envoy cluster needs to reach
// servers that expect TLS (Envoy's UpstreamTlsContext, transport socket
// envoy.transport_sockets.tls); Istio's equivalent is a DestinationRule with
// trafficPolicy.tls.mode SIMPLE.
const tlsSnippet = `transport_socket: {name: envoy.transport_sockets.tls, typed_config: {"@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext, sni: <the servers' name>}}`

// backendTLS warns, once per vserver, when its services expect TLS: an
// SSL (or SSL_TCP) service is one NetScaler re-encrypts to, an SSL_BRIDGE
// one it passes the client's TLS to unopened. hashlb writes ip:port only, so
// without a word an Envoy cluster built from it would send cleartext.
func (t *translator) backendTLS(v *vserver, members []member, warnAt func(int, string, ...any)) {
	var ssl, bridge []string
	for _, mb := range members {
		switch typ := strings.ToUpper(mb.b.serviceType()); typ {
		case "SSL", "SSL_TCP":
			ssl = append(ssl, mb.name)
		case "SSL_BRIDGE":
			bridge = append(bridge, mb.name)
		}
	}
	if len(ssl) > 0 {
		warnAt(v.e.Line, "services %s are of type SSL: NetScaler speaks TLS to them; the configuration names their ip:port only, so give the Envoy cluster "+
			"(and healthCheck's cluster) an upstream TLS context or it sends cleartext: %s (Istio: a DestinationRule with trafficPolicy.tls.mode SIMPLE)",
			strings.Join(ssl, ", "), tlsSnippet)
	}
	if len(bridge) > 0 {
		warnAt(v.e.Line, "services %s are of type SSL_BRIDGE: NetScaler passes the client's TLS to them unopened; hashlb's HTTP filter sees requests only "+
			"where Envoy terminates TLS, so either re-encrypt (%s) or pass TLS through by balancing connections: \"filterType\": \"network\" before tcp_proxy",
			strings.Join(bridge, ", "), fmt.Sprint(tlsSnippet))
	}
}

// target is the service or group a bind names.
func (b *binding) target() string {
	if b.svc != nil {
		return b.svc.name
	}
	return b.grp.name
}

// serviceType is the NetScaler type of the bound service or group.
func (b *binding) serviceType() string {
	if b.svc != nil {
		return b.svc.typ
	}
	return b.grp.typ
}
