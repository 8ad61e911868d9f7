package envoy

// The bootstrap builder: every Envoy configuration a test of this package
// starts, and every file it feeds Envoy (ECDS, LDS, EDS), is built here from
// go-control-plane's typed configuration and marshalled with protojson
// (doc.go says why). The shipped files (envoy.yaml, configs/envoy-*.yaml)
// are started as written elsewhere; shipped_test.go holds the builder's
// shapes of them to the files themselves.

import (
	"net"
	"strconv"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	dynmodv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/dynamic_modules/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	wasmhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	wasmnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/wasm/v3"
	dynlbv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/dynamic_modules/v3"
	overridehostv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/hashlb/hashlb/internal/atomicfile"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// upstreamHeader is the header hashlb writes its choice to and override_host
// and ORIGINAL_DST read (envoy.yaml's).
const upstreamHeader = "x-envoy-original-dst-host"

// cluster is a cluster of a bootstrap.
type cluster = clusterv3.Cluster

// any packs m; every message here is a known type, so it cannot fail.
func anyOf(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

// sockAddr is an Envoy Address for host:port.
func sockAddr(t testing.TB, hostport string) *corev3.Address {
	t.Helper()
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatalf("address %q: %v", hostport, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("address %q: %v", hostport, err)
	}
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: h, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)}}}}
}

// wasmPlugin is the Wasm filter's PluginConfig as envoy.yaml writes it
// (name and vm_id hashlb, V8, dist/hashlb.wasm, fail_open false), with
// rootID as root_id ("" leaves it unset) and config as hashlb's JSON.
func wasmPlugin(rootID string, config []byte) *wasmv3.PluginConfig {
	return pluginOf("hashlb", rootID, "hashlb", "dist/hashlb.wasm", string(config))
}

// pluginOf is a PluginConfig in V8 of module file, fail_open false.
func pluginOf(name, rootID, vmID, file, config string) *wasmv3.PluginConfig {
	return &wasmv3.PluginConfig{
		Name: name, RootId: rootID,
		Vm: &wasmv3.PluginConfig_VmConfig{VmConfig: &wasmv3.VmConfig{
			VmId: vmID, Runtime: "envoy.wasm.runtime.v8",
			Code: &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Local{Local: &corev3.DataSource{
				Specifier: &corev3.DataSource_Filename{Filename: file}}}},
		}},
		Configuration: anyOf(wrapperspb.String(config)),
	}
}

// wasmHTTP is the HTTP Wasm filter running p.
func wasmHTTP(p *wasmv3.PluginConfig) *hcmv3.HttpFilter {
	return httpFilter("envoy.filters.http.wasm", &wasmhttpv3.Wasm{Config: p})
}

// ecdsHTTP is an HTTP Wasm filter named name whose configuration comes
// from the ECDS file path (config_discovery with a path_config_source, as
// configs/envoy-ecds.yaml).
func ecdsHTTP(name, path string) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_ConfigDiscovery{ConfigDiscovery: &corev3.ExtensionConfigSource{
		ConfigSource: fileSource(path),
		TypeUrls:     []string{"type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"},
	}}}
}

// httpFilter is the HTTP filter name configured by m.
func httpFilter(name string, m proto.Message) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: anyOf(m)}}
}

// fileSource is a V3 path_config_source on path.
func fileSource(path string) *corev3.ConfigSource {
	return &corev3.ConfigSource{ResourceApiVersion: corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_PathConfigSource{PathConfigSource: &corev3.PathConfigSource{Path: path}}}
}

// routeAll is a route configuration named name whose one virtual host
// (vhost) sends every request to cluster.
func routeAll(name, vhost, cluster string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{
		Name: vhost, Domains: []string{"*"}, Routes: []*routev3.Route{routeTo(cluster, nil)},
	}}}
}

// pathPrefix matches the requests whose path starts with p.
func pathPrefix(p string) *routev3.RouteMatch {
	return &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: p}}
}

// routeTo is a route of the requests match selects (nil: every path) to
// cluster.
func routeTo(cluster string, match *routev3.RouteMatch) *routev3.Route {
	if match == nil {
		match = pathPrefix("/")
	}
	return &routev3.Route{Match: match, Action: &routev3.Route_Route{Route: &routev3.RouteAction{
		ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}}}
}

// hashOnPath is a route's hash policy on the :path pseudo-header: what a
// user of Envoy's own consistent hashing (ring_hash, Maglev) writes for URL
// affinity (URLHASH's input).
func hashOnPath() []*routev3.RouteAction_HashPolicy {
	return []*routev3.RouteAction_HashPolicy{{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{
		Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: ":path"}}}}
}

// shippedRetries is envoy.yaml's retry policy: two retries on a failed
// connection, a reset or a 5xx.
func shippedRetries() *routev3.RetryPolicy {
	return &routev3.RetryPolicy{RetryOn: "connect-failure,refused-stream,reset,5xx", NumRetries: wrapperspb.UInt32(2)}
}

// otherHostRetries retries a 5xx up to 3 times, each on a host not tried
// before (the previous_hosts predicate).
func otherHostRetries() *routev3.RetryPolicy {
	return &routev3.RetryPolicy{RetryOn: "5xx", NumRetries: wrapperspb.UInt32(3), HostSelectionRetryMaxAttempts: 5,
		RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{{Name: "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: anyOf(&previoushostsv3.PreviousHostsPredicate{})}}}}
}

// retryRoutes sets p on every route of rc.
func retryRoutes(rc *routev3.RouteConfiguration, p *routev3.RetryPolicy) *routev3.RouteConfiguration {
	for _, vh := range rc.VirtualHosts {
		for _, r := range vh.Routes {
			r.GetRoute().RetryPolicy = proto.Clone(p).(*routev3.RetryPolicy)
		}
	}
	return rc
}

// connManager is an HTTP connection manager with stat prefix stat, routes
// rc and filters, then the router.
func connManager(stat string, rc *routev3.RouteConfiguration, filters ...*hcmv3.HttpFilter) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		StatPrefix:     stat,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc},
		HttpFilters:    append(filters, httpFilter("envoy.filters.http.router", &routerv3.Router{})),
	}
}

// netFilter is the network filter name configured by m.
func netFilter(name string, m proto.Message) *listenerv3.Filter {
	return &listenerv3.Filter{Name: name, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: anyOf(m)}}
}

// hcmFilter is the network filter running h.
func hcmFilter(h *hcmv3.HttpConnectionManager) *listenerv3.Filter {
	return netFilter("envoy.filters.network.http_connection_manager", h)
}

// wasmNet is the network Wasm filter running p.
func wasmNet(p *wasmv3.PluginConfig) *listenerv3.Filter {
	return netFilter("envoy.filters.network.wasm", &wasmnetv3.Wasm{Config: p})
}

// tcpProxy proxies a connection to cluster.
func tcpProxy(stat, cluster string) *listenerv3.Filter {
	return netFilter("envoy.filters.network.tcp_proxy", &tcpproxyv3.TcpProxy{StatPrefix: stat,
		ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: cluster}})
}

// listenerOn is a listener named name on addrs (the first its address, the
// others additional_addresses) with one filter chain of filters.
func listenerOn(t testing.TB, name string, addrs []string, filters ...*listenerv3.Filter) *listenerv3.Listener {
	t.Helper()
	l := &listenerv3.Listener{Name: name, Address: sockAddr(t, addrs[0]),
		FilterChains: []*listenerv3.FilterChain{{Filters: filters}}}
	for _, a := range addrs[1:] {
		l.AdditionalAddresses = append(l.AdditionalAddresses, &listenerv3.AdditionalAddress{Address: sockAddr(t, a)})
	}
	return l
}

// loopback is a listener or admin address on a port the kernel picks.
var loopback = []string{"127.0.0.1:0"}

// lbEndpoint is an endpoint at addr.
func lbEndpoint(t testing.TB, addr string) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: sockAddr(t, addr)}}}
}

// staticCluster is a STATIC cluster named name of endpoints addrs, with a
// connect timeout of 1 s and Envoy's default balancing (round robin).
func staticCluster(t testing.TB, name string, addrs ...string) *cluster {
	t.Helper()
	var eps []*endpointv3.LbEndpoint
	for _, a := range addrs {
		eps = append(eps, lbEndpoint(t, a))
	}
	return &cluster{Name: name, ConnectTimeout: durationpb.New(time.Second),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: eps}}}}
}

// overrideHostCluster is envoy.yaml's hashlb_upstream without its outlier
// detection: a STATIC cluster of endpoints with the override_host policy
// on the upstream header and round robin as its fallback.
func overrideHostCluster(t testing.TB, name string, endpoints []string) *cluster {
	t.Helper()
	c := staticCluster(t, name, endpoints...)
	c.LoadBalancingPolicy = overrideHostPolicy()
	return c
}

// overrideHostPolicy is envoy.yaml's load_balancing_policy.
func overrideHostPolicy() *clusterv3.LoadBalancingPolicy {
	rr := &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{{TypedExtensionConfig: &corev3.TypedExtensionConfig{
		Name: "envoy.load_balancing_policies.round_robin", TypedConfig: anyOf(&roundrobinv3.RoundRobin{})}}}}
	return &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{{TypedExtensionConfig: &corev3.TypedExtensionConfig{
		Name: "envoy.load_balancing_policies.override_host",
		TypedConfig: anyOf(&overridehostv3.OverrideHost{
			OverrideHostSources: []*overridehostv3.OverrideHost_OverrideHostSource{{Header: upstreamHeader}},
			FallbackPolicy:      rr,
		}),
	}}}}
}

// shippedOutlier is envoy.yaml's outlier detection.
func shippedOutlier() *clusterv3.OutlierDetection {
	return &clusterv3.OutlierDetection{Consecutive_5Xx: wrapperspb.UInt32(5), BaseEjectionTime: durationpb.New(30 * time.Second)}
}

// originalDstCluster is configs/envoy-original-dst.yaml's hashlb_upstream:
// the destination is the header's address.
func originalDstCluster(name string) *cluster {
	return &cluster{Name: name, ConnectTimeout: durationpb.New(time.Second),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST},
		LbPolicy:             clusterv3.Cluster_CLUSTER_PROVIDED,
		LbConfig: &clusterv3.Cluster_OriginalDstLbConfig_{OriginalDstLbConfig: &clusterv3.Cluster_OriginalDstLbConfig{
			UseHttpHeader: true, HttpHeaderName: upstreamHeader}}}
}

// edsCluster is an EDS cluster whose endpoints come from the file path.
func edsCluster(name, path string) *cluster {
	return &cluster{Name: name, ConnectTimeout: durationpb.New(time.Second),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: fileSource(path)}}
}

// fastHealthCheck is an active HTTP health check of /healthz every 100 ms,
// one answer enough to change a host's state.
func fastHealthCheck() *corev3.HealthCheck {
	tenth := durationpb.New(100 * time.Millisecond)
	return &corev3.HealthCheck{Timeout: durationpb.New(time.Second), Interval: tenth, NoTrafficInterval: tenth,
		UnhealthyThreshold: wrapperspb.UInt32(1), HealthyThreshold: wrapperspb.UInt32(1),
		HealthChecker: &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &corev3.HealthCheck_HttpHealthCheck{Path: "/healthz"}}}
}

// policyBalancing is a cluster's load_balancing_policy: the dynamic module
// lib<module>.so (the policy's is envoyrun.LBPolicyName) with config, its
// JSON.
func policyBalancing(module, config string) *clusterv3.LoadBalancingPolicy {
	return &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{{TypedExtensionConfig: &corev3.TypedExtensionConfig{
		Name: "hashlb",
		TypedConfig: anyOf(&dynlbv3.DynamicModulesLoadBalancerConfig{
			DynamicModuleConfig: &dynmodv3.DynamicModuleConfig{Name: module, DoNotClose: true},
			LbPolicyName:        "hashlb",
			LbPolicyConfig:      anyOf(wrapperspb.String(config)),
		}),
	}}}}
}

// headerIs matches the requests whose header name is value.
func headerIs(name, value string) *routev3.RouteMatch {
	m := pathPrefix("/")
	m.Headers = []*routev3.HeaderMatcher{{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{
		StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: value}}}}}
	return m
}

// hashlbEndpoint is one endpoint of an EDS file: its address, priority,
// load-balancing weight (0 leaves it out) and hashlb metadata (name and
// hashId; "" leaves each out).
type hashlbEndpoint struct {
	addr         string
	prio, weight int
	name, hashID string
}

// edsFile is the EDS file of cluster name: a DiscoveryResponse of one
// ClusterLoadAssignment; endpoints of one priority are consecutive in eps.
func edsFile(t testing.TB, name string, eps []hashlbEndpoint) []byte {
	t.Helper()
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	for i, ep := range eps {
		if i == 0 || ep.prio != eps[i-1].prio {
			cla.Endpoints = append(cla.Endpoints, &endpointv3.LocalityLbEndpoints{Priority: uint32(ep.prio)})
		}
		e := lbEndpoint(t, ep.addr)
		if ep.weight > 0 {
			e.LoadBalancingWeight = wrapperspb.UInt32(uint32(ep.weight))
		}
		md := map[string]any{}
		if ep.name != "" {
			md["name"] = ep.name
		}
		if ep.hashID != "" {
			md["hashId"] = ep.hashID
		}
		if len(md) > 0 {
			s, err := structpb.NewStruct(md)
			if err != nil {
				t.Fatal(err)
			}
			e.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"hashlb": s}}
		}
		last := cla.Endpoints[len(cla.Endpoints)-1]
		last.LbEndpoints = append(last.LbEndpoints, e)
	}
	return discovery(t, "", cla)
}

// discovery is a DiscoveryResponse holding resources (all of one type), the
// file a path_config_source reads; version is its version_info ("" leaves
// it out: Envoy reports it as the resource's version).
func discovery(t testing.TB, version string, resources ...proto.Message) []byte {
	t.Helper()
	d := &discoveryv3.DiscoveryResponse{VersionInfo: version}
	for _, r := range resources {
		a := anyOf(r)
		d.TypeUrl = a.TypeUrl
		d.Resources = append(d.Resources, a)
	}
	return marshal(t, d)
}

// ecdsFile is the ECDS file hashlb-controller writes for a WasmPlugin named
// name (cmd/hashlb-controller/controller/ecds.go, ECDS.Resource): one
// TypedExtensionConfig whose Wasm filter (wasmPlugin) carries config,
// hashlb's JSON.
func ecdsFile(t testing.TB, name, version string, config []byte) []byte {
	t.Helper()
	return ecdsPlugin(t, name, version, wasmPlugin("", config))
}

// ecdsPlugin is an ECDS file of one TypedExtensionConfig named name whose
// Wasm filter runs p.
func ecdsPlugin(t testing.TB, name, version string, p *wasmv3.PluginConfig) []byte {
	t.Helper()
	return discovery(t, version, &corev3.TypedExtensionConfig{Name: name, TypedConfig: anyOf(&wasmhttpv3.Wasm{Config: p})})
}

// ldsFile is an LDS file holding listeners.
func ldsFile(t testing.TB, version string, listeners ...listenerSpec) []byte {
	t.Helper()
	var ms []proto.Message
	for _, l := range listeners {
		ms = append(ms, l.build(t))
	}
	return discovery(t, version, ms...)
}

// marshal renders m as the JSON Envoy reads (as YAML), with the field
// names of the .proto files (snake_case, as the shipped files write them).
func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	out, err := protojson.MarshalOptions{Multiline: true, Indent: " ", UseProtoNames: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

// listenerSpec is one HTTP listener in front of hashlb: the Wasm filter,
// inline or from an ECDS file, and a route to one cluster.
type listenerSpec struct {
	name string
	// addrs are the listener's addresses (nil: loopback): the first is its
	// address, the others additional_addresses.
	addrs []string
	// Inline plugin: rootID and config (hashlb's JSON).
	rootID string
	config []byte
	// ecdsPath, when set, takes the Wasm filter from that ECDS file
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
	// raisedLimits: raiseLimits.
	raisedLimits bool
}

func (l listenerSpec) build(t testing.TB) *listenerv3.Listener {
	t.Helper()
	wasm := wasmHTTP(wasmPlugin(l.rootID, l.config))
	if l.ecdsPath != "" {
		wasm = ecdsHTTP(l.ecdsName, l.ecdsPath)
	}
	rc := routeAll(l.name, l.name, l.cluster)
	if l.retries {
		retryRoutes(rc, shippedRetries())
	}
	hcm := connManager(l.name, rc, wasm)
	if l.useRemoteAddress {
		hcm.UseRemoteAddress = wrapperspb.Bool(true)
	}
	if l.customMethods {
		hcm.HttpProtocolOptions = &corev3.Http1ProtocolOptions{AllowCustomMethods: true}
	}
	if l.raisedLimits {
		raiseLimits(hcm)
	}
	addrs := l.addrs
	if addrs == nil {
		addrs = loopback
	}
	ln := listenerOn(t, l.name, addrs, hcmFilter(hcm))
	// Its stats are listener.<name>.*, per worker
	// listener.<name>.worker_<n>.*, whatever port the kernel chose.
	ln.StatPrefix = l.name
	return ln
}

// editHCM changes the HTTP connection manager of listener l with fn.
func editHCM(t testing.TB, l *listenerv3.Listener, fn func(*hcmv3.HttpConnectionManager)) {
	t.Helper()
	for _, f := range l.GetFilterChains()[0].GetFilters() {
		h := &hcmv3.HttpConnectionManager{}
		if tc := f.GetTypedConfig(); tc.MessageIs(h) {
			if err := tc.UnmarshalTo(h); err != nil {
				t.Fatal(err)
			}
			fn(h)
			f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: anyOf(h)}
			return
		}
	}
	t.Fatalf("listener %s: no HTTP connection manager", l.Name)
}

// editPlugin changes the plugin of the HTTP Wasm filter of listener l with
// fn.
func editPlugin(t testing.TB, l *listenerv3.Listener, fn func(*wasmv3.PluginConfig)) {
	t.Helper()
	editHCM(t, l, func(h *hcmv3.HttpConnectionManager) {
		for _, f := range h.HttpFilters {
			w := &wasmhttpv3.Wasm{}
			if tc := f.GetTypedConfig(); tc.MessageIs(w) {
				if err := tc.UnmarshalTo(w); err != nil {
					t.Fatal(err)
				}
				fn(w.Config)
				f.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: anyOf(w)}
				return
			}
		}
		t.Fatalf("listener %s: no Wasm filter", l.Name)
	})
}

// raiseLimits sets Envoy's maxima for a request's headers:
// max_request_headers_kb 8192 and max_headers_count 10000.
func raiseLimits(hcm *hcmv3.HttpConnectionManager) {
	hcm.MaxRequestHeadersKb = wrapperspb.UInt32(8192)
	hcm.CommonHttpProtocolOptions = &corev3.HttpProtocolOptions{MaxHeadersCount: wrapperspb.UInt32(10000)}
}

// bootstrap is a whole Envoy bootstrap: the admin on a free loopback port,
// the node a file subscription needs, static listeners (hashlb's, then any
// other) and clusters, and, when ldsPath is set, listeners from that file.
type bootstrap struct {
	listeners []listenerSpec
	other     []*listenerv3.Listener
	clusters  []*cluster
	ldsPath   string
	// edit, when set, changes the bootstrap last.
	edit func(*bootstrapv3.Bootstrap)
}

func (b bootstrap) proto(t testing.TB) *bootstrapv3.Bootstrap {
	t.Helper()
	out := &bootstrapv3.Bootstrap{
		// A file subscription (ECDS, LDS, EDS) needs the node's id and
		// cluster: without them Envoy refuses the bootstrap ("node 'id'
		// and 'cluster' are required").
		Node:            &corev3.Node{Id: "hashlb-test", Cluster: "hashlb-test"},
		Admin:           &bootstrapv3.Admin{Address: sockAddr(t, loopback[0])},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: b.clusters},
	}
	for _, l := range b.listeners {
		out.StaticResources.Listeners = append(out.StaticResources.Listeners, l.build(t))
	}
	out.StaticResources.Listeners = append(out.StaticResources.Listeners, b.other...)
	if b.ldsPath != "" {
		out.DynamicResources = &bootstrapv3.Bootstrap_DynamicResources{LdsConfig: fileSource(b.ldsPath)}
	}
	if b.edit != nil {
		b.edit(out)
	}
	return out
}

// yaml is the bootstrap as Envoy reads it, checked against the protos'
// validation rules first (a wrong value fails here, named, rather than as
// Envoy's refusal).
func (b bootstrap) yaml(t testing.TB) []byte {
	t.Helper()
	p := b.proto(t)
	if err := p.ValidateAll(); err != nil {
		t.Fatalf("the bootstrap built: %v", err)
	}
	return marshal(t, p)
}

// writeAtomic replaces path with data as hashlb-controller -ecds-dir does
// (ECDS.Write, through internal/atomicfile): a temporary file in the same
// directory, synced, renamed over the old one. Envoy's path_config_source
// watches the directory for the rename (a moved-to event) and reloads the
// file.
func writeAtomic(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := atomicfile.Write(path, data); err != nil {
		t.Fatal(err)
	}
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
// two-core machine and minutes with several Envoys compiling at once beside
// other work. A ceiling for a stuck Envoy, not a promise: the package's
// timeout leaves room for it.
const envoyReady = 10 * time.Minute

// startEnvoy is envoyrun.Start with envoyReady.
func startEnvoy(t testing.TB, bin envoyrun.Binary, o envoyrun.Options) *envoyrun.Envoy {
	t.Helper()
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = envoyReady
	}
	return envoyrun.Start(t, bin, o)
}
