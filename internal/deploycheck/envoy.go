package deploycheck

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/hashlb/hashlb/lbcore"
	"gopkg.in/yaml.v3"
)

// A Finding is a problem in a hashlb filter's surroundings: what is wrong,
// where (File, Where, Path, Line name the node to change) and what to change.
type Finding struct {
	File    string
	Where   string // the resource or plugin the node belongs to, as Item.Where names it
	Path    string // the node's path in its YAML document
	Line    int
	Problem string
	// Warning marks a finding that is worth changing but not unsafe.
	Warning bool
	// Plugin is the Item.Node of the configuration the finding is about, or
	// nil.
	Plugin *yaml.Node
}

// String is the finding as hashlb check prints it, after "FILE: WHERE: ".
func (f Finding) String() string {
	var b strings.Builder
	if f.Warning {
		b.WriteString("warning: ")
	}
	if f.Path != "" {
		b.WriteString(f.Path)
		if f.Line > 0 {
			fmt.Fprintf(&b, " (line %d)", f.Line)
		}
		b.WriteString(": ")
	}
	b.WriteString(f.Problem)
	return b.String()
}

// A Named is a scanned file and the name to report it by.
type Named struct {
	Name string
	*File
}

// Check holds every valid hashlb configuration of files to its
// surroundings: each Envoy configuration document on its own, the Istio
// manifests of all files together.
func Check(files []Named) []Finding {
	var out []Finding
	for _, f := range files {
		for _, doc := range f.Docs {
			if get(doc, "apiVersion") == nil {
				out = append(out, checkEnvoy(f, doc)...)
			}
		}
		for _, e := range f.Configs() {
			if e.Policy != nil {
				out = append(out, checkPolicy(f.Name, e)...)
			}
		}
	}
	out = append(out, checkIstio(files)...)
	return append(out, inlineKeys(files)...)
}

// plugins maps each configuration node of f to its Item and parsed
// configuration; invalid configurations are left out (their problems are
// reported on their own).
func plugins(f Named) map[*yaml.Node]plugin {
	out := map[*yaml.Node]plugin{}
	for _, it := range f.Configs() {
		if it.Node == nil || it.Policy != nil {
			continue
		}
		if cfg, problems := it.Parse(); problems == nil {
			out[it.Node] = plugin{it, cfg}
		}
	}
	return out
}

type plugin struct {
	item Item
	cfg  *lbcore.Config
}

// envoyCheck is the state of checking one Envoy configuration document.
type envoyCheck struct {
	file     string
	plugins  map[*yaml.Node]plugin
	clusters map[string]located
	// closed: a bootstrap without dynamic_resources, whose clusters are all
	// in the file; only then is a cluster it does not define missing.
	closed bool
	out    []Finding
}

// located is a node and its path.
type located struct {
	n    *yaml.Node
	path string
}

func (c *envoyCheck) add(p plugin, at located, warning bool, format string, args ...any) {
	line := 0
	if at.n != nil {
		line = at.n.Line
	}
	c.out = append(c.out, Finding{File: c.file, Where: p.item.Where, Path: at.path, Line: line,
		Problem: fmt.Sprintf(format, args...), Warning: warning, Plugin: p.item.Node})
}

func checkEnvoy(f Named, doc *yaml.Node) []Finding {
	c := &envoyCheck{file: f.Name, plugins: plugins(f), clusters: map[string]located{}}
	sr := get(doc, "static_resources")
	c.closed = sr != nil && get(doc, "dynamic_resources") == nil
	for i, cl := range items(get(sr, "clusters")) {
		c.clusters[str(get(cl, "name"))] = located{cl, fmt.Sprintf("static_resources.clusters[%d]", i)}
	}
	for i, l := range items(get(sr, "listeners")) {
		lp := fmt.Sprintf("static_resources.listeners[%d]", i)
		for j, fc := range items(get(l, "filter_chains")) {
			c.chain(get(fc, "filters"), fmt.Sprintf("%s.filter_chains[%d].filters", lp, j))
		}
		if dfc := get(l, "default_filter_chain"); dfc != nil {
			c.chain(get(dfc, "filters"), lp+".default_filter_chain.filters")
		}
	}
	return c.out
}

// chain checks the hashlb filters of one network filter chain.
func (c *envoyCheck) chain(filters *yaml.Node, path string) {
	list := items(filters)
	for k, f := range list {
		fp := fmt.Sprintf("%s[%d]", path, k)
		tc := get(f, "typed_config")
		switch str(get(tc, "@type")) {
		case hcmType:
			c.hcm(tc, fp+".typed_config")
		case netWasmType:
			if p, ok := c.plugins[get(tc, "config")]; ok {
				c.networkFilter(p, located{get(tc, "config"), fp + ".typed_config.config"}, list[k+1:], path, k)
			}
		}
	}
}

// networkFilter checks a hashlb network filter: a network configuration,
// failing closed, followed by tcp_proxy to an ORIGINAL_DST cluster.
func (c *envoyCheck) networkFilter(p plugin, at located, after []*yaml.Node, path string, k int) {
	cfg := p.cfg
	if !cfg.Network() {
		c.add(p, at, false, "filterType %s in a network filter (envoy.filters.network.wasm): a network filter needs filterType network in its configuration; or load it as envoy.filters.http.wasm in an http_connection_manager", cfg.FilterType)
		return
	}
	c.failOpen(p, at, true, "tcp_proxy would connect a connection hashlb did not steer to its own destination")
	c.healthCluster(p, at)
	if len(after) == 0 || str(get(get(after[len(after)-1], "typed_config"), "@type")) != tcpProxyType {
		c.add(p, located{at.n, path}, false, "%s must follow it as the last filter of the chain: it connects to the address hashlb sets", tcpProxyName)
		return
	}
	last := after[len(after)-1]
	lp := located{get(last, "typed_config"), fmt.Sprintf("%s[%d].typed_config", path, k+len(after))}
	name := str(get(lp.n, "cluster"))
	if name == "" {
		c.add(p, lp, false, "%s without one cluster (weighted clusters): each connection must go to one ORIGINAL_DST cluster, the one that reads hashlb's filter state", tcpProxyName)
		return
	}
	cl, ok := c.cluster(p, lp, name)
	if !ok {
		return
	}
	c.originalDstPolicy(p, cl, name)
}

// cluster returns the cluster name; a closed bootstrap without it is a
// finding at the node that names it.
func (c *envoyCheck) cluster(p plugin, from located, name string) (located, bool) {
	cl, ok := c.clusters[name]
	if !ok && c.closed {
		c.add(p, from, false, "cluster %q: no such cluster in static_resources.clusters: add it or name one that is there", name)
	}
	return cl, ok
}

// originalDstPolicy checks that cl is an ORIGINAL_DST cluster with its own
// load balancing.
func (c *envoyCheck) originalDstPolicy(p plugin, cl located, name string) {
	if typ := str(get(cl.n, "type")); typ != "ORIGINAL_DST" {
		c.add(p, cl, false, "cluster %s is %s: hashlb's filter state is read by an ORIGINAL_DST cluster only (needs an ORIGINAL_DST cluster, lb_policy CLUSTER_PROVIDED)", name, orDefault(typ, "STATIC"))
		return
	}
	if lb := str(get(cl.n, "lb_policy")); lb != "CLUSTER_PROVIDED" {
		c.add(p, cl, false, "ORIGINAL_DST needs lb_policy CLUSTER_PROVIDED, not %s", orDefault(lb, "ROUND_ROBIN"))
	}
}

// hcm checks the hashlb HTTP filters of one http_connection_manager and
// the clusters its routes lead to.
func (c *envoyCheck) hcm(hcm *yaml.Node, path string) {
	for m, hf := range items(get(hcm, "http_filters")) {
		tc := get(hf, "typed_config")
		cfgNode := get(tc, "config")
		if str(get(tc, "@type")) != wasmType {
			continue
		}
		p, ok := c.plugins[cfgNode]
		if !ok {
			continue
		}
		at := located{cfgNode, fmt.Sprintf("%s.http_filters[%d].typed_config.config", path, m)}
		cfg := p.cfg
		if cfg.Network() {
			c.add(p, at, false, "filterType network in an HTTP filter (envoy.filters.http.wasm): remove filterType (an HTTP filter is the default), or load it as envoy.filters.network.wasm before tcp_proxy")
			continue
		}
		c.healthCluster(p, at)
		if fl := cfg.Persistence; fl != nil && fl.Fleet != nil {
			if err := fl.Fleet.FilterProblem(); err != nil {
				c.add(p, at, false, "plugin %v", err)
			} else {
				c.fleetCluster(p, at, fl.Fleet.Cluster)
			}
		}
		c.sessionKey(p, at)
		c.clientAddress(p, hcm, path)
		originalDst := false
		for v, vh := range items(get(get(hcm, "route_config"), "virtual_hosts")) {
			for r, rt := range items(get(vh, "routes")) {
				route := get(rt, "route")
				name := str(get(route, "cluster"))
				if name == "" {
					continue
				}
				rp := located{route, fmt.Sprintf("%s.route_config.virtual_hosts[%d].routes[%d].route", path, v, r)}
				cl, ok := c.cluster(p, rp, name)
				if !ok {
					continue
				}
				originalDst = c.routedCluster(p, cl, name, rp) || originalDst
			}
		}
		why := "the client's own upstream header would reach the router"
		c.failOpen(p, at, originalDst, why)
	}
}

// routedCluster checks that the cluster a route leads to follows cfg's
// choice; it reports whether the cluster is ORIGINAL_DST.
func (c *envoyCheck) routedCluster(p plugin, cl located, name string, route located) bool {
	cfg := p.cfg
	if oh, ohPath := overrideHost(cl); oh != nil {
		ohAt := located{oh, cl.path + ohPath}
		var headers []string
		for _, s := range items(get(oh, "override_host_sources")) {
			if h := str(get(s, "header")); h != "" {
				headers = append(headers, h)
			}
		}
		if !slices.Contains(headers, cfg.UpstreamHeader) {
			c.add(p, ohAt, false, "override_host reads header %q, but the plugin writes upstreamHeader %q: make override_host_sources read %q", headers, cfg.UpstreamHeader, cfg.UpstreamHeader)
		}
		c.endpoints(p, cl, name)
		if n := numRetries(get(route.n, "retry_policy")); n >= 0 && n >= cfg.UpstreamCount {
			c.add(p, located{get(route.n, "retry_policy"), route.path + ".retry_policy"}, false,
				"num_retries %d needs upstreamCount >= %d, the plugin has %d (later retries fall back to round robin): lower num_retries or raise upstreamCount", n, n+1, cfg.UpstreamCount)
		}
		return false
	}
	typ := str(get(cl.n, "type"))
	if cfg.ViaFilterState() {
		if typ != "ORIGINAL_DST" {
			c.add(p, cl, false, "upstreamVia filterState needs an ORIGINAL_DST cluster: no other cluster reads %s", lbcore.OriginalDstFilterState)
			return false
		}
		c.originalDstPolicy(p, cl, name)
		return true
	}
	if typ != "ORIGINAL_DST" {
		c.add(p, cl, false, "cluster %s follows neither %s nor ORIGINAL_DST with use_http_header: Envoy would ignore the plugin's header; give it an override_host load_balancing_policy", name, overrideHostName)
		return false
	}
	od := get(cl.n, "original_dst_lb_config")
	odAt := located{od, cl.path + ".original_dst_lb_config"}
	if od == nil {
		odAt = cl
	}
	if str(get(od, "use_http_header")) != "true" {
		c.add(p, odAt, false, "ORIGINAL_DST without original_dst_lb_config.use_http_header: Envoy ignores the plugin's header; set use_http_header: true")
	}
	h := str(get(od, "http_header_name"))
	if h == "" {
		h = "x-envoy-original-dst-host" // Envoy's default for use_http_header
	}
	if !strings.EqualFold(h, cfg.UpstreamHeader) {
		c.add(p, odAt, false, "ORIGINAL_DST reads header %q, but the plugin writes upstreamHeader %q: set http_header_name: %s", h, cfg.UpstreamHeader, cfg.UpstreamHeader)
	}
	if lb := str(get(cl.n, "lb_policy")); lb != "CLUSTER_PROVIDED" {
		c.add(p, cl, false, "ORIGINAL_DST needs lb_policy CLUSTER_PROVIDED, not %s", orDefault(lb, "ROUND_ROBIN"))
	}
	if cfg.UpstreamCount != 1 {
		c.add(p, located{p.item.Node, ""}, false, "ORIGINAL_DST reads one address; the plugin's upstreamCount %d would write a list it cannot parse: set upstreamCount 1", cfg.UpstreamCount)
	}
	return true
}

// endpoints checks that the cluster's static endpoints are exactly the
// plugin's services.
func (c *envoyCheck) endpoints(p plugin, cl located, name string) {
	la := get(cl.n, "load_assignment")
	if la == nil {
		return // endpoints from EDS: not in the file
	}
	at := located{la, cl.path + ".load_assignment"}
	eps := map[string]bool{}
	for _, le := range items(get(la, "endpoints")) {
		for _, e := range items(get(le, "lb_endpoints")) {
			sa := get(get(get(e, "endpoint"), "address"), "socket_address")
			addr, port := str(get(sa, "address")), str(get(sa, "port_value"))
			if ip, err := netip.ParseAddr(addr); err == nil {
				if n, err := strconv.ParseUint(port, 10, 16); err == nil {
					eps[netip.AddrPortFrom(ip, uint16(n)).String()] = true
					continue
				}
			}
			eps[addr+":"+port] = true
		}
	}
	for i, s := range p.cfg.Services {
		if !eps[s.Address] {
			c.add(p, at, false, "services[%d] %q %s is not an endpoint of the cluster %s (override_host would skip it): add it to the cluster's endpoints or remove the service", i, s.Name, s.Address, name)
		}
		delete(eps, s.Address)
	}
	for _, a := range slices.Sorted(maps.Keys(eps)) {
		c.add(p, at, false, "endpoint %s is not one of the plugin's services (hashlb never chooses it): remove it or add the service", a)
	}
}

// failOpen reports fail_open: true (or failure_policy FAIL_OPEN): an error
// when a failed filter would let traffic go where hashlb did not choose
// (originalDst), else a warning.
func (c *envoyCheck) failOpen(p plugin, at located, originalDst bool, why string) {
	if str(get(at.n, "fail_open")) != "true" && str(get(at.n, "failure_policy")) != "FAIL_OPEN" {
		return
	}
	if originalDst {
		c.add(p, at, false, "fail_open: the filter must fail closed with an ORIGINAL_DST cluster (a failed hashlb would be skipped and %s): set fail_open: false", why)
		return
	}
	c.add(p, at, true, "fail_open: a failed hashlb would be skipped and requests balanced by the cluster's fallback instead; set fail_open: false")
}

// clientAddress warns when a configuration reads the client's address
// (source.address: an IP method, ${client.ip} or ${client.port}) behind an
// http_connection_manager that takes it from x-forwarded-for: without
// use_remote_address: true (and with no xff_num_trusted_hops), Envoy gives
// the filter the last address of the client's own x-forwarded-for as
// source.address (measured in Envoy 1.36.4 and 1.40.0, e2e/envoy's
// TestCorpusThroughEnvoy; conn_manager_utility.cc mutateRequestHeaders), so
// a client would choose its own key.
func (c *envoyCheck) clientAddress(p plugin, hcm *yaml.Node, path string) {
	if !p.cfg.Inputs().Source || str(get(hcm, "use_remote_address")) == "true" || str(get(hcm, "xff_num_trusted_hops")) != "" {
		return
	}
	c.add(p, located{hcm, path}, true, "use_remote_address is not true: Envoy then hands hashlb the last x-forwarded-for address as the client's (source.address), which the client can write, and with it every key hashlb makes of the client address: set use_remote_address: true on an edge proxy (or xff_num_trusted_hops for the proxies in front of it)")
}

// healthCluster checks that healthCheck.cluster exists.
func (c *envoyCheck) healthCluster(p plugin, at located) {
	if hc := p.cfg.HealthCheck; hc != nil && c.closed {
		if _, ok := c.clusters[hc.Cluster]; !ok {
			c.add(p, at, false, "plugin healthCheck.cluster %q: no such cluster in static_resources.clusters: add it (a cluster that reaches the services by the upstream header) or name one", hc.Cluster)
		}
	}
}

// fleetCluster checks persistence.fleet.cluster: it exists and speaks
// plain HTTP/1.1, as etcd's JSON gateway needs.
func (c *envoyCheck) fleetCluster(p plugin, at located, name string) {
	cl, ok := c.clusters[name]
	if !ok {
		if c.closed {
			c.add(p, at, false, "plugin persistence.fleet.cluster %q: no such cluster in static_resources.clusters: add a cluster whose endpoints are etcd's client ports (configs/envoy-fleet.yaml's hashlb_etcd)", name)
		}
		return
	}
	if get(cl.n, "http2_protocol_options") != nil || get(cl.n, "typed_extension_protocol_options") != nil {
		c.add(p, cl, false, "cluster %s (persistence.fleet): must speak plain HTTP/1.1 to etcd's JSON gateway (etcd takes HTTP/2 for gRPC): remove its protocol options", name)
	}
}

// overrideHost returns the cluster's override_host policy and its path.
func overrideHost(cl located) (*yaml.Node, string) {
	for i, pol := range items(get(get(cl.n, "load_balancing_policy"), "policies")) {
		tec := get(pol, "typed_extension_config")
		if tc := get(tec, "typed_config"); str(get(tc, "@type")) == overrideHostType {
			return tc, fmt.Sprintf(".load_balancing_policy.policies[%d].typed_extension_config.typed_config", i)
		}
	}
	return nil, ""
}

// numRetries is the route's num_retries (Envoy's default 1 with a retry
// policy), or -1 without one.
func numRetries(rp *yaml.Node) int {
	if rp == nil {
		return -1
	}
	n := get(rp, "num_retries")
	if n == nil {
		return 1
	}
	v, err := strconv.Atoi(str(n))
	if err != nil {
		return -1
	}
	return v
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// The Envoy names the checks follow.
const (
	hcmType          = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	tcpProxyType     = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
	tcpProxyName     = "envoy.filters.network.tcp_proxy"
	overrideHostType = "type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost"
	overrideHostName = "envoy.load_balancing_policies.override_host"
)
