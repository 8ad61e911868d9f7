package e2e

// envoy.yaml and configs/envoy-*.yaml against go-control-plane's Bootstrap
// (there is no Envoy binary here): strict protojson with every extension the
// files name linked in, ValidateAll on the bootstrap and on every
// typed_config, the repository's own rules (V8, a vm_id, build.sh's module
// path, fail_open false, admin on loopback), and the cross-checks hashlb
// check runs (internal/deploycheck): the plugin's services are the
// override_host cluster's endpoints, the cluster reads its upstreamHeader,
// the filter kind matches filterType, the fleet cluster exists.

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	overridehostv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	// Extensions the bootstrap files name in typed_config; protojson resolves
	// an Any only if its type is linked in.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"

	"github.com/hashlb/hashlb/internal/deploycheck"
	"github.com/hashlb/hashlb/lbcore"
)

const (
	wasmFilterName   = "envoy.filters.http.wasm"
	routerFilterName = "envoy.filters.http.router"
	overrideHostName = "envoy.load_balancing_policies.override_host"
)

// loadBootstrap parses a YAML bootstrap strictly and validates it.
func loadBootstrap(data []byte) (*bootstrapv3.Bootstrap, error) {
	j, err := yamlToJSON(data)
	if err != nil {
		return nil, err
	}
	b := &bootstrapv3.Bootstrap{}
	if err := strictUnmarshal(j, b); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	if err := validateAll(b); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return b, nil
}

// checkBootstrapFile loads a bootstrap and checks it against hashlb.
func checkBootstrapFile(data []byte) error {
	b, err := loadBootstrap(data)
	if err != nil {
		return err
	}
	return errors.Join(checkBootstrap(b), crossCheck(map[string][]byte{"bootstrap": data}))
}

// crossCheck runs hashlb check's cross-checks on files (name → contents)
// together and returns the findings that are not warnings.
func crossCheck(files map[string][]byte) error {
	var named []deploycheck.Named
	for _, name := range slices.Sorted(maps.Keys(files)) {
		f, err := deploycheck.Scan(files[name])
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		named = append(named, deploycheck.Named{Name: name, File: f})
	}
	var errs []error
	for _, f := range deploycheck.Check(named) {
		if !f.Warning {
			errs = append(errs, fmt.Errorf("%s: %s: %s", f.File, f.Where, f))
		}
	}
	return errors.Join(errs...)
}

// checkBootstrap checks what ties a valid bootstrap to hashlb, reporting
// every problem found.
func checkBootstrap(b *bootstrapv3.Bootstrap) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if a := b.GetAdmin().GetAddress().GetSocketAddress(); a != nil {
		if ip, err := netip.ParseAddr(a.GetAddress()); err != nil || !ip.IsLoopback() {
			bad("admin: address %q is not loopback", a.GetAddress())
		}
	}
	plugins := 0
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			n, err := checkNetworkChain(fc.GetFilters())
			plugins += n
			if err != nil {
				errs = append(errs, fmt.Errorf("listener %s: %w", l.GetName(), err))
			}
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if f.GetTypedConfig().MessageIs(hcm) {
					if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
						bad("listener %s: %v", l.GetName(), err)
						continue
					}
					n, err := checkHCM(hcm)
					plugins += n
					if err != nil {
						errs = append(errs, fmt.Errorf("listener %s: %w", l.GetName(), err))
					}
				}
			}
		}
	}
	if plugins == 0 {
		bad("no %s filter loads %s", wasmFilterName, wasmPath)
	}
	return errors.Join(errs...)
}

// checkHCM checks the hashlb filters of one connection manager (the router
// last, an inline route_config for the cross-checks); it returns how many
// hashlb filters it found.
func checkHCM(hcm *hcmv3.HttpConnectionManager) (int, error) {
	var errs []error
	filters := hcm.GetHttpFilters()
	if len(filters) == 0 || filters[len(filters)-1].GetName() != routerFilterName {
		errs = append(errs, fmt.Errorf("http_filters: the last filter must be %s", routerFilterName))
	}
	_, configs, err := checkWasmFilters("http_filters", wasmFilterName, filters, func() *wasmfilterv3.Wasm { return &wasmfilterv3.Wasm{} })
	errs = append(errs, err)
	if hcm.GetRouteConfig() == nil && len(configs) > 0 {
		errs = append(errs, errors.New("route_config: must be inline so the routed clusters can be checked"))
	}
	return len(configs), errors.Join(errs...)
}

// checkWasmFilters checks, with checkWasmPlugin, each of filters (an HTTP
// connection manager's or a filter chain's, field names them in messages)
// that is a Wasm filter named name; newWasm makes the filter's own Wasm
// message. It returns how many it could read and the configurations that
// lbcore accepts.
func checkWasmFilters[F interface {
	GetName() string
	GetTypedConfig() *anypb.Any
}, W interface {
	proto.Message
	GetConfig() *wasmv3.PluginConfig
}](field, name string, filters []F, newWasm func() W) (int, []*lbcore.Config, error) {
	var errs []error
	var configs []*lbcore.Config
	n := 0
	for i, f := range filters {
		w := newWasm()
		if f.GetName() != name || !f.GetTypedConfig().MessageIs(w) {
			continue
		}
		if err := f.GetTypedConfig().UnmarshalTo(w); err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: %w", field, i, err))
			continue
		}
		n++
		cfg, err := checkWasmPlugin(w.GetConfig())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s[%d] %s: %w", field, i, w.GetConfig().GetName(), err))
		}
		if cfg != nil {
			configs = append(configs, cfg)
		}
	}
	return n, configs, errors.Join(errs...)
}

// checkWasmPlugin checks the Wasm plugin settings and returns the parsed
// plugin configuration.
func checkWasmPlugin(p *wasmv3.PluginConfig) (*lbcore.Config, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	vm := p.GetVmConfig()
	if vm.GetRuntime() != "envoy.wasm.runtime.v8" {
		bad("vm_config.runtime %q: want envoy.wasm.runtime.v8", vm.GetRuntime())
	}
	if vm.GetVmId() == "" {
		bad("vm_config.vm_id is empty: give hashlb a vm_id so its plugins share one key space")
	}
	if f := vm.GetCode().GetLocal().GetFilename(); f != wasmPath {
		bad("vm_config.code.local.filename %q is not build.sh's output %s", f, wasmPath)
	}
	if p.GetFailOpen() || p.GetFailurePolicy() == wasmv3.FailurePolicy_FAIL_OPEN {
		bad("fail_open: the filter must fail closed (a bypassed hashlb leaves the client's upstream header in place)")
	}
	sv := &wrapperspb.StringValue{}
	if err := p.GetConfiguration().UnmarshalTo(sv); err != nil {
		bad("configuration: want a google.protobuf.StringValue holding hashlb's JSON: %v", err)
		return nil, errors.Join(errs...)
	}
	cfg, err := lbcore.ParseConfig([]byte(sv.GetValue()))
	if err != nil {
		bad("configuration: %v", err)
	}
	return cfg, errors.Join(errs...)
}

// overrideHost returns the cluster's override_host policy, or nil.
func overrideHost(c *clusterv3.Cluster) *overridehostv3.OverrideHost {
	for _, p := range c.GetLoadBalancingPolicy().GetPolicies() {
		tc := p.GetTypedExtensionConfig()
		oh := &overridehostv3.OverrideHost{}
		if tc.GetTypedConfig().MessageIs(oh) && tc.GetTypedConfig().UnmarshalTo(oh) == nil {
			return oh
		}
	}
	return nil
}

func TestEnvoyBootstrap(t *testing.T) {
	for _, file := range []string{"envoy.yaml", "configs/envoy-fleet.yaml", "configs/envoy-original-dst.yaml", "configs/envoy-tcp.yaml"} {
		t.Run(file, func(t *testing.T) {
			if err := checkBootstrapFile(readRepoFile(t, file)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestEnvoyOverrideHostShape pins what envoy.yaml promises beyond validity.
func TestEnvoyOverrideHostShape(t *testing.T) {
	b, err := loadBootstrap(readRepoFile(t, "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := b.GetStaticResources().GetListeners()[0].GetAddress().GetSocketAddress(); got.GetAddress() != "127.0.0.1" || got.GetPortValue() != 10000 {
		t.Errorf("listener = %s:%d, want 127.0.0.1:10000", got.GetAddress(), got.GetPortValue())
	}
	if a := b.GetAdmin().GetAddress().GetSocketAddress(); a.GetPortValue() != 9901 {
		t.Errorf("admin port = %d, want 9901", a.GetPortValue())
	}
	var c *clusterv3.Cluster
	for _, cl := range b.GetStaticResources().GetClusters() {
		if cl.GetName() == "hashlb_upstream" {
			c = cl
		}
	}
	oh := overrideHost(c)
	if oh == nil {
		t.Fatal("cluster hashlb_upstream has no override_host policy")
	}
	if oh.GetFallbackPolicy() == nil {
		t.Error("override_host has no fallback_policy")
	}
}

// TestEnvoyBrokenCopies: each deliberately broken copy of envoy.yaml fails
// with a message naming the problem.
func TestEnvoyBrokenCopies(t *testing.T) {
	orig := string(readRepoFile(t, "envoy.yaml"))
	fleet := string(readRepoFile(t, "configs/envoy-fleet.yaml"))
	odst := string(readRepoFile(t, "configs/envoy-original-dst.yaml"))
	tests := []struct {
		name     string
		src      string
		old, new string
		want     []string
	}{
		{"wrong header name", orig, "- header: x-envoy-original-dst-host", "- header: x-upstream",
			[]string{"override_host reads header", "x-upstream", `upstreamHeader "x-envoy-original-dst-host"`}},
		{"service missing from cluster", orig,
			"        - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 18083 } } }\n", "",
			[]string{`services[2] "b3" 127.0.0.1:18083 is not an endpoint`}},
		{"endpoint that is no service", orig, "port_value: 18083 } } }", "port_value: 18084 } } }",
			[]string{"endpoint 127.0.0.1:18084 is not one of the plugin's services", `"b3" 127.0.0.1:18083`}},
		{"bad plugin field", orig, `"upstreamCount": 3,`, `"upstreamCount": 30,`,
			[]string{"configuration: upstreamCount: 30 is out of range [1, 8]"}},
		{"unknown plugin field", orig, `"upstreamCount": 3,`, `"upstreamCount": 3, "upstreamHeaders": "x",`,
			[]string{"upstreamHeaders: unknown field"}},
		{"fleet cluster missing", fleet, `"cluster": "hashlb_etcd"`, `"cluster": "etcd"`,
			[]string{`persistence.fleet.cluster "etcd": no such cluster`}},
		{"fleet by endpoints in the filter", fleet, `"cluster": "hashlb_etcd"`, `"endpoints": ["127.0.0.1:2379"]`,
			[]string{`persistence.fleet.cluster: is required: the filter calls etcd through an Envoy cluster`}},
		{"fleet cluster on HTTP/2", fleet, "    connect_timeout: 0.25s\n", "    connect_timeout: 0.25s\n    http2_protocol_options: {}\n",
			[]string{"hashlb_etcd (persistence.fleet): must speak plain HTTP/1.1"}},
		{"unknown envoy field", orig, "num_retries: 2", "num_retriess: 2",
			[]string{"num_retriess"}},
		{"invalid envoy value", orig, "port_value: 10000", "port_value: 70000",
			[]string{"PortValue"}},
		{"fallback missing", orig, "            fallback_policy:\n", "            fallback_policyy:\n",
			[]string{"fallback_policyy"}},
		{"retries beyond the ranking", orig, "num_retries: 2", "num_retries: 3",
			[]string{"num_retries 3 needs upstreamCount >= 4"}},
		{"wrong module path", orig, "filename: dist/hashlb.wasm", "filename: build/hashlb.wasm",
			[]string{`"build/hashlb.wasm" is not build.sh's output dist/hashlb.wasm`}},
		{"fail open", orig, "fail_open: false", "fail_open: true",
			[]string{"fail_open: the filter must fail closed"}},
		{"no vm_id", orig, "vm_id: hashlb", `vm_id: ""`,
			[]string{"vm_id is empty"}},
		{"admin off loopback", orig, "address: 127.0.0.1, port_value: 9901", "address: 0.0.0.0, port_value: 9901",
			[]string{`admin: address "0.0.0.0" is not loopback`}},
		{"original_dst list", odst, `"upstreamCount": 1,`, `"upstreamCount": 2,`,
			[]string{"ORIGINAL_DST reads one address"}},
		{"original_dst header", odst, "http_header_name: x-envoy-original-dst-host", "http_header_name: x-dst",
			[]string{`ORIGINAL_DST reads header "x-dst"`}},
		{"original_dst without header", odst, "use_http_header: true", "use_http_header: false",
			[]string{"without original_dst_lb_config.use_http_header"}},
		{"original_dst fail open", odst, "fail_open: false", "fail_open: true",
			[]string{"must fail closed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			broken := mustReplace(t, tt.src, tt.old, tt.new)
			wantErr(t, checkBootstrapFile([]byte(broken)), tt.want...)
		})
	}
}
