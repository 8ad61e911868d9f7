package e2e

// configs/envoy-tcp.yaml: hashlb as a network filter before tcp_proxy, whose
// ORIGINAL_DST cluster reads the filter state hashlb sets. checkBootstrap
// (envoy_test.go) calls checkNetworkChain on every filter chain.

import (
	"errors"
	"fmt"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	netwasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/wasm/v3"
)

const (
	netWasmFilterName = "envoy.filters.network.wasm"
	tcpProxyName      = "envoy.filters.network.tcp_proxy"
)

// checkNetworkChain checks the hashlb network filters of one filter chain:
// each holds a filterType network configuration, tcp_proxy follows it as the
// last filter, and tcp_proxy's cluster is ORIGINAL_DST (which reads the
// filter state hashlb sets). It returns how many hashlb filters it found.
func checkNetworkChain(filters []*listenerv3.Filter, clusters map[string]*clusterv3.Cluster) (int, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	n := 0
	for i, f := range filters {
		w := &netwasmv3.Wasm{}
		if f.GetName() != netWasmFilterName || !f.GetTypedConfig().MessageIs(w) {
			continue
		}
		if err := f.GetTypedConfig().UnmarshalTo(w); err != nil {
			bad("filters[%d]: %v", i, err)
			continue
		}
		n++
		cfg, err := checkWasmPlugin(w.GetConfig())
		if err != nil {
			bad("filters[%d] %s: %v", i, w.GetConfig().GetName(), err)
		}
		if cfg == nil {
			continue
		}
		if !cfg.Network() {
			bad("filters[%d] %s: a network filter needs filterType network in its configuration", i, w.GetConfig().GetName())
		}
		if hc := cfg.HealthCheck; hc != nil && clusters[hc.Cluster] == nil {
			bad("plugin healthCheck.cluster %q: no such cluster", hc.Cluster)
		}
		last := filters[len(filters)-1]
		tp := &tcpproxyv3.TcpProxy{}
		if last.GetName() != tcpProxyName || !last.GetTypedConfig().MessageIs(tp) || i == len(filters)-1 {
			bad("filters[%d] %s: %s must follow it as the last filter of the chain", i, w.GetConfig().GetName(), tcpProxyName)
			continue
		}
		if err := last.GetTypedConfig().UnmarshalTo(tp); err != nil {
			bad("%s: %v", tcpProxyName, err)
			continue
		}
		name := tp.GetCluster()
		c := clusters[name]
		switch {
		case name == "":
			bad("%s: weighted clusters: each connection must go to one ORIGINAL_DST cluster", tcpProxyName)
		case c == nil:
			bad("%s: cluster %q: no such cluster", tcpProxyName, name)
		case c.GetType() != clusterv3.Cluster_ORIGINAL_DST:
			bad("cluster %s: tcp_proxy with hashlb needs an ORIGINAL_DST cluster, the one that reads the filter state hashlb sets", name)
		case c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED:
			bad("cluster %s: ORIGINAL_DST needs lb_policy CLUSTER_PROVIDED, not %s", name, c.GetLbPolicy())
		}
	}
	return n, errors.Join(errs...)
}

// TestEnvoyTCPBrokenCopies: each deliberately broken copy of
// configs/envoy-tcp.yaml fails with a message naming the problem.
func TestEnvoyTCPBrokenCopies(t *testing.T) {
	orig := string(readRepoFile(t, "configs/envoy-tcp.yaml"))
	tests := []struct {
		name, old, new string
		want           []string
	}{
		{"http configuration", `"filterType": "network",`, ``,
			[]string{"needs filterType network"}},
		{"http-only method", `"lbMethod": "SRCIPSRCPORTHASH"`, `"lbMethod": "URLHASH"`,
			[]string{"lbMethod: URLHASH reads the request URL"}},
		{"not original_dst", "type: ORIGINAL_DST\n    lb_policy: CLUSTER_PROVIDED", "type: STATIC",
			[]string{"needs an ORIGINAL_DST cluster"}},
		{"tcp_proxy missing", "name: envoy.filters.network.tcp_proxy", "name: envoy.filters.network.tcp_proxyy",
			[]string{"must follow it as the last filter"}},
		{"fail open", "fail_open: false", "fail_open: true",
			[]string{"must fail closed"}},
		{"wrong module path", "filename: dist/hashlb.wasm", "filename: hashlb.wasm",
			[]string{"is not build.sh's output"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, checkBootstrapFile([]byte(mustReplace(t, orig, tt.old, tt.new))), tt.want...)
		})
	}
}
