package envoy

// The builder's shapes of the shipped bootstraps: envoy.yaml's HTTP
// listener and override_host cluster (the rig of the health, retry,
// least-connection, failure and hostile tests) and configs/envoy-tcp.yaml's
// TCP listener. TestBuilderShapesAreShipped holds each to its file, so a
// change of a shipped file fails here until the shape follows it, and the
// tests built on the shape keep testing what users run.

import (
	"encoding/json"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	wasmhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	wasmnetv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/wasm/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

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

// cluster returns the upstream cluster for a steering mode.
func (s steering) cluster(t testing.TB, name string, endpoints []string) *cluster {
	if s == originalDst {
		return originalDstCluster(name)
	}
	return overrideHostCluster(t, name, endpoints)
}

// shippedPlugin is envoy.yaml's plugin (failure_policy FAIL_RELOAD) with
// config.
func shippedPlugin(config []byte) *wasmv3.PluginConfig {
	p := wasmPlugin("", config)
	p.FailurePolicy = wasmv3.FailurePolicy_FAIL_RELOAD
	return p
}

// shippedListener is envoy.yaml's hashlb_listener on addr running p: the
// connection manager with use_remote_address, the route with its retry
// policy to hashlb_upstream.
func shippedListener(t testing.TB, name, addr string, p *wasmv3.PluginConfig) *listenerv3.Listener {
	t.Helper()
	hcm := connManager("hashlb", retryRoutes(routeAll("hashlb_route", "hashlb", "hashlb_upstream"), shippedRetries()), wasmHTTP(p))
	hcm.UseRemoteAddress = wrapperspb.Bool(true)
	return listenerOn(t, name, []string{addr}, hcmFilter(hcm))
}

// shippedHTTP is envoy.yaml with its listener on addr, its plugin's
// configuration config and the cluster's endpoints eps.
func shippedHTTP(t testing.TB, addr string, config []byte, eps []string) bootstrap {
	t.Helper()
	c := overrideHostCluster(t, "hashlb_upstream", eps)
	c.OutlierDetection = shippedOutlier()
	return bootstrap{other: []*listenerv3.Listener{shippedListener(t, "hashlb_listener", addr, shippedPlugin(config))},
		clusters: []*cluster{c}}
}

// tcpPlugin is configs/envoy-tcp.yaml's plugin (vm_id hashlb_tcp) with
// config.
func tcpPlugin(config []byte) *wasmv3.PluginConfig {
	p := shippedPlugin(config)
	p.GetVmConfig().VmId = "hashlb_tcp"
	return p
}

// shippedTCP is configs/envoy-tcp.yaml with its listener on addr, its
// plugin p (tcpPlugin) and upstream c (the file's is
// originalDstCluster("hashlb_tcp_upstream")).
func shippedTCP(t testing.TB, addr string, p *wasmv3.PluginConfig, c *cluster) bootstrap {
	t.Helper()
	return bootstrap{other: []*listenerv3.Listener{listenerOn(t, "hashlb_tcp", []string{addr},
		wasmNet(p), tcpProxy("hashlb_tcp", c.Name))}, clusters: []*cluster{c}}
}

// readShipped parses a shipped bootstrap with go-control-plane's types,
// strictly (a field the types lack fails).
func readShipped(t testing.TB, rel string) *bootstrapv3.Bootstrap {
	t.Helper()
	return parseShipped(t, rel, envoyrun.ReadRepoFile(t, rel))
}

// parseShipped is readShipped of file, the shipped bootstrap rel as a test
// changed it (its ports moved: envoyrun.Ports).
func parseShipped(t testing.TB, rel string, file []byte) *bootstrapv3.Bootstrap {
	t.Helper()
	var doc any
	if err := yaml.Unmarshal(file, &doc); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	j, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(j, b); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return b
}

// shippedConfig is the configuration of the first Wasm plugin of a shipped
// bootstrap's first listener (HTTP or network filter).
func shippedConfig(t testing.TB, rel string) []byte {
	t.Helper()
	for _, f := range readShipped(t, rel).GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters() {
		var p *wasmv3.PluginConfig
		switch m := unpack(t, f.GetTypedConfig()).(type) {
		case *wasmnetv3.Wasm:
			p = m.GetConfig()
		case *hcmv3.HttpConnectionManager:
			for _, h := range m.GetHttpFilters() {
				if w, ok := unpack(t, h.GetTypedConfig()).(*wasmhttpv3.Wasm); ok {
					p = w.GetConfig()
					break
				}
			}
		}
		if p != nil {
			s := &wrapperspb.StringValue{}
			if err := p.GetConfiguration().UnmarshalTo(s); err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			return []byte(s.Value)
		}
	}
	t.Fatalf("%s: no Wasm plugin in its first listener", rel)
	return nil
}

// unpack is the message in a (nil for none).
func unpack(t testing.TB, a interface{ UnmarshalNew() (proto.Message, error) }) proto.Message {
	t.Helper()
	if a == nil {
		return nil
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBuilderShapesAreShipped: the builder's envoy.yaml and
// configs/envoy-tcp.yaml, given the files' addresses and plugin
// configurations, are the files, field for field (comments and the node a
// test's bootstrap adds aside).
func TestBuilderShapesAreShipped(t *testing.T) {
	for _, c := range []struct {
		file  string
		build func(config []byte) bootstrap
	}{
		{"envoy.yaml", func(config []byte) bootstrap {
			return shippedHTTP(t, "127.0.0.1:10000", config, []string{"127.0.0.1:18081", "127.0.0.1:18082", "127.0.0.1:18083"})
		}},
		{"configs/envoy-tcp.yaml", func(config []byte) bootstrap {
			return shippedTCP(t, "127.0.0.1:10001", tcpPlugin(config), originalDstCluster("hashlb_tcp_upstream"))
		}},
	} {
		t.Run(strings.ReplaceAll(c.file, "/", "_"), func(t *testing.T) {
			want := readShipped(t, c.file)
			got := c.build(shippedConfig(t, c.file)).proto(t)
			got.Node = nil
			got.Admin = want.Admin
			if c.file == "configs/envoy-tcp.yaml" {
				// The shipped TCP cluster reads no header: the connection's
				// original destination is the address.
				od := got.StaticResources.Clusters[0]
				od.LbConfig = nil
			}
			g, w := protojson.Format(got), protojson.Format(want)
			if g != w {
				t.Errorf("the builder's %s differs from the file:\nbuilt:\n%s\nshipped:\n%s", c.file, g, w)
			}
		})
	}
}
