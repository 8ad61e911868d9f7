package e2e

// The Istio bundles besides configs/istio/ itself: ambient/ and tcp/.
//
// configs/istio/ambient/ against istio.io/api: the TrafficExtension that
// runs hashlb on an ambient waypoint and the ServiceEntry it steers, read
// with strict protojson (loadIstio), checked against each other and against
// what a waypoint does with them (istio/istio at 86c9f01, docs/deploy.md
// "Ambient mode"): the plugin is attached to the ServiceEntry by targetRefs
// (a waypoint ignores selector), has no match a waypoint's inbound chains
// never satisfy, and hands its choice over as filter state to the
// ORIGINAL_DST cluster Istio builds for a resolution NONE ServiceEntry,
// which ztunnel sends to the waypoint (istio.io/use-waypoint, an address).
// hashlb check's cross-checks (internal/deploycheck) must find nothing.
//
// configs/istio/tcp/ against istio.io/api: the NETWORK WasmPlugin and the
// ServiceEntry of the TCP service it steers, read with strict protojson
// (loadIstio), and checked against each other: a filterType network
// configuration, fail closed, on the client side and only on the
// service's TCP port, whose outbound cluster Istio makes ORIGINAL_DST
// (resolution NONE), the cluster that reads hashlb's filter state.

import (
	"errors"
	"fmt"
	"testing"

	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	typev1beta1 "istio.io/api/type/v1beta1"
)

// checkIstioAmbient checks the bundle of configs/istio/ambient/.
func checkIstioAmbient(b *istioBundle) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if b.te == nil || b.se == nil {
		return errors.New("configs/istio/ambient needs a TrafficExtension and a ServiceEntry")
	}
	te, se := b.te, b.se
	refs := te.GetTargetRefs()
	if te.GetSelector() != nil || len(refs) != 1 || refs[0].GetKind() != "ServiceEntry" || refs[0].GetGroup() != "networking.istio.io" ||
		refs[0].GetName() != b.seMeta.Name {
		bad("TrafficExtension targetRefs %v: want exactly the ServiceEntry %s (group networking.istio.io), and no selector (a waypoint ignores it)", refs, b.seMeta.Name)
	}
	for i, m := range te.GetMatch() {
		if m.GetMode() == typev1beta1.WorkloadMode_CLIENT || len(m.GetPorts()) > 0 {
			bad("TrafficExtension match[%d] %v: a waypoint's inbound HTTP chains never match mode CLIENT or a port list", i, m)
		}
	}
	if te.GetPhase() != extensionsv1alpha1.TrafficExtension_STATS {
		bad("TrafficExtension phase %s: want STATS (after the waypoint's authn/authz)", te.GetPhase())
	}
	if w := te.GetWasm(); w.GetType() != extensionsv1alpha1.PluginType_HTTP {
		bad("TrafficExtension wasm.type %s: a waypoint runs extensions in its HTTP chains only", w.GetType())
	}
	if cfg := checkPlugin(b, "leaves requests unbalanced", bad); cfg != nil && (!cfg.ViaFilterState() || cfg.Network()) {
		bad("TrafficExtension wasm.pluginConfig: want an HTTP filter with upstreamVia filterState (the waypoint's ORIGINAL_DST cluster reads no header)")
	}
	if se.GetResolution() != networkingv1alpha3.ServiceEntry_NONE || len(se.GetEndpoints()) > 0 {
		bad("ServiceEntry resolution %s with %d endpoints: want NONE and none (an ORIGINAL_DST cluster on the waypoint; hashlb's services are the backends)", se.GetResolution(), len(se.GetEndpoints()))
	}
	if len(se.GetAddresses()) == 0 {
		bad("ServiceEntry addresses: want the VIP the clients call (Istio allocates none for resolution NONE)")
	}
	if b.seMeta.Labels["istio.io/use-waypoint"] == "" {
		bad("ServiceEntry labels %v: want istio.io/use-waypoint, or ztunnel sends its traffic to no waypoint", b.seMeta.Labels)
	}
	for _, p := range se.GetPorts() {
		if p.GetProtocol() != "HTTP" || p.GetTargetPort() != 0 {
			bad("ServiceEntry port %v: want protocol HTTP and no targetPort", p)
		}
	}
	return errors.Join(errs...)
}

func TestIstioAmbientManifests(t *testing.T) {
	if err := checkIstioBundle(readIstioFiles(t, "ambient"), checkIstioAmbient); err != nil {
		t.Fatal(err)
	}
}

// TestIstioAmbientBrokenCopies: each deliberately broken copy fails, and
// those that hashlb check refuses say so with its message (the ones that
// name a waypoint).
func TestIstioAmbientBrokenCopies(t *testing.T) {
	tests := []struct {
		name, file, old, new string
		want                 []string
	}{
		{"header instead of filter state", "trafficextension.yaml", "upstreamVia: filterState", "upstreamVia: header",
			[]string{"upstreamVia header on a waypoint", "want an HTTP filter with upstreamVia filterState"}},
		{"client mode", "trafficextension.yaml", "  wasm:\n", "  match:\n  - mode: CLIENT\n  wasm:\n",
			[]string{"match mode CLIENT on a waypoint", "never match mode CLIENT"}},
		{"port match", "trafficextension.yaml", "  wasm:\n", "  match:\n  - mode: SERVER\n    ports:\n    - number: 8080\n  wasm:\n",
			[]string{"match ports on a waypoint"}},
		{"network plugin", "trafficextension.yaml", "type: HTTP", "type: NETWORK",
			[]string{"type NETWORK with filterType http"}},
		{"selector instead of targetRefs", "trafficextension.yaml", "  targetRefs:\n  - group: networking.istio.io\n    kind: ServiceEntry\n    name: hashlb-ambient\n",
			"  selector:\n    matchLabels:\n      app: frontend\n", []string{"want exactly the ServiceEntry hashlb-ambient"}},
		{"fail open", "trafficextension.yaml", "failStrategy: FAIL_CLOSE", "failStrategy: FAIL_OPEN",
			[]string{"failStrategy FAIL_OPEN: must be FAIL_CLOSE"}},
		{"no waypoint label", "serviceentry.yaml", "    istio.io/use-waypoint: waypoint\n", "    app: backends\n",
			[]string{"no istio.io/use-waypoint label", "want istio.io/use-waypoint"}},
		{"static resolution", "serviceentry.yaml", "resolution: NONE", "resolution: STATIC",
			[]string{"resolution STATIC: a waypoint's cluster for it is not ORIGINAL_DST"}},
		{"no address", "serviceentry.yaml", "  addresses:\n  - 240.240.0.20\n", "",
			[]string{"no addresses: Istio allocates none"}},
		{"TCP port", "serviceentry.yaml", "protocol: HTTP", "protocol: TCP",
			[]string{`protocol "TCP": TrafficExtension demo/hashlb-ambient runs in the waypoint's HTTP chains only`}},
		{"target port", "serviceentry.yaml", "protocol: HTTP", "protocol: HTTP\n    targetPort: 9090",
			[]string{"targetPort 9090: Istio makes it the ORIGINAL_DST cluster's upstream_port_override"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := readIstioFiles(t, "ambient")
			files[tt.file] = []byte(mustReplace(t, string(files[tt.file]), tt.old, tt.new))
			wantErr(t, checkIstioBundle(files, checkIstioAmbient), tt.want...)
		})
	}
}

// checkIstioTCP checks the bundle of configs/istio/tcp/.
func checkIstioTCP(b *istioBundle) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if b.wasm == nil || b.se == nil {
		return errors.New("configs/istio/tcp needs a WasmPlugin and a ServiceEntry")
	}
	w, se := b.wasm, b.se
	if w.GetType() != extensionsv1alpha1.PluginType_NETWORK {
		bad("%s type %s: a filterType network configuration needs type NETWORK", b.kind, w.GetType())
	}
	if cfg := checkPlugin(b, "lets connections through unsteered", bad); cfg != nil && !cfg.Network() {
		bad("%s pluginConfig: filterType %s, want network", b.kind, cfg.FilterType)
	}
	var tcpPorts []uint32
	for _, p := range se.GetPorts() {
		if p.GetProtocol() == "TCP" {
			tcpPorts = append(tcpPorts, p.GetNumber())
		}
	}
	if len(tcpPorts) != 1 {
		bad("ServiceEntry %v: want exactly one TCP port", se.GetPorts())
	}
	if se.GetResolution() != networkingv1alpha3.ServiceEntry_NONE {
		bad("ServiceEntry resolution %s: want NONE, whose outbound cluster is ORIGINAL_DST (the one that reads hashlb's filter state)", se.GetResolution())
	}
	if len(se.GetEndpoints()) > 0 {
		bad("ServiceEntry endpoints: hashlb's services are the endpoints; with resolution NONE Istio ignores these")
	}
	match := w.GetMatch()
	if len(match) != 1 || match[0].GetMode() != typev1beta1.WorkloadMode_CLIENT || len(match[0].GetPorts()) != 1 ||
		len(tcpPorts) == 1 && match[0].GetPorts()[0].GetNumber() != tcpPorts[0] {
		bad("%s match %v: want mode CLIENT and exactly the ServiceEntry's TCP port %v (Istio's PassthroughCluster is ORIGINAL_DST too: on other ports hashlb would steer unrelated connections)", b.kind,
			match, tcpPorts)
	}
	return errors.Join(errs...)
}

func TestIstioTCPManifests(t *testing.T) {
	if err := checkIstioBundle(readIstioFiles(t, "tcp"), checkIstioTCP); err != nil {
		t.Fatal(err)
	}
	// trafficextension/tcp/ applied instead of tcp/wasmplugin.yaml.
	if err := checkIstioBundle(readTrafficExtension(t, readIstioFiles(t, "tcp"), "trafficextension/tcp/trafficextension.yaml"), checkIstioTCP); err != nil {
		t.Fatal(err)
	}
}

// TestIstioTCPBrokenCopies: each deliberately broken manifest fails with a
// message naming the problem, for the WasmPlugin and for its
// TrafficExtension twin (teOld where its indentation differs).
func TestIstioTCPBrokenCopies(t *testing.T) {
	tests := []struct {
		name, file, old, new string
		teOld                string
		want                 []string
	}{
		{"http plugin", "wasmplugin.yaml", "type: NETWORK", "type: HTTP", "", []string{"needs type NETWORK"}},
		{"http configuration", "wasmplugin.yaml", "    filterType: network\n", "", "      filterType: network\n", []string{"filterType http, want network"}},
		{"http-only key", "wasmplugin.yaml", "- ${client.ip}", "- ${request.header.x-user}", "", []string{"reads request.header.x-user"}},
		{"fail open", "wasmplugin.yaml", "failStrategy: FAIL_CLOSE", "failStrategy: FAIL_OPEN", "", []string{"must be FAIL_CLOSE"}},
		{"every port", "wasmplugin.yaml", "    ports:\n    - number: 5432\n", "", "", []string{"exactly the ServiceEntry's TCP port"}},
		{"other port", "wasmplugin.yaml", "- number: 5432", "- number: 5433", "", []string{"exactly the ServiceEntry's TCP port"}},
		{"static resolution", "serviceentry.yaml", "resolution: NONE", "resolution: STATIC", "", []string{"want NONE"}},
	}
	for _, tt := range tests {
		for _, kind := range []string{"WasmPlugin", "TrafficExtension"} {
			t.Run(tt.name+"/"+kind, func(t *testing.T) {
				files, file, old := readIstioFiles(t, "tcp"), tt.file, tt.old
				if kind == "TrafficExtension" {
					files = readTrafficExtension(t, files, "trafficextension/tcp/trafficextension.yaml")
					if file == "wasmplugin.yaml" {
						file, old = "trafficextension.yaml", orDefault(tt.teOld, old)
					}
				}
				files[file] = []byte(mustReplace(t, string(files[file]), old, tt.new))
				wantErr(t, checkIstioBundle(files, checkIstioTCP), tt.want...)
			})
		}
	}
}
