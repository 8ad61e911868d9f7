package e2e

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

// readIstioTCPDir returns configs/istio/tcp/*.yaml by base name.
func readIstioTCPDir(t testing.TB) map[string][]byte {
	return readIstioFiles(t, "tcp")
}

func checkIstioTCPFiles(files map[string][]byte) error {
	return checkIstioBundle(files, checkIstioTCP)
}

func TestIstioTCPManifests(t *testing.T) {
	if err := checkIstioTCPFiles(readIstioTCPDir(t)); err != nil {
		t.Fatal(err)
	}
	// trafficextension/tcp/ applied instead of tcp/wasmplugin.yaml.
	if err := checkIstioTCPFiles(readTrafficExtension(t, readIstioTCPDir(t), "trafficextension/tcp/trafficextension.yaml")); err != nil {
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
				files, file, old := readIstioTCPDir(t), tt.file, tt.old
				if kind == "TrafficExtension" {
					files = readTrafficExtension(t, files, "trafficextension/tcp/trafficextension.yaml")
					if file == "wasmplugin.yaml" {
						file, old = "trafficextension.yaml", orDefault(tt.teOld, old)
					}
				}
				files[file] = []byte(mustReplace(t, string(files[file]), old, tt.new))
				wantErr(t, checkIstioTCPFiles(files), tt.want...)
			})
		}
	}
}
