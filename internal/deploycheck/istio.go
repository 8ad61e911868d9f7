package deploycheck

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// resource is one Kubernetes manifest of a run.
type resource struct {
	file, kind, where string
	n                 *yaml.Node
}

func (r resource) spec() *yaml.Node { return get(r.n, "spec") }

// istioCheck is the state of checking the Istio manifests of a run.
type istioCheck struct {
	byKind map[string][]resource
	out    []Finding
}

func (c *istioCheck) add(p plugin, r resource, at *yaml.Node, path string, warning bool, format string, args ...any) {
	line := 0
	if at != nil {
		line = at.Line
	}
	c.out = append(c.out, Finding{File: r.file, Where: r.where, Path: path, Line: line,
		Problem: fmt.Sprintf(format, args...), Warning: warning, Plugin: p.item.Node})
}

// checkIstio holds every hashlb WasmPlugin and TrafficExtension of the run
// to the Istio resources given with it: those of the same files and of the
// others. Both kinds get the same checks; a TrafficExtension's Wasm fields
// are under spec.wasm (wasmFields).
func checkIstio(files []Named) []Finding {
	c := &istioCheck{byKind: map[string][]resource{}}
	type wasm struct {
		r resource
		p plugin
	}
	var plugs []wasm
	for _, f := range files {
		ps := plugins(f)
		for _, doc := range f.Docs {
			for _, m := range manifests(doc) {
				kind := str(get(m, "kind"))
				name := str(get(get(m, "metadata"), "name"))
				if ns := str(get(get(m, "metadata"), "namespace")); ns != "" {
					name = ns + "/" + name
				}
				r := resource{file: f.Name, kind: kind, where: kind + " " + name, n: m}
				c.byKind[kind] = append(c.byKind[kind], r)
				if p, ok := ps[m]; ok && (kind == "WasmPlugin" || kind == "TrafficExtension") {
					plugs = append(plugs, wasm{r, p})
				}
			}
		}
	}
	for _, w := range plugs {
		c.wasmPlugin(w.r, w.p)
	}
	for i, a := range plugs {
		for _, b := range plugs[i+1:] {
			c.twice(a.r, b.r, b.p)
		}
	}
	return c.out
}

// manifests lists a document's resources (a List's items too).
func manifests(doc *yaml.Node) []*yaml.Node {
	if get(doc, "apiVersion") == nil {
		return nil
	}
	if strings.HasSuffix(str(get(doc, "kind")), "List") && get(doc, "items") != nil {
		var out []*yaml.Node
		for _, it := range items(get(doc, "items")) {
			out = append(out, manifests(it)...)
		}
		return out
	}
	return []*yaml.Node{doc}
}

func (c *istioCheck) wasmPlugin(r resource, p plugin) {
	spec := r.spec()
	w, at := wasmFields(r.n)
	cfg := p.cfg
	typ := orDefault(str(get(w, "type")), "HTTP")
	switch {
	case typ == "NETWORK" && !cfg.Network():
		c.add(p, r, get(w, "type"), at+".type", false, "type NETWORK with filterType %s: a NETWORK plugin needs filterType network in its pluginConfig; or make it type HTTP", cfg.FilterType)
		return
	case typ != "NETWORK" && cfg.Network():
		c.add(p, r, w, at+".type", false, "type %s with filterType network: a filterType network configuration needs type NETWORK (before tcp_proxy); or remove filterType", typ)
		return
	}
	if str(get(w, "failStrategy")) == "FAIL_OPEN" {
		if cfg.Network() {
			c.add(p, r, get(w, "failStrategy"), at+".failStrategy", false, "failStrategy FAIL_OPEN: must be FAIL_CLOSE: a skipped NETWORK plugin lets tcp_proxy connect to the connection's own destination (ORIGINAL_DST)")
		} else {
			c.add(p, r, get(w, "failStrategy"), at+".failStrategy", false, "failStrategy FAIL_OPEN: must be FAIL_CLOSE: a skipped hashlb leaves requests unbalanced, and a client's own upstream header in place")
		}
	}
	if fl := cfg.Persistence; fl != nil && fl.Fleet != nil {
		if err := fl.Fleet.FilterProblem(); err != nil {
			c.add(p, r, w, at+".pluginConfig", false, "%v", err)
		} else {
			c.fleetCluster(r, p, fl.Fleet.Cluster)
		}
	}
	c.sessionKey(r, p, w, at)
	if why := c.onWaypoint(r); why != "" {
		c.waypoint(r, p, why)
		return
	}
	if cfg.Network() {
		return
	}
	selector := labels(get(get(spec, "selector"), "matchLabels"))
	for _, ef := range c.byKind["EnvoyFilter"] {
		for i, cp := range items(get(ef.spec(), "configPatches")) {
			if str(get(cp, "applyTo")) != "CLUSTER" {
				continue
			}
			path := fmt.Sprintf("spec.configPatches[%d]", i)
			tc := overrideHostIn(get(get(cp, "patch"), "value"))
			if tc == nil {
				continue
			}
			if efl := labels(get(get(ef.spec(), "workloadSelector"), "labels")); !maps.Equal(efl, selector) {
				c.add(p, ef, get(ef.spec(), "workloadSelector"), "spec.workloadSelector", false,
					"workloadSelector %v and the %s's selector %v differ: the header must be read where it is written; select the same workloads", efl, r.kind, selector)
			}
			var hs []string
			for _, s := range items(get(tc, "override_host_sources")) {
				if h := str(get(s, "header")); h != "" {
					hs = append(hs, h)
				}
			}
			if !slices.Contains(hs, cfg.UpstreamHeader) {
				c.add(p, ef, tc, path+".patch.value.load_balancing_policy", false,
					"override_host reads header %q, but the plugin (%s) writes upstreamHeader %q: make override_host_sources read %q", hs, r.where, cfg.UpstreamHeader, cfg.UpstreamHeader)
			}
			m := get(get(cp, "match"), "cluster")
			host, port := str(get(m, "service")), str(get(m, "portNumber"))
			if se, ok := c.serviceEntry(host); ok {
				c.endpoints(r, p, se, host, port, path, ef, m)
			}
			c.retries(r, p, host)
		}
	}
}

// serviceEntry returns the ServiceEntry whose hosts include host.
func (c *istioCheck) serviceEntry(host string) (resource, bool) {
	for _, se := range c.byKind["ServiceEntry"] {
		for _, h := range items(get(se.spec(), "hosts")) {
			if str(h) == host {
				return se, true
			}
		}
	}
	return resource{}, false
}

// endpoints checks that the ServiceEntry the EnvoyFilter patches has
// exactly the plugin's services as endpoints, on the patched port.
func (c *istioCheck) endpoints(r resource, p plugin, se resource, host, port, path string, ef resource, m *yaml.Node) {
	var portNode *yaml.Node
	for _, pn := range items(get(se.spec(), "ports")) {
		if str(get(pn, "number")) == port {
			portNode = pn
		}
	}
	if portNode == nil {
		c.add(p, ef, m, path+".match.cluster", false, "matches cluster %s:%s, not a port of %s (%s): use one of its ports", host, port, se.where, se.file)
		return
	}
	eps := map[string]bool{}
	for _, e := range items(get(se.spec(), "endpoints")) {
		pt := port
		if n := str(get(get(e, "ports"), str(get(portNode, "name")))); n != "" {
			pt = n
		}
		ip, err := netip.ParseAddr(str(get(e, "address")))
		n, perr := strconv.ParseUint(pt, 10, 16)
		if err != nil || perr != nil {
			continue
		}
		eps[netip.AddrPortFrom(ip, uint16(n)).String()] = true
	}
	at := get(se.spec(), "endpoints")
	for i, s := range p.cfg.Services {
		if !eps[s.Address] {
			c.add(p, se, at, "spec.endpoints", false, "services[%d] %q %s is not an endpoint of %s, so override_host would skip it (a service of %s): add it here or remove the service", i, s.Name, s.Address, host, r.where)
		}
		delete(eps, s.Address)
	}
	for _, a := range slices.Sorted(maps.Keys(eps)) {
		c.add(p, se, at, "spec.endpoints", false, "endpoint %s is not one of the services of %s (hashlb never chooses it): remove it or add the service", a, r.where)
	}
}

// retries checks the VirtualServices of host: every retry needs an
// address of the ranking.
func (c *istioCheck) retries(r resource, p plugin, host string) {
	for _, vs := range c.byKind["VirtualService"] {
		if !slices.ContainsFunc(items(get(vs.spec(), "hosts")), func(h *yaml.Node) bool { return str(h) == host }) {
			continue
		}
		for i, h := range items(get(vs.spec(), "http")) {
			a, err := strconv.Atoi(str(get(get(h, "retries"), "attempts")))
			if err == nil && a > 0 && a >= p.cfg.UpstreamCount {
				c.add(p, vs, get(h, "retries"), fmt.Sprintf("spec.http[%d].retries", i), false,
					"retries.attempts %d needs upstreamCount >= %d, %s has %d (later retries fall back to round robin)", a, a+1, r.where, p.cfg.UpstreamCount)
			}
		}
	}
}

// fleetCluster checks that persistence.fleet.cluster is the outbound
// cluster of a ServiceEntry of the run, whose port speaks HTTP (etcd's JSON
// gateway over HTTP/1.1). A run without ServiceEntries is not checked.
func (c *istioCheck) fleetCluster(r resource, p plugin, name string) {
	ses := c.byKind["ServiceEntry"]
	if len(ses) == 0 {
		return
	}
	w, wat := wasmFields(r.n)
	at := get(get(w, "pluginConfig"), "persistence")
	for _, se := range ses {
		for _, h := range items(get(se.spec(), "hosts")) {
			for i, pn := range items(get(se.spec(), "ports")) {
				if name != "outbound|"+str(get(pn, "number"))+"||"+str(h) {
					continue
				}
				if proto := str(get(pn, "protocol")); proto != "HTTP" {
					c.add(p, se, pn, fmt.Sprintf("spec.ports[%d]", i), false, "ServiceEntry %s port protocol %q: want HTTP (etcd's JSON gateway over HTTP/1.1, for persistence.fleet of %s)", str(get(get(se.n, "metadata"), "name")), proto, r.where)
				}
				return
			}
		}
	}
	hint := "name a ServiceEntry's outbound|PORT||HOST, or add a ServiceEntry for etcd (configs/istio/fleet/etcd-serviceentry.yaml)"
	for _, se := range ses {
		if hosts, ports := items(get(se.spec(), "hosts")), items(get(se.spec(), "ports")); len(hosts) > 0 && len(ports) > 0 && strings.Contains(se.where+str(hosts[0]), "etcd") {
			hint = fmt.Sprintf("Istio names the etcd cluster %q", "outbound|"+str(get(ports[0], "number"))+"||"+str(hosts[0]))
		}
	}
	c.add(p, r, at, wat+".pluginConfig.persistence.fleet.cluster", false, "persistence.fleet.cluster %q: no ServiceEntry given with it makes that cluster: %s", name, hint)
}

// overrideHostIn returns the override_host policy's typed_config in a
// cluster patch value, or nil.
func overrideHostIn(value *yaml.Node) *yaml.Node {
	oh, _ := overrideHost(located{n: value})
	return oh
}

// labels reads a string map.
func labels(m *yaml.Node) map[string]string {
	out := map[string]string{}
	m = deref(m)
	if m == nil || m.Kind != yaml.MappingNode {
		return out
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		out[m.Content[i].Value] = str(m.Content[i+1])
	}
	return out
}

// twice reports two hashlb plugins that Istio would both insert into the
// same filter chains: the same namespace, workloads, direction, ports and
// type. The second one strips the first one's header (a client's copy, to
// it) and decides again: persistence entries, active-request counts and
// round robin advance twice per request. A WasmPlugin and a
// TrafficExtension never replace each other: istiod turns each WasmPlugin
// into a TrafficExtension of its own, named NAME~istio-translated-wasmplugin
// (istio/istio pilot/pkg/config/kube/extensions/translate.go at 86c9f01),
// and applies both. The same kind and name is one resource, applied twice.
func (c *istioCheck) twice(a, b resource, p plugin) {
	if a.kind == b.kind && a.where == b.where || str(get(get(a.n, "metadata"), "namespace")) != str(get(get(b.n, "metadata"), "namespace")) {
		return
	}
	wa, _ := wasmFields(a.n)
	wb, _ := wasmFields(b.n)
	if orDefault(str(get(wa, "type")), "HTTP") != orDefault(str(get(wb, "type")), "HTTP") ||
		attachment(a) != attachment(b) || trafficMatch(a) != trafficMatch(b) {
		return
	}
	why := "both run, and hashlb decides twice per request (the second strips the first one's header and counts, persists and round-robins again): keep one of them"
	if a.kind != b.kind {
		why = "Istio runs both (it turns a WasmPlugin into a TrafficExtension of its own, it does not replace one), so hashlb decides twice per request: apply the WasmPlugin or the TrafficExtension, not both"
	}
	c.add(p, b, b.spec(), "spec", false, "%s and %s (%s) select the same workloads and traffic: %s", b.where, a.where, a.file, why)
}

// attachment says which proxies a plugin is on: its selector's labels or
// its targetRefs, in a comparable form.
func attachment(r resource) string {
	spec := r.spec()
	if refs := items(get(spec, "targetRefs")); len(refs) > 0 {
		var out []string
		for _, t := range refs {
			out = append(out, str(get(t, "group"))+"/"+str(get(t, "kind"))+"/"+str(get(t, "name")))
		}
		slices.Sort(out)
		return "targetRefs " + strings.Join(out, ",")
	}
	l := labels(get(get(spec, "selector"), "matchLabels"))
	var out []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		out = append(out, k+"="+l[k])
	}
	return "selector " + strings.Join(out, ",")
}

// trafficMatch is a plugin's match list (direction and ports) in a
// comparable form; "" (no match) is all traffic.
func trafficMatch(r resource) string {
	var out []string
	for _, m := range items(get(r.spec(), "match")) {
		mode := orDefault(str(get(m, "mode")), "CLIENT_AND_SERVER")
		var ports []string
		for _, pn := range items(get(m, "ports")) {
			ports = append(ports, str(get(pn, "number")))
		}
		slices.Sort(ports)
		out = append(out, mode+":"+strings.Join(ports, ","))
	}
	slices.Sort(out)
	return strings.Join(out, ";")
}

// waypointClass is the GatewayClass of Istio's waypoints
// (pilot/pkg/model/policyattachment.go at 86c9f01: a policy of the root
// namespace may target it).
const waypointClass = "istio-waypoint"

// onWaypoint says why a plugin is attached to an ambient waypoint, or "":
// its targetRefs name a Service or ServiceEntry (kinds Istio attaches to
// waypoints only), the waypoint GatewayClass, or a Gateway the run shows to
// be a waypoint (gatewayClassName istio-waypoint, or named by an
// istio.io/use-waypoint label). Istio attaches a policy with targetRefs
// by those alone, and ignores a waypoint policy's selector
// (policyattachment.go, ShouldAttachPolicy).
func (c *istioCheck) onWaypoint(r resource) string {
	for _, t := range items(get(r.spec(), "targetRefs")) {
		kind, name := str(get(t, "kind")), str(get(t, "name"))
		switch {
		case kind == "Service" || kind == "ServiceEntry":
			return fmt.Sprintf("targetRefs %s %s: a policy that targets a %s is attached to waypoints only", kind, name, kind)
		case kind == "GatewayClass" && name == waypointClass:
			return "targetRefs GatewayClass " + waypointClass
		case kind == "Gateway":
			for _, gw := range c.byKind["Gateway"] {
				if str(get(get(gw.n, "metadata"), "name")) == name && str(get(gw.spec(), "gatewayClassName")) == waypointClass {
					return fmt.Sprintf("targetRefs Gateway %s, of class %s (%s)", name, waypointClass, gw.file)
				}
			}
			for _, kind := range []string{"ServiceEntry", "Service"} {
				for _, o := range c.byKind[kind] {
					if labels(get(get(o.n, "metadata"), "labels"))[useWaypoint] == name {
						return fmt.Sprintf("targetRefs Gateway %s, the waypoint of %s (%s)", name, o.where, o.file)
					}
				}
			}
		}
	}
	return ""
}

// useWaypoint is the label that sends a service's traffic through a waypoint.
const useWaypoint = "istio.io/use-waypoint"

// waypoint checks a plugin on an ambient waypoint, from how Istio builds
// the waypoint (istio/istio at 86c9f01):
//   - extensions are inserted in its HTTP chains only, as inbound ones:
//     listener_waypoint.go, buildWaypointHTTPFilters, asks for
//     FilterChainTypeHTTP with ListenerClassSidecarInbound and no port, so
//     a NETWORK plugin, a match of mode CLIENT, or a match with ports never
//     applies (extensions.go, matchMode, matchPorts);
//   - its clusters (cluster_waypoint.go, buildWaypointInboundVIPCluster)
//     get no override_host policy and no use_http_header: the upstream
//     header is never read there. A ServiceEntry of resolution NONE gets an
//     ORIGINAL_DST cluster (cluster.go, convertResolution: a waypoint is
//     not a Router), which Envoy points at the filter state
//     envoy.network.transport_socket.original_dst_address before anything
//     else: hashlb's upstreamVia filterState.
func (c *istioCheck) waypoint(r resource, p plugin, why string) {
	spec := r.spec()
	w, at := wasmFields(r.n)
	if p.cfg.Network() {
		c.add(p, r, get(w, "type"), at+".type", false, "type NETWORK on a waypoint (%s): Istio inserts extensions only in a waypoint's HTTP chains; steer TCP from the clients' sidecars (configs/istio/tcp/)", why)
		return
	}
	for i, m := range items(get(spec, "match")) {
		if mode := str(get(m, "mode")); mode == "CLIENT" {
			c.add(p, r, m, fmt.Sprintf("spec.match[%d].mode", i), false, "match mode CLIENT on a waypoint (%s): Istio inserts extensions in a waypoint's inbound chains, where CLIENT never matches: remove match, or use mode SERVER", why)
		} else if len(items(get(m, "ports"))) > 0 {
			c.add(p, r, m, fmt.Sprintf("spec.match[%d].ports", i), false, "match ports on a waypoint (%s): Istio matches a waypoint's HTTP chains with no port, so a port list never matches: attach the plugin to the service instead (targetRefs ServiceEntry or Service)", why)
		}
	}
	if !p.cfg.ViaFilterState() {
		c.add(p, r, get(w, "pluginConfig"), at+".pluginConfig.upstreamVia", false,
			"upstreamVia header on a waypoint (%s): Istio gives a waypoint's clusters no override_host policy and no use_http_header, so nothing reads %q there: set upstreamVia filterState (and upstreamCount 1), for a ServiceEntry of resolution NONE", why, p.cfg.UpstreamHeader)
	}
	for _, t := range items(get(spec, "targetRefs")) {
		if str(get(t, "kind")) != "ServiceEntry" {
			continue
		}
		for _, se := range c.byKind["ServiceEntry"] {
			if str(get(get(se.n, "metadata"), "name")) == str(get(t, "name")) &&
				str(get(get(se.n, "metadata"), "namespace")) == str(get(get(r.n, "metadata"), "namespace")) {
				c.waypointService(r, p, se)
			}
		}
	}
}

// waypointService checks the ServiceEntry a waypoint plugin is attached to:
// traffic reaches the waypoint (istio.io/use-waypoint and an address for
// ztunnel to capture: Istio allocates none to resolution NONE,
// pilot/pkg/serviceregistry/ambient/services.go), its cluster is
// ORIGINAL_DST (resolution NONE), and its port is HTTP.
func (c *istioCheck) waypointService(r resource, p plugin, se resource) {
	spec := se.spec()
	if labels(get(get(se.n, "metadata"), "labels"))[useWaypoint] == "" {
		c.add(p, se, get(se.n, "metadata"), "metadata.labels", false, "no %s label: ztunnel sends this service's traffic to no waypoint, so %s never runs: label it with the waypoint's name", useWaypoint, r.where)
	}
	res := orDefault(str(get(spec, "resolution")), "NONE") // NONE is the default
	if res != "NONE" {
		c.add(p, se, get(spec, "resolution"), "spec.resolution", false, "resolution %s: a waypoint's cluster for it is not ORIGINAL_DST, so it ignores the address %s chooses: use resolution NONE, without endpoints", res, r.where)
	}
	if res == "NONE" && len(items(get(spec, "addresses"))) == 0 {
		c.add(p, se, spec, "spec.addresses", false, "no addresses: Istio allocates none to a ServiceEntry of resolution NONE, so ztunnel has no address to send to the waypoint: give it one (a VIP the clients call)")
	}
	for i, pn := range items(get(spec, "ports")) {
		if proto := str(get(pn, "protocol")); proto != "HTTP" && proto != "HTTP2" && proto != "GRPC" {
			c.add(p, se, pn, fmt.Sprintf("spec.ports[%d].protocol", i), false, "protocol %q: %s runs in the waypoint's HTTP chains only; declare the port HTTP", proto, r.where)
		}
		// A resolution NONE port's targetPort becomes the ORIGINAL_DST
		// cluster's upstream_port_override (serviceentry/conversion.go,
		// cluster_builder.go), which replaces the port of every address.
		if tp := get(pn, "targetPort"); tp != nil {
			c.add(p, se, tp, fmt.Sprintf("spec.ports[%d].targetPort", i), false, "targetPort %s: Istio makes it the ORIGINAL_DST cluster's upstream_port_override, which replaces the port of the address %s chooses: remove it", str(tp), r.where)
		}
	}
}
