package e2e

// configs/istio/ against istio.io/api: each manifest's spec is read with
// strict protojson into the Istio type of its kind, the WasmPlugin's
// pluginConfig passes lbcore.ParseConfig, the repository's own rules hold
// (FAIL_CLOSE, client side, a STATIC ServiceEntry, a MERGE patch that is a
// valid Envoy Cluster), and hashlb check's cross-checks
// (internal/deploycheck) find nothing: the EnvoyFilter's override_host reads
// the plugin's upstreamHeader on the ServiceEntry's cluster, whose endpoints
// are the plugin's services, on the same workloads; retries stay within the
// ranking; the fleet cluster is a ServiceEntry's.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/hashlb/hashlb/lbcore"
)

// istioBundle is the parsed content of configs/istio/.
type istioBundle struct {
	// wasm is the plugin: the WasmPlugin, or the one a TrafficExtension
	// carries (wasmPluginOf), so that both kinds get the same checks.
	wasm   *extensionsv1alpha1.WasmPlugin
	te     *extensionsv1alpha1.TrafficExtension // the TrafficExtension as read, when the plugin is one
	kind   string                               // the plugin's kind, for messages
	ef     *networkingv1alpha3.EnvoyFilter
	se     *networkingv1alpha3.ServiceEntry
	etcd   *networkingv1alpha3.ServiceEntry // named hashlb-etcd: persistence.fleet's etcd
	seMeta objectMeta                       // se's name and labels
	dr     *networkingv1alpha3.DestinationRule
	vs     *networkingv1alpha3.VirtualService
}

// k8sObject is the envelope of a manifest; unknown envelope fields are refused.
type k8sObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

// objectMeta is what the checks read of a manifest's metadata.
type objectMeta struct {
	Name   string
	Labels map[string]string
}

// loadIstio parses every manifest of the given files (name → YAML).
func loadIstio(files map[string][]byte) (*istioBundle, error) {
	b := &istioBundle{}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(files)) {
		docs, err := yamlDocs(files[name])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		for _, doc := range docs {
			if err := b.add(doc); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	return b, errors.Join(errs...)
}

func (b *istioBundle) add(doc []byte) error {
	var o k8sObject
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	if o.Metadata.Name == "" || o.Metadata.Namespace == "" {
		return fmt.Errorf("%s: metadata.name and metadata.namespace are required", o.Kind)
	}
	group, version, _ := strings.Cut(o.APIVersion, "/")
	networking := group == "networking.istio.io" && (version == "v1" || version == "v1beta1" || version == "v1alpha3")
	var spec proto.Message
	switch {
	case o.Kind == "WasmPlugin" && o.APIVersion == "extensions.istio.io/v1alpha1" && b.wasm == nil:
		b.wasm = &extensionsv1alpha1.WasmPlugin{}
		b.kind = o.Kind
		spec = b.wasm
	case o.Kind == "TrafficExtension" && o.APIVersion == "extensions.istio.io/v1alpha1" && b.wasm == nil:
		b.te = &extensionsv1alpha1.TrafficExtension{}
		b.kind = o.Kind
		if err := strictUnmarshal(o.Spec, b.te); err != nil {
			return fmt.Errorf("%s %s spec: %w", o.Kind, o.Metadata.Name, err)
		}
		w, err := wasmPluginOf(b.te)
		if err != nil {
			return fmt.Errorf("%s %s: %w", o.Kind, o.Metadata.Name, err)
		}
		b.wasm = w
		return nil
	case o.Kind == "EnvoyFilter" && o.APIVersion == "networking.istio.io/v1alpha3" && b.ef == nil:
		b.ef = &networkingv1alpha3.EnvoyFilter{}
		spec = b.ef
	case o.Kind == "ServiceEntry" && networking && o.Metadata.Name == "hashlb-etcd" && b.etcd == nil:
		b.etcd = &networkingv1alpha3.ServiceEntry{}
		spec = b.etcd
	case o.Kind == "ServiceEntry" && networking && o.Metadata.Name != "hashlb-etcd" && b.se == nil:
		b.se = &networkingv1alpha3.ServiceEntry{}
		b.seMeta = objectMeta{o.Metadata.Name, o.Metadata.Labels}
		spec = b.se
	case o.Kind == "DestinationRule" && networking && b.dr == nil:
		b.dr = &networkingv1alpha3.DestinationRule{}
		spec = b.dr
	case o.Kind == "VirtualService" && networking && b.vs == nil:
		b.vs = &networkingv1alpha3.VirtualService{}
		spec = b.vs
	default:
		return fmt.Errorf("%s %s %s: not an expected kind/apiVersion, or a second one", o.APIVersion, o.Kind, o.Metadata.Name)
	}
	if err := strictUnmarshal(o.Spec, spec); err != nil {
		return fmt.Errorf("%s %s spec: %w", o.Kind, o.Metadata.Name, err)
	}
	return nil
}

// wasmPluginOf returns the WasmPlugin whose fields a TrafficExtension's
// are: selector, targetRefs, phase, priority and match from its spec, the
// Wasm fields from spec.wasm. It is Istio's own translation of a WasmPlugin
// into a TrafficExtension (istio/istio
// pilot/pkg/config/kube/extensions/translate.go at 86c9f01,
// translateWasmPlugin), read backwards: the two enums of phase share their
// numbers. It refuses what the TrafficExtension CRD's rules refuse
// (istio.io/api v1.32.0 extensions/v1alpha1/traffic_extension.proto:
// exactly one of wasm and lua; at most one of selector and targetRefs).
func wasmPluginOf(te *extensionsv1alpha1.TrafficExtension) (*extensionsv1alpha1.WasmPlugin, error) {
	w := te.GetWasm()
	switch {
	case w == nil:
		return nil, errors.New("spec.wasm: missing (hashlb is a Wasm module; a TrafficExtension takes exactly one of wasm and lua)")
	case te.GetSelector() != nil && len(te.GetTargetRefs()) > 0:
		return nil, errors.New("only one of targetRefs or selector can be set")
	}
	wp := &extensionsv1alpha1.WasmPlugin{
		Selector:        te.GetSelector(),
		TargetRefs:      te.GetTargetRefs(),
		Phase:           extensionsv1alpha1.PluginPhase(te.GetPhase()),
		Priority:        te.GetPriority(),
		Url:             w.GetUrl(),
		Sha256:          w.GetSha256(),
		ImagePullPolicy: w.GetImagePullPolicy(),
		ImagePullSecret: w.GetImagePullSecret(),
		PluginConfig:    w.GetPluginConfig(),
		PluginName:      w.GetPluginName(),
		FailStrategy:    w.GetFailStrategy(),
		VmConfig:        w.GetVmConfig(),
		Type:            w.GetType(),
	}
	for _, m := range te.GetMatch() {
		wp.Match = append(wp.Match, &extensionsv1alpha1.WasmPlugin_TrafficSelector{Mode: m.GetMode(), Ports: m.GetPorts()})
	}
	return wp, nil
}

var sha256Hex = regexp.MustCompile(`^[a-f0-9]{64}$`) // the WasmPlugin CRD's pattern for sha256

// checkPlugin checks what every hashlb plugin of configs/istio needs,
// whatever it steers (b.wasm, a WasmPlugin or the one a TrafficExtension
// carries): a URL Istio can fetch, a well-formed sha256 when one is given,
// FAIL_CLOSE (bypassed says what a bypassed hashlb does), and a pluginConfig
// lbcore accepts, which it returns (nil when it has none).
func checkPlugin(b *istioBundle, bypassed string, bad func(string, ...any)) *lbcore.Config {
	w := b.wasm
	if u, err := url.Parse(w.GetUrl()); err != nil || !slices.Contains([]string{"oci", "file", "http", "https"}, u.Scheme) {
		bad("%s url %q: want an oci://, file:// or http(s):// URL", b.kind, w.GetUrl())
	}
	if s := w.GetSha256(); s != "" && !sha256Hex.MatchString(s) {
		bad("%s sha256 %q: want 64 lower-case hex digits", b.kind, s)
	}
	if w.GetFailStrategy() != extensionsv1alpha1.FailStrategy_FAIL_CLOSE {
		bad("%s failStrategy %s: must be FAIL_CLOSE (a bypassed hashlb %s)", b.kind, w.GetFailStrategy(), bypassed)
	}
	cfgJSON, err := protojson.Marshal(w.GetPluginConfig())
	if err == nil {
		var cfg *lbcore.Config
		if cfg, err = lbcore.ParseConfig(cfgJSON); err == nil {
			return cfg
		}
	}
	bad("%s pluginConfig: %v", b.kind, err)
	return nil
}

// checkIstio checks the bundle against hashlb and itself.
func checkIstio(b *istioBundle) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if b.wasm == nil || b.ef == nil || b.se == nil {
		bad("configs/istio needs a WasmPlugin, an EnvoyFilter and a ServiceEntry")
		return errors.Join(errs...)
	}
	w := b.wasm
	cfg := checkPlugin(b, "leaves requests unbalanced", bad)
	if w.GetType() != extensionsv1alpha1.PluginType_HTTP {
		bad("%s type %s: hashlb is an HTTP filter", b.kind, w.GetType())
	}
	if len(w.GetMatch()) == 0 || slices.ContainsFunc(w.GetMatch(), func(m *extensionsv1alpha1.WasmPlugin_TrafficSelector) bool {
		return m.GetMode() != typev1beta1.WorkloadMode_CLIENT
	}) {
		bad("%s match: want mode CLIENT only (hashlb steers outbound requests)", b.kind)
	}
	if cfg == nil {
		return errors.Join(errs...)
	}
	host, port, err := checkServiceEntry(b.se)
	if err != nil {
		errs = append(errs, err)
	}
	if p := cfg.Persistence; b.etcd != nil && (p == nil || p.Fleet == nil) {
		bad("ServiceEntry hashlb-etcd: the plugin has no persistence.fleet to use it")
	}
	if err := checkEnvoyFilter(b.ef, host, port); err != nil {
		errs = append(errs, err)
	}
	if b.dr != nil && b.dr.GetHost() != host {
		bad("DestinationRule host %q is not the ServiceEntry host %q", b.dr.GetHost(), host)
	}
	if b.vs != nil && !slices.Contains(b.vs.GetHosts(), host) {
		bad("VirtualService hosts %q do not include %q", b.vs.GetHosts(), host)
	}
	return errors.Join(errs...)
}

// checkServiceEntry checks the ServiceEntry's shape (one host and port, STATIC,
// IP endpoints) and returns its host and port.
func checkServiceEntry(se *networkingv1alpha3.ServiceEntry) (string, uint32, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("ServiceEntry: "+format, args...)) }
	if len(se.GetHosts()) != 1 || len(se.GetPorts()) != 1 {
		bad("want one host and one port, have %d and %d", len(se.GetHosts()), len(se.GetPorts()))
		return "", 0, errors.Join(errs...)
	}
	if se.GetResolution() != networkingv1alpha3.ServiceEntry_STATIC {
		bad("resolution %s: want STATIC, so the endpoints are the fixed service addresses", se.GetResolution())
	}
	p := se.GetPorts()[0]
	for _, e := range se.GetEndpoints() {
		if _, err := netip.ParseAddr(e.GetAddress()); err != nil {
			bad("endpoint %q is not an IP address", e.GetAddress())
		}
	}
	return se.GetHosts()[0], p.GetNumber(), errors.Join(errs...)
}

// checkEnvoyFilter checks the CLUSTER patch: it targets the ServiceEntry's
// outbound cluster and its value is a valid Envoy Cluster fragment with an
// override_host policy.
func checkEnvoyFilter(ef *networkingv1alpha3.EnvoyFilter, host string, port uint32) error {
	return checkClusterPatches(ef, host, port, overrideHostName, func(c *clusterv3.Cluster) (bool, error) {
		return overrideHost(c) != nil, nil
	})
}

// checkClusterPatches checks an EnvoyFilter's CLUSTER patches: each is a
// MERGE on the ServiceEntry's outbound cluster (host, port) in
// SIDECAR_OUTBOUND, its value a valid Envoy Cluster fragment in which has
// finds the load-balancing policy named policy (has's error says what is
// wrong with it); there is at least one.
func checkClusterPatches(ef *networkingv1alpha3.EnvoyFilter, host string, port uint32, policy string, has func(*clusterv3.Cluster) (bool, error)) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("EnvoyFilter: "+format, args...)) }
	found := false
	for i, cp := range ef.GetConfigPatches() {
		if cp.GetApplyTo() != networkingv1alpha3.EnvoyFilter_CLUSTER {
			continue
		}
		m := cp.GetMatch()
		if m.GetContext() != networkingv1alpha3.EnvoyFilter_SIDECAR_OUTBOUND {
			bad("configPatches[%d]: context %s, want SIDECAR_OUTBOUND (hashlb runs on the client side)", i, m.GetContext())
		}
		if c := m.GetCluster(); c.GetService() != host || c.GetPortNumber() != port {
			bad("configPatches[%d]: matches cluster %s:%d, not the ServiceEntry's %s:%d", i, c.GetService(), c.GetPortNumber(), host, port)
		}
		if cp.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_MERGE {
			bad("configPatches[%d]: operation %s, want MERGE (keep Istio's endpoints and TLS)", i, cp.GetPatch().GetOperation())
		}
		value, err := protojson.Marshal(cp.GetPatch().GetValue())
		if err != nil {
			bad("configPatches[%d]: %v", i, err)
			continue
		}
		c := &clusterv3.Cluster{}
		if err := strictUnmarshal(value, c); err != nil {
			bad("configPatches[%d].patch.value is not an Envoy Cluster: %v", i, err)
			continue
		}
		if err := validateAll(c.GetLoadBalancingPolicy()); err != nil {
			bad("configPatches[%d].patch.value.load_balancing_policy: %v", i, err)
		}
		c.Name = fmt.Sprintf("outbound|%d||%s", port, host)
		ok, err := has(c)
		if err != nil {
			bad("configPatches[%d]: %v", i, err)
			continue
		}
		if !ok {
			bad("configPatches[%d]: no %s policy", i, policy)
			continue
		}
		found = true
	}
	if !found && len(errs) == 0 {
		bad("no CLUSTER patch sets %s", policy)
	}
	return errors.Join(errs...)
}

// readIstioDir returns configs/istio/*.yaml by base name.
func readIstioDir(t testing.TB) map[string][]byte {
	return readIstioFiles(t, "")
}

// readIstioFiles returns the files of configs/istio/<sub> by base name
// (sub "" for configs/istio itself). Its folders are left out: tcp/ and
// ambient/ are bundles of their own, fleet/ and trafficextension/ hold
// files applied over a bundle (readIstioFleet, readTrafficExtension).
func readIstioFiles(t testing.TB, sub string) map[string][]byte {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "configs", "istio", sub)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = data
	}
	return files
}

// readTrafficExtension returns base with its WasmPlugin file (wasmplugin.yaml)
// replaced by the TrafficExtension twin at rel (a path under configs/istio/),
// applied instead of it.
func readTrafficExtension(t testing.TB, base map[string][]byte, rel string) map[string][]byte {
	t.Helper()
	if _, ok := base["wasmplugin.yaml"]; !ok {
		t.Fatal("no wasmplugin.yaml to replace")
	}
	delete(base, "wasmplugin.yaml")
	base["trafficextension.yaml"] = readRepoFile(t, "configs/istio/"+rel)
	return base
}

// readIstioFleet returns the fleet variant: configs/istio/*.yaml with
// fleet/wasmplugin.yaml in place of wasmplugin.yaml (the same resource, so
// applying fleet/ after configs/istio/ replaces it) and fleet/'s etcd
// ServiceEntry added.
func readIstioFleet(t testing.TB) map[string][]byte {
	t.Helper()
	files := readIstioDir(t)
	for _, name := range []string{"wasmplugin.yaml", "etcd-serviceentry.yaml"} {
		files[name] = readRepoFile(t, "configs/istio/fleet/"+name)
	}
	return files
}

func checkIstioFiles(files map[string][]byte) error {
	return checkIstioBundle(files, checkIstio)
}

// checkIstioBundle loads files (loadIstio) and runs check on the bundle
// and hashlb check's cross-checks on the files.
func checkIstioBundle(files map[string][]byte, check func(*istioBundle) error) error {
	b, err := loadIstio(files)
	if err != nil {
		return err
	}
	return errors.Join(check(b), crossCheck(files))
}

func TestIstioManifests(t *testing.T) {
	tests := []struct {
		name  string
		files map[string][]byte
		fleet bool
	}{
		{"configs/istio", readIstioDir(t), false},
		{"configs/istio with fleet/", readIstioFleet(t), true},
		{"configs/istio with trafficextension/", readTrafficExtension(t, readIstioDir(t), "trafficextension/trafficextension.yaml"), false},
		{"configs/istio with fleet/ and trafficextension/fleet/", readTrafficExtension(t, readIstioFleet(t), "trafficextension/fleet/trafficextension.yaml"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := loadIstio(tt.files)
			if err != nil {
				t.Fatal(err)
			}
			if b.dr == nil || b.vs == nil {
				t.Error("want a DestinationRule and a VirtualService too")
			}
			if err := errors.Join(checkIstio(b), crossCheck(tt.files)); err != nil {
				t.Fatal(err)
			}
			if got := b.wasm.GetPhase(); got != extensionsv1alpha1.PluginPhase_STATS {
				t.Errorf("WasmPlugin phase = %s, want STATS (after authn/authz, before the router)", got)
			}
			if got := b.etcd != nil; got != tt.fleet {
				t.Errorf("etcd ServiceEntry present = %v, want %v", got, tt.fleet)
			}
		})
	}
}

// TestIstioBrokenCopies: each deliberately broken manifest fails with a
// message naming the problem, for the WasmPlugin bundle and for its
// TrafficExtension twin alike (the plugin file's case applied to
// trafficextension/'s file: teOld and teNew where its indentation differs).
func TestIstioBrokenCopies(t *testing.T) {
	tests := []struct {
		name, file, old, new string
		teOld, teNew         string
		teOnly               bool // a rule of the TrafficExtension alone
		want                 []string
	}{
		{name: "wrong header name", file: "envoyfilter.yaml", old: "- header: x-envoy-original-dst-host", new: "- header: x-upstream",
			want: []string{"override_host reads header", "x-upstream"}},
		{name: "service missing from cluster", file: "serviceentry.yaml", old: "  - address: 10.10.0.13\n", new: "",
			want: []string{`services[2] "backend-3" 10.10.0.13:8080 is not an endpoint`}},
		{name: "bad plugin field", file: "wasmplugin.yaml", old: "upstreamCount: 3", new: "upstreamCount: 30",
			want: []string{"pluginConfig: upstreamCount: 30 is out of range [1, 8]"}},
		{name: "fleet: cluster not Istio's name", file: "wasmplugin.yaml", old: "cluster: outbound|2379||etcd.hashlb-system.svc.cluster.local", new: "cluster: etcd",
			want: []string{`persistence.fleet.cluster "etcd"`, `Istio names the etcd cluster "outbound|2379||etcd.hashlb-system.svc.cluster.local"`}},
		{name: "fleet: etcd port not HTTP", file: "etcd-serviceentry.yaml", old: "protocol: HTTP", new: "protocol: GRPC",
			want: []string{`ServiceEntry hashlb-etcd port protocol "GRPC": want HTTP`}},
		{name: "unknown plugin field", file: "wasmplugin.yaml", old: "upstreamCount: 3", new: "upstreamCount: 3\n    lbMthod: URLHASH",
			teNew: "upstreamCount: 3\n      lbMthod: URLHASH", want: []string{"lbMthod: unknown field"}},
		{name: "unknown spec field", file: "wasmplugin.yaml", old: "failStrategy: FAIL_CLOSE", new: "failStrategy: FAIL_CLOSE\n  failStrategyy: FAIL_CLOSE",
			teNew: "failStrategy: FAIL_CLOSE\n    failStrategyy: FAIL_CLOSE", want: []string{"WasmPlugin hashlb spec", "failStrategyy"}},
		{name: "fail open", file: "wasmplugin.yaml", old: "failStrategy: FAIL_CLOSE", new: "failStrategy: FAIL_OPEN",
			want: []string{"failStrategy FAIL_OPEN: must be FAIL_CLOSE"}},
		{name: "server side", file: "wasmplugin.yaml", old: "- mode: CLIENT", new: "- mode: SERVER",
			want: []string{"want mode CLIENT"}},
		{name: "selectors differ", file: "envoyfilter.yaml", old: "      app: frontend", new: "      app: other",
			want: []string{"selector", "differ"}},
		{name: "wrong cluster", file: "envoyfilter.yaml", old: "portNumber: 8080", new: "portNumber: 9090",
			want: []string{"matches cluster hashlb-backends.demo.internal:9090"}},
		{name: "unknown envoy field in patch", file: "envoyfilter.yaml", old: "fallback_policy:", new: "fallback_policyy:",
			want: []string{"not an Envoy Cluster", "fallback_policyy"}},
		{name: "retries beyond the ranking", file: "virtualservice.yaml", old: "attempts: 2", new: "attempts: 3",
			want: []string{"retries.attempts 3 needs upstreamCount >= 4"}},
		{name: "bad sha256", file: "wasmplugin.yaml", old: `sha256: "0000`, new: `sha256: "sha256:0000`,
			want: []string{"WasmPlugin sha256"}},
		// The TrafficExtension's own rules (traffic_extension.proto's CEL rules).
		{name: "wasm fields in spec", file: "wasmplugin.yaml", teOnly: true,
			teOld: "  wasm:\n", teNew: "  failStrategy: FAIL_CLOSE\n  wasm:\n", want: []string{"TrafficExtension hashlb spec", "failStrategy"}},
		{name: "selector and targetRefs", file: "wasmplugin.yaml", teOnly: true,
			teOld: "  phase: STATS\n", teNew: "  phase: STATS\n  targetRefs:\n  - kind: Gateway\n    group: gateway.networking.k8s.io\n    name: waypoint\n",
			want: []string{"only one of targetRefs or selector"}},
	}
	for _, tt := range tests {
		for _, kind := range []string{"WasmPlugin", "TrafficExtension"} {
			te := kind == "TrafficExtension"
			if !te && tt.teOnly {
				continue
			}
			t.Run(tt.name+"/"+kind, func(t *testing.T) {
				fleet := strings.HasPrefix(tt.name, "fleet: ") // a broken copy of the fleet variant
				files, file, old, new := readIstioDir(t), tt.file, tt.old, tt.new
				if fleet {
					files = readIstioFleet(t)
				}
				if te {
					rel := "trafficextension/trafficextension.yaml"
					if fleet {
						rel = "trafficextension/fleet/trafficextension.yaml"
					}
					files = readTrafficExtension(t, files, rel)
					if file == "wasmplugin.yaml" {
						file = "trafficextension.yaml"
						old, new = orDefault(tt.teOld, old), orDefault(tt.teNew, new)
					}
				}
				files[file] = []byte(mustReplace(t, string(files[file]), old, new))
				var want []string
				for _, w := range tt.want {
					want = append(want, strings.ReplaceAll(w, "WasmPlugin", kind))
				}
				wantErr(t, checkIstioFiles(files), want...)
			})
		}
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestIstioTrafficExtensionTwins: each TrafficExtension of
// configs/istio/trafficextension/ carries exactly the plugin of its
// WasmPlugin twin (every field, pluginConfig included), so the choice of
// kind changes nothing but the Istio releases that accept it.
func TestIstioTrafficExtensionTwins(t *testing.T) {
	for wp, te := range map[string]string{
		"wasmplugin.yaml":       "trafficextension/trafficextension.yaml",
		"fleet/wasmplugin.yaml": "trafficextension/fleet/trafficextension.yaml",
		"tcp/wasmplugin.yaml":   "trafficextension/tcp/trafficextension.yaml",
	} {
		t.Run(te, func(t *testing.T) {
			a, err := loadIstio(map[string][]byte{wp: readRepoFile(t, "configs/istio/"+wp)})
			if err != nil {
				t.Fatal(err)
			}
			b, err := loadIstio(map[string][]byte{te: readRepoFile(t, "configs/istio/"+te)})
			if err != nil {
				t.Fatal(err)
			}
			if b.te == nil || b.kind != "TrafficExtension" {
				t.Fatalf("configs/istio/%s holds no TrafficExtension", te)
			}
			if !proto.Equal(a.wasm, b.wasm) {
				t.Errorf("configs/istio/%s carries\n%v\nconfigs/istio/%s\n%v", te, b.wasm, wp, a.wasm)
			}
		})
	}
}
