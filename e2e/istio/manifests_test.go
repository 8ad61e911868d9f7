package istio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"sigs.k8s.io/yaml"
)

// sidecarFiles are the shipped files of configs/istio/ for the sidecar
// shape, in the order a user applies them.
var sidecarFiles = []string{"serviceentry.yaml", "destinationrule.yaml", "virtualservice.yaml", "envoyfilter.yaml", "wasmplugin.yaml"}

// gatewayFiles are the shipped files for the ingress gateway shape, in the
// order a user applies them: the service's own, then gateway/'s.
var gatewayFiles = []string{"serviceentry.yaml", "destinationrule.yaml", "gateway/gateway.yaml", "gateway/envoyfilter.yaml", "gateway/wasmplugin.yaml"}

// The shipped names the checks look for in what Envoy runs.
const (
	backendsHost    = "hashlb-backends.demo.internal"
	backendsCluster = "outbound|8080||" + backendsHost
	pluginFilter    = "demo.hashlb" // istiod names a WasmPlugin's filter NAMESPACE.NAME
)

var urlLine = regexp.MustCompile(`(?m)^(\s*)url: .*$`)

// shipped is a file of configs/istio/ as the tests apply it: as shipped
// but for the module's URL, file:// of the module built from this tree
// (registry.example.com is a placeholder). The service addresses,
// 10.10.0.11-13, are the test's own network namespace's (serviceAddrs).
func shipped(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.RepoRoot, "configs", "istio", name))
	if err != nil {
		t.Fatal(err)
	}
	return urlLine.ReplaceAll(data, []byte("${1}url: file://"+env.Module))
}

// pluginConfigJSON is the pluginConfig of a WasmPlugin file (spec) or a
// TrafficExtension file (spec.wasm), as JSON.
func pluginConfigJSON(t testing.TB, file []byte) []byte {
	t.Helper()
	type wasm struct {
		PluginConfig json.RawMessage `json:"pluginConfig"`
	}
	var w struct {
		Spec struct {
			wasm
			Wasm wasm `json:"wasm"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(file, &w); err != nil {
		t.Fatal(err)
	}
	if c := w.Spec.PluginConfig; len(c) > 0 {
		return c
	}
	if c := w.Spec.Wasm.PluginConfig; len(c) > 0 {
		return c
	}
	t.Fatalf("no spec.pluginConfig or spec.wasm.pluginConfig in %.200s", file)
	return nil
}

// check is what one shipped file makes Envoy run, checked in a
// config_dump (with EDS); its error names the file.
type check struct {
	file string
	fn   func(dump gjson.Result) error
}

// proxyShape is what differs between the proxies the tests connect to
// istiod, a client workload's sidecar and an ingress gateway: where a client
// sends, where Envoy takes the client's address from, and where the shipped
// files show in Envoy's configuration.
type proxyShape struct {
	addr     string // the listener clients send to
	port     int64  // its port
	remote   bool   // use_remote_address: the source is the connection's peer, not x-forwarded-for
	pluginNS string // the plugin's namespace, which istiod names its filter after
	domain   string // the domain of the virtual host the route is in
	// The files that make the route and the cluster's override_host policy.
	routeFile, filterFile string
}

var (
	// sidecarShape is a frontend pod's sidecar with sidecarFiles applied.
	sidecarShape = proxyShape{addr: outboundAddr, port: 8080, pluginNS: "demo", domain: backendsHost,
		routeFile: "virtualservice.yaml", filterFile: "envoyfilter.yaml"}
	// gatewayShape is an ingress gateway with gatewayFiles applied: Istio's
	// gateways take the client's address from the connection.
	gatewayShape = proxyShape{addr: "127.0.0.1:80", port: 80, remote: true, pluginNS: "istio-system", domain: "*",
		routeFile: "gateway/gateway.yaml", filterFile: "gateway/envoyfilter.yaml"}
)

// sidecarChecks are the checks of sidecarFiles on a sidecar's config, the
// plugin's being of pluginFile (wasmplugin.yaml, or its TrafficExtension
// twin) with pluginConfig.
func sidecarChecks(module, pluginFile string, pluginConfig []byte) []check {
	return sidecarShape.checks(module, pluginFile, pluginConfig)
}

// checks are the checks of the shipped files on a proxy of shape s, the
// plugin's being of pluginFile (a WasmPlugin file, or a TrafficExtension
// twin) with pluginConfig.
func (s proxyShape) checks(module, pluginFile string, pluginConfig []byte) []check {
	return s.checksOf(isFile(module), pluginFile, pluginConfig)
}

// isFile wants the plugin's module loaded from the file module (a file://
// URL, which istiod hands Envoy as it is).
func isFile(module string) func(filename string) error {
	return func(f string) error {
		if f != module {
			return fmt.Errorf("loads %q, want %q", f, module)
		}
		return nil
	}
}

// checksOf is checks with module judging the file the plugin's module is
// loaded from.
func (s proxyShape) checksOf(module func(filename string) error, pluginFile string, pluginConfig []byte) []check {
	cluster := func(dump gjson.Result) (gjson.Result, error) {
		c := section(dump, "ClustersConfigDump").Get(`dynamic_active_clusters.#(cluster.name==` + quote(backendsCluster) + `).cluster`)
		if !c.Exists() {
			return c, fmt.Errorf("Envoy has no cluster %s", backendsCluster)
		}
		return c, nil
	}
	// onCluster checks the backends' cluster with fn.
	onCluster := func(fn func(c gjson.Result) error) func(dump gjson.Result) error {
		return func(dump gjson.Result) error {
			c, err := cluster(dump)
			if err != nil {
				return err
			}
			return fn(c)
		}
	}
	return []check{
		{"serviceentry.yaml", func(dump gjson.Result) error {
			if _, err := cluster(dump); err != nil {
				return err
			}
			var got []string
			ep := section(dump, "EndpointsConfigDump").Get(`dynamic_endpoint_configs.#(endpoint_config.cluster_name==` + quote(backendsCluster) + `).endpoint_config`)
			ep.Get("endpoints.#.lb_endpoints.#.endpoint.address.socket_address").ForEach(func(_, v gjson.Result) bool {
				v.ForEach(func(_, a gjson.Result) bool {
					got = append(got, fmt.Sprintf("%s:%d", a.Get("address").String(), a.Get("port_value").Int()))
					return true
				})
				return true
			})
			if want := "10.10.0.11:8080 10.10.0.12:8080 10.10.0.13:8080"; strings.Join(sorted(got), " ") != want {
				return fmt.Errorf("cluster %s has endpoints %v, want %s", backendsCluster, got, want)
			}
			return nil
		}},
		{"destinationrule.yaml", onCluster(func(c gjson.Result) error {
			od := c.Get("outlier_detection")
			if od.Get("consecutive_5xx").Int() != 5 || od.Get("interval").String() != "10s" || od.Get("base_ejection_time").String() != "30s" {
				return fmt.Errorf("cluster %s: outlier_detection %s, want consecutive_5xx 5, interval 10s, base_ejection_time 30s", backendsCluster, orNone(od.Raw))
			}
			return nil
		})},
		{s.routeFile, func(dump gjson.Result) error {
			var found bool
			var msg string
			section(dump, "RoutesConfigDump").Get("dynamic_route_configs.#.route_config.virtual_hosts").ForEach(func(_, vhs gjson.Result) bool {
				vhs.ForEach(func(_, vh gjson.Result) bool {
					if !slices.Contains(stringsOf(vh.Get("domains")), s.domain) {
						return true
					}
					r := vh.Get("routes.0.route")
					rp := r.Get("retry_policy")
					if r.Get("cluster").String() == backendsCluster && rp.Get("num_retries").Int() == 2 &&
						rp.Get("retry_on").String() == "connect-failure,refused-stream,reset,5xx" {
						found = true
						return false
					}
					msg = fmt.Sprintf("virtual host %s routes to %s with retry_policy %s", vh.Get("name"), r.Get("cluster"), rp.Raw)
					return true
				})
				return !found
			})
			if !found {
				return fmt.Errorf("no route of %s to %s with 2 retries on connect-failure,refused-stream,reset,5xx (%s)", s.domain, backendsCluster, orNone(msg))
			}
			return nil
		}},
		{s.filterFile, onCluster(func(c gjson.Result) error {
			p := c.Get("load_balancing_policy.policies.0.typed_extension_config")
			if p.Get("name").String() != "envoy.load_balancing_policies.override_host" ||
				p.Get("typed_config.override_host_sources.0.header").String() != "x-envoy-original-dst-host" {
				return fmt.Errorf("cluster %s: load_balancing_policy %s, want override_host on x-envoy-original-dst-host", backendsCluster, orNone(c.Get("load_balancing_policy").Raw))
			}
			return nil
		})},
		{pluginFile, func(dump gjson.Result) error {
			names, err := httpFilters(dump, s.port)
			if err != nil {
				return err
			}
			// istiod turns a WasmPlugin into a TrafficExtension of its own
			// (NAME~istio-translated-wasmplugin) and names the filter after it.
			name := "extensions.istio.io/trafficextension/" + s.pluginNS + ".hashlb"
			if path.Base(pluginFile) == "wasmplugin.yaml" {
				name += "~istio-translated-wasmplugin"
			}
			ecds := section(dump, "EcdsConfigDump").Get(`ecds_filters.#(ecds_filter.name==` + quote(name) + `).ecds_filter`)
			if !ecds.Exists() {
				return fmt.Errorf("Envoy has no ECDS filter %s", name)
			}
			if err := module(ecds.Get("typed_config.config.vm_config.code.local.filename").String()); err != nil {
				return fmt.Errorf("ECDS filter %s %w", name, err)
			}
			at, router := slices.Index(names, name), slices.Index(names, "envoy.filters.http.router")
			if at < 0 || router < 0 || at > router {
				return fmt.Errorf("the listener on port %d has HTTP filters %v: want %s before envoy.filters.http.router", s.port, names, name)
			}
			cfg := ecds.Get("typed_config.config")
			if !jsonEqual([]byte(cfg.Get("configuration.value").String()), pluginConfig) {
				return fmt.Errorf("ECDS filter %s has configuration %s, want the pluginConfig %s", name, cfg.Get("configuration.value"), pluginConfig)
			}
			if fp := cfg.Get("failure_policy").String(); cfg.Get("fail_open").Bool() || fp != "FAIL_CLOSED" {
				return fmt.Errorf("ECDS filter %s has failure_policy %q, want FAIL_CLOSED (failStrategy: FAIL_CLOSE)", name, fp)
			}
			return nil
		}},
	}
}

// httpFilters are the HTTP filters, in order, of the HTTP connection
// manager on the listener for port (a sidecar's outbound one, a gateway's).
func httpFilters(dump gjson.Result, port int64) ([]string, error) {
	l := section(dump, "ListenersConfigDump").Get(fmt.Sprintf(`dynamic_listeners.#(active_state.listener.address.socket_address.port_value==%d).active_state.listener`, port))
	if !l.Exists() {
		return nil, fmt.Errorf("Envoy has no active listener on port %d", port)
	}
	var names []string
	l.Get("filter_chains.#.filters.#(name==\"envoy.filters.network.http_connection_manager\").typed_config.http_filters.#.name").ForEach(func(_, v gjson.Result) bool {
		v.ForEach(func(_, n gjson.Result) bool { names = append(names, n.String()); return true })
		return len(names) == 0
	})
	if len(names) == 0 {
		return nil, fmt.Errorf("listener %s has no HTTP connection manager", l.Get("name"))
	}
	return names, nil
}

// runChecks runs every check on a dump, returning their errors joined.
func runChecks(dump gjson.Result, checks []check) error {
	var errs []error
	for _, c := range checks {
		if err := c.fn(dump); err != nil {
			errs = append(errs, fmt.Errorf("configs/istio/%s not applied: %w", c.file, err))
		}
	}
	return errors.Join(errs...)
}

// waitFor polls Envoy's config_dump until cond accepts the result of the
// checks, up to timeout (istiod debounces and pushes; a busy machine is
// slow), and returns the last result.
func waitFor(e configDumper, checks []check, timeout time.Duration, cond func(error) bool) error {
	deadline := time.Now().Add(timeout)
	for {
		dump, err := e.configDump()
		if err == nil {
			err = runChecks(dump, checks)
		}
		if cond(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

type configDumper interface{ configDump() (gjson.Result, error) }

// waitApplied waits until every check passes on p (istiod debounces and
// pushes), up to 3 min, and logs how long that took.
func waitApplied(t *testing.T, p configDumper, checks []check) {
	t.Helper()
	start := time.Now()
	if err := waitFor(p, checks, 3*time.Minute, func(err error) bool { return err == nil }); err != nil {
		t.Fatalf("after 3 min, Envoy does not run what the shipped files ask:\n%v", err)
	}
	t.Logf("every shipped file in Envoy's configuration %s after Envoy was ready", time.Since(start).Round(100*time.Millisecond))
}

func section(dump gjson.Result, kind string) gjson.Result {
	return dump.Get(`configs.#(@type=="type.googleapis.com/envoy.admin.v3.` + kind + `")`)
}

// orNone is a JSON text for a message, "none" when absent.
func orNone(raw string) string {
	if raw == "" {
		return "none"
	}
	return raw
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// stringsOf is a JSON array of strings.
func stringsOf(r gjson.Result) []string {
	var out []string
	for _, v := range r.Array() {
		out = append(out, v.String())
	}
	return out
}

func sorted(xs []string) []string {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}

// jsonEqual compares two JSON texts as values.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}
