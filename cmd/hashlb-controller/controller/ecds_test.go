package controller

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	networkwasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/wasm/v3"
	overridehostv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	// Extensions the bootstrap names in typed_config.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"

	"github.com/hashlb/hashlb/cmd/hashlb-controller/services"
	"github.com/hashlb/hashlb/lbcore"
)

const ecdsBootstrap = "../../../configs/envoy-ecds.yaml"

type validator interface{ ValidateAll() error }

// strict decodes JSON into m rejecting unknown fields, then runs
// go-control-plane's validation rules.
func strict(data []byte, m proto.Message) error {
	if err := (protojson.UnmarshalOptions{}).Unmarshal(data, m); err != nil {
		return err
	}
	if v, ok := m.(validator); ok {
		return v.ValidateAll()
	}
	return nil
}

// ecdsFilter is the bootstrap's HTTP filter that takes its configuration
// from a path_config_source, and the override_host header of its cluster.
func ecdsFilter(t *testing.T) (f *hcmv3.HttpFilter, header string) {
	t.Helper()
	data, err := os.ReadFile(ecdsBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := strict(j, b); err != nil {
		t.Fatalf("%s: %v", ecdsBootstrap, err)
	}
	for _, c := range b.GetStaticResources().GetClusters() {
		for _, p := range c.GetLoadBalancingPolicy().GetPolicies() {
			oh := &overridehostv3.OverrideHost{}
			if p.GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(oh) == nil {
				for _, s := range oh.GetOverrideHostSources() {
					header = s.GetHeader()
				}
			}
		}
	}
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, nf := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if nf.GetTypedConfig().UnmarshalTo(hcm) != nil {
					continue
				}
				for _, hf := range hcm.GetHttpFilters() {
					if hf.GetConfigDiscovery().GetConfigSource().GetPathConfigSource() != nil {
						return hf, header
					}
				}
			}
		}
	}
	t.Fatalf("%s: no HTTP filter with config_discovery from a path_config_source", ecdsBootstrap)
	return nil, ""
}

// checkECDSFile decodes a file the controller wrote as Envoy reads it and
// returns the hashlb configuration inside.
func checkECDSFile(t *testing.T, data []byte, filterName string, typeURLs []string) *lbcore.Config {
	t.Helper()
	dr := &discoveryv3.DiscoveryResponse{}
	if err := strict(data, dr); err != nil {
		t.Fatalf("ECDS file as a DiscoveryResponse: %v\n%s", err, data)
	}
	if len(dr.GetResources()) != 1 {
		t.Fatalf("ECDS file holds %d resources, want 1", len(dr.GetResources()))
	}
	tec := &corev3.TypedExtensionConfig{}
	if err := dr.GetResources()[0].UnmarshalTo(tec); err != nil {
		t.Fatalf("resource: %v", err)
	}
	if err := tec.ValidateAll(); err != nil {
		t.Fatalf("TypedExtensionConfig: %v", err)
	}
	if tec.GetName() != filterName {
		t.Errorf("ECDS resource name %q, want the filter's name %q", tec.GetName(), filterName)
	}
	if u := tec.GetTypedConfig().GetTypeUrl(); !slices.Contains(typeURLs, u) {
		t.Errorf("typed_config %s is not one of the filter's type_urls %v", u, typeURLs)
	}
	w := &wasmfilterv3.Wasm{}
	if err := tec.GetTypedConfig().UnmarshalTo(w); err != nil {
		t.Fatal(err)
	}
	if err := w.ValidateAll(); err != nil {
		t.Fatalf("Wasm: %v", err)
	}
	pc := w.GetConfig()
	if vm := pc.GetVmConfig(); vm.GetRuntime() != "envoy.wasm.runtime.v8" || vm.GetVmId() == "" {
		t.Errorf("vm_config runtime %q vm_id %q, want envoy.wasm.runtime.v8 and a vm_id", vm.GetRuntime(), vm.GetVmId())
	}
	if pc.GetFailOpen() || pc.GetFailurePolicy() != wasmv3.FailurePolicy_FAIL_RELOAD {
		t.Errorf("fail_open %v, failure_policy %v: the filter must fail closed and reload a failed VM (FAIL_RELOAD)", pc.GetFailOpen(), pc.GetFailurePolicy())
	}
	sv := &wrapperspb.StringValue{}
	if err := pc.GetConfiguration().UnmarshalTo(sv); err != nil {
		t.Fatalf("configuration: want a StringValue holding hashlb's JSON: %v", err)
	}
	cfg, err := lbcore.ParseConfig([]byte(sv.GetValue()))
	if err != nil {
		t.Fatalf("configuration: %v", err)
	}
	return cfg
}

// ecdsExample is the ECDS file shipped beside configs/envoy-ecds.yaml, so
// that the bootstrap starts (Envoy refuses a path_config_source whose file
// does not exist); the controller's -ecds-dir configs/ecds replaces it.
const ecdsExample = "../../../configs/ecds/demo_hashlb.json"

// TestECDSBootstrap: configs/envoy-ecds.yaml is a valid bootstrap whose
// filter reads the file the controller writes for WasmPlugin demo/hashlb
// with -ecds-dir configs/ecds, that file is a valid ECDS resource for that
// filter, and the example shipped there is exactly what the controller
// writes for two example pods (HASHLB_WRITE_EXAMPLES=1 rewrites it).
func TestECDSBootstrap(t *testing.T) {
	f, header := ecdsFilter(t)
	e := &ECDS{Dir: "configs/ecds", Module: "dist/hashlb.wasm"}
	if got, want := f.GetConfigDiscovery().GetConfigSource().GetPathConfigSource().GetPath(),
		e.Path(types.NamespacedName{Namespace: "demo", Name: "hashlb"}); got != want {
		t.Errorf("path_config_source.path = %q, want %q (the controller's file for demo/hashlb with -ecds-dir configs/ecds)", got, want)
	}
	wp := NewWasmPlugin()
	wp.SetNamespace("demo")
	wp.SetName(f.GetName())
	list := []services.Service{
		{Name: "web-0", Address: "10.0.0.10:8080", HashID: "web-0", Enabled: true},
		{Name: "web-1", Address: "10.0.0.11:8080", HashID: "web-1", Enabled: false},
	}
	wp.Object["spec"] = map[string]any{"pluginConfig": map[string]any{
		"lbMethod": "URLHASH", "upstreamHeader": header, "upstreamCount": int64(2),
	}}
	cfg, err := newConfig(wp, list)
	if err != nil {
		t.Fatal(err)
	}
	data, err := e.Resource(wp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := checkECDSFile(t, data, f.GetName(), f.GetConfigDiscovery().GetTypeUrls())
	if len(got.Services) != 2 || got.Services[0].Address != "10.0.0.10:8080" || got.Services[1].Enabled {
		t.Errorf("services in the ECDS file = %+v, want web-0 enabled and web-1 disabled", got.Services)
	}
	if got.UpstreamHeader != header || got.UpstreamCount < 2 {
		t.Errorf("upstreamHeader %q upstreamCount %d, want the cluster's override_host header %q and at least 2", got.UpstreamHeader, got.UpstreamCount, header)
	}
	if os.Getenv("HASHLB_WRITE_EXAMPLES") == "1" {
		if err := os.WriteFile(ecdsExample, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if shipped, err := os.ReadFile(ecdsExample); err != nil || string(shipped) != string(data) {
		t.Errorf("%s (err %v) is not what the controller writes for demo/hashlb; HASHLB_WRITE_EXAMPLES=1 go test -run TestECDSBootstrap ./controller rewrites it:\n%s", ecdsExample, err, data)
	}
}

// TestECDSFiles: with -ecds-dir the controller writes each annotated
// WasmPlugin's file, replaces it by rename when the endpoints change, and
// removes it when the WasmPlugin goes.
func TestECDSFiles(t *testing.T) {
	t.Parallel()
	k := newKube(t)
	dir := t.TempDir()
	k.controller(Options{ECDSDir: dir, ECDSModule: "/etc/envoy/hashlb.wasm"})
	p := k.webPods(3)
	wp := k.wasmPlugin("hashlb", annotated("web"), basicConfig())
	// The fleet's etcd credentials, as docs/controller.md shows them.
	if err := unstructured.SetNestedSlice(wp.Object, []any{
		map[string]any{"name": "HASHLB_ETCD_USER", "valueFrom": "HOST"},
		map[string]any{"name": "HASHLB_ETCD_PASSWORD", "valueFrom": "HOST"},
	}, "spec", "vmConfig", "env"); err != nil {
		t.Fatal(err)
	}
	if err := k.c.Update(t.Context(), wp); err != nil {
		t.Fatal(err)
	}
	k.waitServices("hashlb", want(8080, p...), settle)

	file := filepath.Join(dir, k.ns+"_hashlb.json")
	read := func(n int) (*lbcore.Config, uint64) {
		t.Helper()
		deadline := time.Now().Add(settle)
		for {
			data, err := os.ReadFile(file)
			if err == nil {
				cfg := checkECDSFile(t, data, "hashlb", []string{httpWasmType})
				if len(cfg.Services) == n {
					st, err := os.Stat(file)
					if err != nil {
						t.Fatal(err)
					}
					return cfg, st.Sys().(*syscall.Stat_t).Ino
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("ECDS file %s: want %d services (read error %v)", file, n, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	cfg, ino := read(3)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dr := &discoveryv3.DiscoveryResponse{}
	tec, w := &corev3.TypedExtensionConfig{}, &wasmfilterv3.Wasm{}
	if err := strict(data, dr); err != nil || dr.GetResources()[0].UnmarshalTo(tec) != nil || tec.GetTypedConfig().UnmarshalTo(w) != nil {
		t.Fatalf("ECDS file: %v", err)
	}
	if got := w.GetConfig().GetVmConfig().GetEnvironmentVariables().GetHostEnvKeys(); !slices.Equal(got, []string{"HASHLB_ETCD_USER", "HASHLB_ETCD_PASSWORD"}) {
		t.Errorf("ECDS file vm_config.environment_variables.host_env_keys = %q, want the WasmPlugin's vmConfig.env HOST names", got)
	}
	if cfg.LBMethod.String() != "URLHASH" {
		t.Errorf("lbMethod in the ECDS file = %s, want the WasmPlugin's URLHASH", cfg.LBMethod)
	}
	k.slice("web", "web-a", v4, httpPort, p[:2]...)
	_, ino2 := read(2)
	if ino2 == ino {
		t.Errorf("ECDS file rewritten in place (inode %d kept), want a new file renamed over it", ino)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != filepath.Base(file) {
			t.Errorf("ECDS dir holds %s besides %s", e.Name(), filepath.Base(file))
		}
	}

	if err := k.c.Delete(t.Context(), k.get("hashlb")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(settle)
	for {
		if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ECDS file %s still there %v after its WasmPlugin was deleted", file, settle)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestECDSResource: what of the WasmPlugin the ECDS file carries besides
// hashlb's JSON.
func TestECDSResource(t *testing.T) {
	tests := []struct {
		name                 string
		spec                 map[string]any
		wantType, wantModule string
		wantRoot             string
		wantHostEnv          []string
		wantInlineEnv        map[string]string
	}{
		{name: "http plugin, oci url", spec: map[string]any{"url": "oci://registry.example.com/hashlb:v1", "failStrategy": "FAIL_OPEN"},
			wantType: httpWasmType, wantModule: "/etc/envoy/hashlb.wasm"},
		{name: "file url and pluginName", spec: map[string]any{"url": "file:///var/local/wasm/hashlb.wasm", "pluginName": "hashlb_root"},
			wantType: httpWasmType, wantModule: "/var/local/wasm/hashlb.wasm", wantRoot: "hashlb_root"},
		{name: "network plugin", spec: map[string]any{"type": "NETWORK"},
			wantType: networkWasmType, wantModule: "/etc/envoy/hashlb.wasm"},
		{name: "etcd credentials from the host, an inline variable", spec: map[string]any{"vmConfig": map[string]any{"env": []any{
			map[string]any{"name": "HASHLB_ETCD_USER", "valueFrom": "HOST"},
			map[string]any{"name": "HASHLB_ETCD_PASSWORD", "valueFrom": "HOST"},
			map[string]any{"name": "TRUST_DOMAIN", "value": "cluster.local"},
			map[string]any{"name": "EMPTY", "valueFrom": "INLINE"},
		}}}, wantType: httpWasmType, wantModule: "/etc/envoy/hashlb.wasm",
			wantHostEnv:   []string{"HASHLB_ETCD_USER", "HASHLB_ETCD_PASSWORD"},
			wantInlineEnv: map[string]string{"TRUST_DOMAIN": "cluster.local", "EMPTY": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wp := NewWasmPlugin()
			wp.SetNamespace("demo")
			wp.SetName("hashlb")
			wp.Object["spec"] = tt.spec
			e := &ECDS{Dir: t.TempDir(), Module: "/etc/envoy/hashlb.wasm"}
			data, err := e.Resource(wp, map[string]any{"services": []any{map[string]any{"name": "a", "address": "10.0.0.1:80"}}})
			if err != nil {
				t.Fatal(err)
			}
			dr := &discoveryv3.DiscoveryResponse{}
			if err := strict(data, dr); err != nil {
				t.Fatalf("Resource(%v) is no DiscoveryResponse: %v", tt.spec, err)
			}
			tec := &corev3.TypedExtensionConfig{}
			if err := dr.GetResources()[0].UnmarshalTo(tec); err != nil {
				t.Fatal(err)
			}
			if got := tec.GetTypedConfig().GetTypeUrl(); got != tt.wantType {
				t.Errorf("Resource(%v) typed_config = %s, want %s", tt.spec, got, tt.wantType)
			}
			var pc *wasmv3.PluginConfig
			if tt.wantType == networkWasmType {
				w := &networkwasmv3.Wasm{}
				if err := tec.GetTypedConfig().UnmarshalTo(w); err != nil {
					t.Fatal(err)
				}
				pc = w.GetConfig()
			} else {
				w := &wasmfilterv3.Wasm{}
				if err := tec.GetTypedConfig().UnmarshalTo(w); err != nil {
					t.Fatal(err)
				}
				pc = w.GetConfig()
			}
			if got := pc.GetVmConfig().GetCode().GetLocal().GetFilename(); got != tt.wantModule {
				t.Errorf("Resource(%v) module = %q, want %q", tt.spec, got, tt.wantModule)
			}
			if pc.GetRootId() != tt.wantRoot {
				t.Errorf("Resource(%v) root_id = %q, want %q", tt.spec, pc.GetRootId(), tt.wantRoot)
			}
			if pc.GetFailOpen() || pc.GetFailurePolicy() != wasmv3.FailurePolicy_FAIL_RELOAD {
				t.Errorf("Resource(%v): fail_open %v failure_policy %v, want false and FAIL_RELOAD whatever failStrategy says", tt.spec, pc.GetFailOpen(), pc.GetFailurePolicy())
			}
			env := pc.GetVmConfig().GetEnvironmentVariables()
			if tt.wantHostEnv == nil && tt.wantInlineEnv == nil && env != nil {
				t.Errorf("Resource(%v): environment_variables %v, want none", tt.spec, env)
			}
			if !slices.Equal(env.GetHostEnvKeys(), tt.wantHostEnv) || !maps.Equal(env.GetKeyValues(), tt.wantInlineEnv) {
				t.Errorf("Resource(%v): host_env_keys %q key_values %q, want %q and %q", tt.spec,
					env.GetHostEnvKeys(), env.GetKeyValues(), tt.wantHostEnv, tt.wantInlineEnv)
			}
		})
	}
	// A TrafficExtension has the same fields under spec.wasm, and a file of
	// its own beside a WasmPlugin of the same name.
	te := TrafficExtension.New()
	te.SetNamespace("demo")
	te.SetName("hashlb")
	te.Object["spec"] = map[string]any{"phase": "STATS", "wasm": map[string]any{
		"url": "file:///var/local/wasm/hashlb.wasm", "pluginName": "hashlb_root",
		"vmConfig": map[string]any{"env": []any{map[string]any{"name": "HASHLB_ETCD_PASSWORD", "valueFrom": "HOST"}}},
	}}
	e := &ECDS{Dir: "/etc/hashlb/ecds", Module: "/etc/envoy/hashlb.wasm"}
	data, err := e.Resource(te, map[string]any{"services": []any{map[string]any{"name": "a", "address": "10.0.0.1:80"}}})
	if err != nil {
		t.Fatal(err)
	}
	dr, tec, w := &discoveryv3.DiscoveryResponse{}, &corev3.TypedExtensionConfig{}, &wasmfilterv3.Wasm{}
	if err := strict(data, dr); err != nil || dr.GetResources()[0].UnmarshalTo(tec) != nil || tec.GetTypedConfig().UnmarshalTo(w) != nil {
		t.Fatalf("TrafficExtension's ECDS file: %v", err)
	}
	pc := w.GetConfig()
	if pc.GetVmConfig().GetCode().GetLocal().GetFilename() != "/var/local/wasm/hashlb.wasm" || pc.GetRootId() != "hashlb_root" ||
		!slices.Equal(pc.GetVmConfig().GetEnvironmentVariables().GetHostEnvKeys(), []string{"HASHLB_ETCD_PASSWORD"}) {
		t.Errorf("TrafficExtension's ECDS file: module %q root_id %q env %v, want spec.wasm's url, pluginName and vmConfig.env",
			pc.GetVmConfig().GetCode().GetLocal().GetFilename(), pc.GetRootId(), pc.GetVmConfig().GetEnvironmentVariables())
	}
	key := types.NamespacedName{Namespace: "demo", Name: "hashlb"}
	if a, b := e.pathOf(WasmPlugin, key), e.pathOf(TrafficExtension, key); a == b || b != "/etc/hashlb/ecds/demo_hashlb_trafficextension.json" {
		t.Errorf("ECDS files of WasmPlugin and TrafficExtension demo/hashlb: %s and %s, want two files, the second demo_hashlb_trafficextension.json", a, b)
	}

	// An entry Istio's schema refuses is reported, not dropped.
	for _, bad := range []map[string]any{
		{"name": "X", "valueFrom": "SECRET"},
		{"value": "no name"},
	} {
		wp := NewWasmPlugin()
		wp.Object["spec"] = map[string]any{"vmConfig": map[string]any{"env": []any{bad}}}
		e := &ECDS{Dir: t.TempDir(), Module: "/etc/envoy/hashlb.wasm"}
		if _, err := e.Resource(wp, map[string]any{}); err == nil {
			t.Errorf("Resource with vmConfig.env %v: no error", bad)
		}
	}

	// The session key inline is refused: the file would hold it.
	for _, inline := range []map[string]any{
		{"name": "HASHLB_SESSION_KEY", "value": "inline-session-key-0123456789abcdef0123"},
		{"name": "HASHLB_SESSION_KEY", "valueFrom": "INLINE", "value": "inline-session-key-0123456789abcdef0123"},
	} {
		wp := NewWasmPlugin()
		wp.Object["spec"] = map[string]any{"vmConfig": map[string]any{"env": []any{inline}}}
		e := &ECDS{Dir: t.TempDir(), Module: "/etc/envoy/hashlb.wasm"}
		data, err := e.Resource(wp, map[string]any{})
		if err == nil || !strings.Contains(err.Error(), "valueFrom HOST") || strings.Contains(string(data), "inline-session-key") {
			t.Errorf("Resource with vmConfig.env %v: %v, file %s; want a refusal naming valueFrom HOST and no file", inline, err, data)
		}
	}
}
