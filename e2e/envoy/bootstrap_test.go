package envoy

// Bootstraps generated for the corpus, persistence, metrics and
// configuration-error tests: the shapes of envoy.yaml (override_host),
// configs/envoy-original-dst.yaml (ORIGINAL_DST with use_http_header) and
// configs/envoy-ecds.yaml (the Wasm filter from an ECDS file), with as many
// listeners as a test needs, each carrying its own hashlb configuration.
// Envoy reads JSON as YAML, so the bootstrap is built as Go values and
// marshalled.

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
)

// steering is how Envoy obeys hashlb's upstream header.
type steering int

const (
	// overrideHost: a STATIC cluster whose endpoints are the services, with
	// the override_host load-balancing policy (envoy.yaml).
	overrideHost steering = iota
	// originalDst: an ORIGINAL_DST cluster with use_http_header
	// (configs/envoy-original-dst.yaml); the header must hold one address.
	originalDst
)

func (s steering) String() string {
	if s == originalDst {
		return "original_dst"
	}
	return "override_host"
}

const (
	wasmType        = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	stringValueType = "type.googleapis.com/google.protobuf.StringValue"
	hcmType         = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	routerType      = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
	listenerType    = "type.googleapis.com/envoy.config.listener.v3.Listener"
	typedExtType    = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"
)

type obj = map[string]any

// sockAddr is an Envoy Address for host:port.
func sockAddr(t testing.TB, hostport string) obj {
	t.Helper()
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatalf("address %q: %v", hostport, err)
	}
	port, _ := strconv.Atoi(p)
	return obj{"socket_address": obj{"address": h, "port_value": port}}
}

// wasmPlugin is the Wasm filter's PluginConfig as envoy.yaml writes it
// (vm_id hashlb, V8, dist/hashlb.wasm, fail_open false), with rootID as
// root_id ("" leaves it unset) and config as hashlb's JSON.
func wasmPlugin(rootID string, config []byte) obj {
	p := obj{
		"name": "hashlb",
		"vm_config": obj{
			"vm_id":   "hashlb",
			"runtime": "envoy.wasm.runtime.v8",
			"code":    obj{"local": obj{"filename": "dist/hashlb.wasm"}},
		},
		"fail_open":     false,
		"configuration": obj{"@type": stringValueType, "value": string(config)},
	}
	if rootID != "" {
		p["root_id"] = rootID
	}
	return p
}

// listenerSpec is one listener in front of hashlb.
type listenerSpec struct {
	name string
	// addrs are the listener's addresses ("127.0.0.1:0"): the first is its
	// address, the others additional_addresses.
	addrs []string
	// Inline plugin: rootID and config (hashlb's JSON).
	rootID string
	config []byte
	// ecdsPath, when set, takes the Wasm filter from that ECDS file
	// (config_discovery with path_config_source, as configs/envoy-ecds.yaml)
	// instead of config; the filter is named ecdsName.
	ecdsPath, ecdsName string
	// cluster the route sends to; retries: envoy.yaml's retry policy.
	cluster string
	retries bool
	// customMethods sets http_protocol_options.allow_custom_methods: Envoy's
	// HTTP/1 codec otherwise answers 400 to a method it does not know
	// (INVITE) before any filter runs. The shipped bootstraps leave it
	// unset.
	customMethods bool
	// useRemoteAddress sets the connection manager's use_remote_address:
	// the downstream address is then the connection's peer (appended to
	// x-forwarded-for), not the last x-forwarded-for entry.
	useRemoteAddress bool
	// raisedLimits sets max_request_headers_kb 8192 and max_headers_count
	// 10000, Envoy's maxima (hostile_test.go's raisedLimits).
	raisedLimits bool
}

func (l listenerSpec) build(t testing.TB) obj {
	t.Helper()
	var wasm obj
	if l.ecdsPath != "" {
		wasm = obj{"name": l.ecdsName, "config_discovery": obj{
			"config_source": obj{"resource_api_version": "V3", "path_config_source": obj{"path": l.ecdsPath}},
			"type_urls":     []any{wasmType},
		}}
	} else {
		wasm = obj{"name": "envoy.filters.http.wasm", "typed_config": obj{"@type": wasmType, "config": wasmPlugin(l.rootID, l.config)}}
	}
	route := obj{"cluster": l.cluster}
	if l.retries {
		route["retry_policy"] = obj{"retry_on": "connect-failure,refused-stream,reset,5xx", "num_retries": 2}
	}
	hcm := obj{
		"@type":       hcmType,
		"stat_prefix": l.name,
		"route_config": obj{"name": l.name, "virtual_hosts": []any{obj{
			"name": l.name, "domains": []any{"*"},
			"routes": []any{obj{"match": obj{"prefix": "/"}, "route": route}},
		}}},
		"http_filters": []any{wasm, obj{"name": "envoy.filters.http.router", "typed_config": obj{"@type": routerType}}},
	}
	if l.useRemoteAddress {
		hcm["use_remote_address"] = true
	}
	if l.customMethods {
		hcm["http_protocol_options"] = obj{"allow_custom_methods": true}
	}
	if l.raisedLimits {
		hcm["max_request_headers_kb"] = 8192
		hcm["common_http_protocol_options"] = obj{"max_headers_count": 10000}
	}
	ln := obj{
		"name": l.name,
		// Its stats are listener.<name>.*, per worker
		// listener.<name>.worker_<n>.*, whatever port the kernel chose.
		"stat_prefix":   l.name,
		"address":       sockAddr(t, l.addrs[0]),
		"filter_chains": []any{obj{"filters": []any{obj{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}}}},
	}
	if len(l.addrs) > 1 {
		var more []any
		for _, a := range l.addrs[1:] {
			more = append(more, obj{"address": sockAddr(t, a)})
		}
		ln["additional_addresses"] = more
	}
	return ln
}

// overrideHostCluster is envoy.yaml's hashlb_upstream: a STATIC cluster of
// endpoints with the override_host policy on x-envoy-original-dst-host and
// round robin as its fallback.
func overrideHostCluster(t testing.TB, name string, endpoints []string) obj {
	t.Helper()
	var eps []any
	for _, e := range endpoints {
		eps = append(eps, obj{"endpoint": obj{"address": sockAddr(t, e)}})
	}
	rr := obj{"typed_extension_config": obj{"name": "envoy.load_balancing_policies.round_robin",
		"typed_config": obj{"@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"}}}
	return obj{
		"name": name, "connect_timeout": "1s", "type": "STATIC",
		"load_assignment": obj{"cluster_name": name, "endpoints": []any{obj{"lb_endpoints": eps}}},
		"load_balancing_policy": obj{"policies": []any{obj{"typed_extension_config": obj{
			"name": "envoy.load_balancing_policies.override_host",
			"typed_config": obj{
				"@type":                 "type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost",
				"override_host_sources": []any{obj{"header": "x-envoy-original-dst-host"}},
				"fallback_policy":       obj{"policies": []any{rr}},
			},
		}}}},
	}
}

// originalDstCluster is configs/envoy-original-dst.yaml's hashlb_upstream:
// the destination is the header's address.
func originalDstCluster(name string) obj {
	return obj{
		"name": name, "connect_timeout": "1s", "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED",
		"original_dst_lb_config": obj{"use_http_header": true, "http_header_name": "x-envoy-original-dst-host"},
	}
}

// cluster returns the upstream cluster for a steering mode.
func (s steering) cluster(t testing.TB, name string, endpoints []string) obj {
	if s == originalDst {
		return originalDstCluster(name)
	}
	return overrideHostCluster(t, name, endpoints)
}

// bootstrap is a whole Envoy bootstrap: the admin on a free loopback port,
// static listeners and clusters, and, when ldsPath is set, listeners from
// that file (dynamic_resources with a path_config_source).
type bootstrap struct {
	listeners []listenerSpec
	clusters  []obj
	ldsPath   string
}

func (b bootstrap) yaml(t testing.TB) []byte {
	t.Helper()
	var ls, cs []any
	for _, l := range b.listeners {
		ls = append(ls, l.build(t))
	}
	for _, c := range b.clusters {
		cs = append(cs, c)
	}
	doc := obj{
		"admin":            obj{"address": sockAddr(t, "127.0.0.1:0")},
		"static_resources": obj{"listeners": ls, "clusters": cs},
	}
	// A file subscription (ECDS, LDS) needs the node's id and cluster:
	// without them Envoy refuses the bootstrap ("node 'id' and 'cluster' are
	// required").
	doc["node"] = obj{"id": "hashlb-test", "cluster": "hashlb-test"}
	if b.ldsPath != "" {
		doc["dynamic_resources"] = obj{"lds_config": obj{"resource_api_version": "V3", "path_config_source": obj{"path": b.ldsPath}}}
	}
	out, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeAtomic replaces path with data the way hashlb-controller -ecds-dir
// does (cmd/hashlb-controller/controller/ecds.go, ECDS.Write): a temporary
// file in the same directory, synced, renamed over the old one. Envoy's
// path_config_source watches the directory for the rename (a moved-to
// event) and reloads the file.
func writeAtomic(t testing.TB, path string, data []byte) {
	t.Helper()
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		t.Fatal(err)
	}
}

// ecdsFile is the ECDS file hashlb-controller writes for a WasmPlugin named
// name (cmd/hashlb-controller/controller/ecds.go, ECDS.Resource): a
// DiscoveryResponse of one TypedExtensionConfig whose Wasm filter carries
// hashlb's JSON. version is the response's version_info (the controller
// writes none; Envoy reports it as the ECDS resource's version).
func ecdsFile(t testing.TB, name, version string, config []byte) []byte {
	t.Helper()
	doc := obj{
		"type_url": typedExtType,
		"resources": []any{obj{
			"@type":        typedExtType,
			"name":         name,
			"typed_config": obj{"@type": wasmType, "config": wasmPlugin("", config)},
		}},
	}
	if version != "" {
		doc["version_info"] = version
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

// ldsFile is an LDS DiscoveryResponse holding listeners.
func ldsFile(t testing.TB, version string, listeners ...listenerSpec) []byte {
	t.Helper()
	var rs []any
	for _, l := range listeners {
		ln := l.build(t)
		ln["@type"] = listenerType
		rs = append(rs, ln)
	}
	out, err := json.MarshalIndent(obj{"version_info": version, "type_url": listenerType, "resources": rs}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// endpoints are the backends' addresses.
func endpoints(bs []*envoyrun.Backend) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Addr)
	}
	return out
}

// envoyReady is how long these tests wait for an Envoy to be ready: V8
// compiles the 5 MB module first, which takes tens of seconds on a loaded
// two-core machine.
const envoyReady = 3 * time.Minute

// startEnvoy is envoyrun.Start with envoyReady.
func startEnvoy(t testing.TB, bin envoyrun.Binary, o envoyrun.Options) *envoyrun.Envoy {
	t.Helper()
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = envoyReady
	}
	return envoyrun.Start(t, bin, o)
}
