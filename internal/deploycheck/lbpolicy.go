package deploycheck

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/hashlb/hashlb/internal/lbpolicy"
	"gopkg.in/yaml.v3"
)

// The Envoy types the load-balancing policy is configured with.
const (
	dynamicModulesLBType = "type.googleapis.com/envoy.extensions.load_balancing_policies.dynamic_modules.v3.DynamicModulesLoadBalancerConfig"
	clusterType          = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	claType              = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// A Policy is hashlb's load-balancing policy on a cluster, and the
// cluster's hosts as the policy sees them (every priority's, priority 0's
// first, each level in Envoy's order).
type Policy struct {
	// Cluster is the cluster's name.
	Cluster string
	// Hosts are the hosts of every priority, the lowest first, each
	// level's in the order Envoy holds them; Priority is each one's level;
	// Down marks those whose EDS health_status Envoy does not count healthy
	// (UNHEALTHY, DRAINING, TIMEOUT, and DEGRADED, which the policy does not
	// choose either).
	Hosts    []lbpolicy.HostInfo
	Priority []int
	Down     []bool
	// From says where the hosts were read: "load_assignment" or "EDS file
	// PATH".
	From string
	// Unknown, when set, says why the hosts cannot be known from the files
	// (an EDS server, host names Envoy resolves); Hosts is then empty.
	Unknown string

	cluster  located // the cluster, and its path in its document
	policy   located // the policy's typed_config
	index    int     // its place in load_balancing_policy.policies
	patch    bool    // an EnvoyFilter patch's: health is the DestinationRule's, not the patch's
	findings []Finding
}

// Serving is the priority the policy serves (the lowest with a host not
// Down), or -1 when none has one.
func (p *Policy) Serving() int {
	best := -1
	for i, down := range p.Down {
		if !down && (best < 0 || p.Priority[i] < best) {
			best = p.Priority[i]
		}
	}
	return best
}

// ParsePolicy validates a load-balancing policy's configuration as the
// module does (internal/lbpolicy.ParseConfig), every problem one line.
func (e *Item) ParsePolicy() (*lbpolicy.Policy, []string) {
	if e.Problem != "" {
		return nil, []string{e.Problem}
	}
	p, err := lbpolicy.ParseConfig(e.Data)
	if err != nil {
		return nil, strings.Split(err.Error(), "\n")
	}
	return p, nil
}

// policies finds hashlb's load-balancing policies on the clusters of one
// Envoy document: static_resources.clusters, a discovery response's
// Cluster resources, or a document that is one Cluster. dir is the
// directory of the file, for EDS files named relative to it.
func (src *File) policies(root *yaml.Node, dir string) (seen int) {
	var clusters []located
	for i, cl := range items(get(get(root, "static_resources"), "clusters")) {
		clusters = append(clusters, located{cl, fmt.Sprintf("static_resources.clusters[%d]", i)})
	}
	for i, r := range items(get(root, "resources")) {
		if str(get(r, "@type")) == clusterType {
			clusters = append(clusters, located{r, fmt.Sprintf("resources[%d]", i)})
		}
	}
	if get(root, "load_balancing_policy") != nil && get(root, "name") != nil {
		clusters = append(clusters, located{root, ""})
	}
	for _, cl := range clusters {
		seen += src.clusterPolicy(cl, dir)
	}
	return seen
}

// clusterPolicy adds the hashlb policy of one cluster, if it has one.
func (src *File) clusterPolicy(cl located, dir string) (seen int) {
	return src.policyOf(cl, str(get(cl.n, "name")), dir, "")
}

// patchPolicy adds the hashlb policy an EnvoyFilter's CLUSTER patch (patch,
// the i-th of the resource where) merges into the clusters it matches, if
// it sets one. The cluster is named as istiod names the one the match
// selects (outbound|PORT||SERVICE); its hosts are the endpoints istiod
// sends, and its health settings the DestinationRule's, neither of them in
// the patch.
func (src *File) patchPolicy(patch *yaml.Node, i int, where string) (seen int) {
	m := get(get(patch, "match"), "cluster")
	name := str(get(m, "name"))
	if name == "" {
		name = fmt.Sprintf("outbound|%s|%s|%s", str(get(m, "portNumber")), str(get(m, "subset")), orDefault(str(get(m, "service")), "*"))
	}
	at := located{get(get(patch, "patch"), "value"), fmt.Sprintf("spec.configPatches[%d].patch.value", i)}
	return src.policyOf(at, name, "", fmt.Sprintf("%s, patch %d, ", where, i))
}

// policyOf adds the hashlb policy of the cluster cl named name; prefix,
// when set, begins each Item's Where and makes cl an EnvoyFilter patch's
// value (patchPolicy).
func (src *File) policyOf(cl located, name, dir, prefix string) (seen int) {
	for i, pol := range items(get(get(cl.n, "load_balancing_policy"), "policies")) {
		tec := get(pol, "typed_extension_config")
		tc := get(tec, "typed_config")
		if str(get(tc, "@type")) != dynamicModulesLBType {
			continue
		}
		seen++
		dmc := get(tc, "dynamic_module_config")
		where := fmt.Sprintf("%scluster %s, load-balancing policy %s", prefix, name, orDefault(str(get(tec, "name")), strconv.Itoa(i)))
		if !mentionsHashlb(str(get(tec, "name")), str(get(tc, "lb_policy_name")), str(get(dmc, "name")),
			str(get(get(get(dmc, "module"), "local"), "filename"))) {
			src.skip(where + ": a dynamic-module load-balancing policy, not hashlb's (neither its name, lb_policy_name nor module mentions hashlb)")
			continue
		}
		at := fmt.Sprintf("%s.load_balancing_policy.policies[%d].typed_extension_config.typed_config", cl.path, i)
		at = strings.TrimPrefix(at, ".")
		p := &Policy{Cluster: name, cluster: cl, policy: located{tc, at}, index: i, patch: prefix != ""}
		e := Item{Where: where, Node: tc, Policy: p}
		switch c := get(tc, "lb_policy_config"); {
		case c == nil:
			e.Data = []byte{}
		case str(get(c, "@type")) != stringValueType:
			e.Problem = fmt.Sprintf("lb_policy_config (line %d): @type %q; hashlb reads its JSON from a %s", c.Line, str(get(c, "@type")), stringValueType)
		case get(c, "value") == nil:
			e.Data = []byte{}
		case get(c, "value").Kind != yaml.ScalarNode || get(c, "value").ShortTag() != "!!str":
			e.Problem = fmt.Sprintf("lb_policy_config.value (line %d): a %s, not a string holding hashlb's JSON", get(c, "value").Line, kindName(get(c, "value")))
		default:
			e.Data = []byte(get(c, "value").Value)
		}
		if p.patch {
			p.Unknown = "its hosts are the endpoints istiod sends the cluster the patch matches"
		} else {
			p.readHosts(dir)
		}
		src.Items = append(src.Items, e)
	}
	return seen
}

// addFinding records a finding about the policy's surroundings.
func (p *Policy) addFinding(at located, warning bool, format string, args ...any) {
	line := 0
	if at.n != nil {
		line = at.n.Line
	}
	p.findings = append(p.findings, Finding{Path: at.path, Line: line, Problem: fmt.Sprintf(format, args...), Warning: warning})
}

// readHosts reads the cluster's hosts: its load_assignment, or the
// ClusterLoadAssignment of its EDS file.
func (p *Policy) readHosts(dir string) {
	cl := p.cluster
	if la := get(cl.n, "load_assignment"); la != nil {
		p.From = "load_assignment"
		p.assignment(located{la, join(cl.path, "load_assignment")})
		return
	}
	ecc := get(cl.n, "eds_cluster_config")
	ec := get(ecc, "eds_config")
	file := str(get(get(ec, "path_config_source"), "path"))
	if file == "" {
		file = str(get(ec, "path"))
	}
	switch {
	case ecc == nil:
		p.Unknown = "the cluster has neither load_assignment nor eds_cluster_config"
		return
	case file == "":
		p.Unknown = "its hosts come from an EDS server (eds_config), not from a file"
		return
	}
	at := located{get(ec, "path_config_source"), join(cl.path, "eds_cluster_config.eds_config.path_config_source")}
	if at.n == nil {
		at = located{ec, join(cl.path, "eds_cluster_config.eds_config")}
	}
	found, err := resolve(file, dir)
	if err != nil {
		p.addFinding(at, false, "EDS file %s: %v", file, err)
		p.Unknown = fmt.Sprintf("EDS file %s: %v", file, err)
		return
	}
	p.From = "EDS file " + found
	want := orDefault(str(get(ecc, "service_name")), p.Cluster)
	la, err := edsAssignment(found, want)
	if err != nil {
		p.addFinding(at, false, "EDS file %s: %v", found, err)
		p.Unknown = fmt.Sprintf("EDS file %s: %v", found, err)
		return
	}
	p.assignment(located{la, found})
}

// resolve finds a file Envoy names relative to its working directory: in
// this command's working directory, which "hashlb check" assumes is
// Envoy's, else beside the bootstrap (dir).
func resolve(file, dir string) (string, error) {
	if filepath.IsAbs(file) {
		_, err := os.Stat(file)
		return file, pathErr(err)
	}
	if _, err := os.Stat(file); err == nil {
		return file, nil
	}
	if dir != "" {
		if f := filepath.Join(dir, file); fileExists(f) {
			return f, nil
		}
		return "", fmt.Errorf("not found in the working directory (Envoy's, as hashlb check assumes) nor beside the bootstrap (%s): run hashlb where Envoy runs", dir)
	}
	return "", errors.New("not found in the working directory (Envoy's, as hashlb check assumes): run hashlb where Envoy runs")
}

func fileExists(f string) bool { _, err := os.Stat(f); return err == nil }

// pathErr drops the path an fs.PathError repeats.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// edsAssignment reads an EDS file (a DiscoveryResponse in YAML or JSON, as
// Envoy's path_config_source reads it) and returns the
// ClusterLoadAssignment of cluster.
func edsAssignment(file, cluster string) (*yaml.Node, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, pathErr(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not YAML or JSON: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	root := deref(&doc)
	if root != nil && root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = deref(root.Content[0])
	}
	var names []string
	for _, r := range items(get(root, "resources")) {
		if str(get(r, "@type")) != claType {
			continue
		}
		n := str(get(r, "cluster_name"))
		if n == cluster {
			return r, nil
		}
		names = append(names, n)
	}
	if names == nil {
		return nil, fmt.Errorf("no resources of @type %s", claType)
	}
	return nil, fmt.Errorf("no ClusterLoadAssignment for cluster_name %q (it has %s)", cluster, strings.Join(names, ", "))
}

// unhealthy are the EDS health_status values Envoy hands no load balancer
// as healthy.
var unhealthy = []string{"UNHEALTHY", "DRAINING", "TIMEOUT", "DEGRADED"}

// assignment reads the hosts of a ClusterLoadAssignment: every endpoint,
// by priority (Envoy's levels, the lowest first) and in order within one,
// with its address, LB weight, health status and hashlb metadata.
func (p *Policy) assignment(la located) {
	var unknown []string
	type ep struct {
		h    lbpolicy.HostInfo
		prio int
		down bool
	}
	var eps []ep
	for i, le := range items(get(la.n, "endpoints")) {
		lp := fmt.Sprintf("%s.endpoints[%d]", la.path, i)
		prio := 0
		if s := str(get(le, "priority")); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				unknown = append(unknown, lp+".priority")
				continue
			}
			prio = n
		}
		for j, e := range items(get(le, "lb_endpoints")) {
			loc := located{e, fmt.Sprintf("%s.lb_endpoints[%d]", lp, j)}
			h, ok := p.host(loc)
			if !ok {
				unknown = append(unknown, loc.path)
				continue
			}
			eps = append(eps, ep{h, prio, slices.Contains(unhealthy, str(get(e, "health_status")))})
		}
	}
	sort.SliceStable(eps, func(i, j int) bool { return eps[i].prio < eps[j].prio })
	for _, e := range eps {
		p.Hosts = append(p.Hosts, e.h)
		p.Priority = append(p.Priority, e.prio)
		p.Down = append(p.Down, e.down)
	}
	if unknown != nil {
		p.Unknown = fmt.Sprintf("%s: not an IP address and port (a host name Envoy resolves, or another kind of address), so the hosts Envoy ranks are not known offline", strings.Join(unknown, ", "))
		p.Hosts, p.Priority, p.Down = nil, nil, nil
	}
}

// host reads one lb_endpoint as the policy does; false for an address that
// is not an IP and port.
func (p *Policy) host(ep located) (lbpolicy.HostInfo, bool) {
	sa := get(get(get(ep.n, "endpoint"), "address"), "socket_address")
	ip, err := netip.ParseAddr(str(get(sa, "address")))
	port, perr := strconv.ParseUint(str(get(sa, "port_value")), 10, 16)
	if err != nil || perr != nil || ip.Zone() != "" {
		return lbpolicy.HostInfo{}, false
	}
	h := lbpolicy.HostInfo{Address: netip.AddrPortFrom(ip, uint16(port)).String(), Weight: 1}
	if w := get(ep.n, "load_balancing_weight"); w != nil {
		if v := get(w, "value"); v != nil {
			w = v
		}
		if n, err := strconv.Atoi(str(w)); err == nil {
			h.Weight = n
		}
	}
	md := get(get(get(ep.n, "metadata"), "filter_metadata"), "hashlb")
	for _, k := range []struct {
		key string
		to  *string
	}{{"hashId", &h.HashID}, {"name", &h.Name}} {
		v := get(md, k.key)
		switch {
		case v == nil:
		case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str":
			*k.to = v.Value
		default:
			p.addFinding(located{v, ep.path + ".metadata.filter_metadata.hashlb." + k.key}, true,
				"a %s: the policy reads string values only, and this host counts as having no %s: quote it", kindName(v), k.key)
		}
	}
	return h, true
}

// checkPolicy holds one policy to its cluster: the hosts as services, and
// the health settings the policy depends on.
func checkPolicy(file string, e Item) []Finding {
	p := e.Policy
	scanned := len(p.findings)
	defer func() { p.findings = p.findings[:scanned] }()
	pol, problems := e.ParsePolicy()
	cl := p.cluster
	if p.index > 0 {
		p.addFinding(p.policy, true, "hashlb is policies[%d]: Envoy uses the first policy of the list it knows (policies[0]); make hashlb's the first", p.index)
	}
	if dmc := get(p.policy.n, "dynamic_module_config"); str(get(dmc, "do_not_close")) != "true" {
		p.addFinding(located{dmc, join(p.policy.path, "dynamic_module_config")}, true, "do_not_close is not true: a Go runtime cannot be unloaded (the module keeps itself loaded; the configuration should say so): set do_not_close: true")
	}
	if problems == nil && p.Unknown == "" {
		switch _, warnings, err := pol.Services(p.Hosts); {
		case err != nil:
			p.addFinding(cl, false, "%v: Envoy's workers would have no host set (update_error) and every request no host", err)
		case len(p.Hosts) == 0:
			p.addFinding(cl, true, "no hosts: every request gets no host (503)")
		default:
			for _, w := range warnings {
				p.addFinding(cl, true, "%s", w)
			}
		}
	}
	hc := get(cl.n, "health_checks")
	switch {
	case p.patch:
	case len(items(hc)) == 0 && get(cl.n, "outlier_detection") == nil:
		p.addFinding(cl, true, "no health_checks and no outlier_detection: the policy follows Envoy's health of the hosts, and without either a dead host stays healthy and keeps its keys: add health_checks (and outlier_detection)")
	case len(items(hc)) > 0 && str(get(cl.n, "ignore_health_on_host_removal")) != "true" && p.From != "load_assignment":
		p.addFinding(cl, true, "ignore_health_on_host_removal is not true: a host removed from EDS stays, with its keys, for as long as it passes its health check: set ignore_health_on_host_removal: true")
	}
	out := append([]Finding(nil), p.findings...)
	for i := range out {
		out[i].File, out[i].Where, out[i].Plugin = file, e.Where, e.Node
	}
	return out
}

// join joins a path and a field name; a document's root has path "".
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// plural writes "1 host", "3 hosts".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
