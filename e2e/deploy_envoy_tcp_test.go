package e2e

// configs/envoy-tcp.yaml: hashlb as a network filter before tcp_proxy, whose
// ORIGINAL_DST cluster reads the filter state hashlb sets. checkBootstrap
// (deploy_envoy_test.go) calls checkNetworkChain on every filter chain.

import (
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/echo/v3"      // a broken copy's
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3" // named in configs/envoy-tcp.yaml
	netwasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/wasm/v3"
)

const (
	netWasmFilterName = "envoy.filters.network.wasm"
)

// checkNetworkChain checks the hashlb network filters of one filter chain
// with the repository's rules (checkWasmPlugin); crossCheck holds them to
// tcp_proxy and its ORIGINAL_DST cluster. It returns how many hashlb
// filters it found.
func checkNetworkChain(filters []*listenerv3.Filter) (int, error) {
	n, _, err := checkWasmFilters("filters", netWasmFilterName, filters, func() *netwasmv3.Wasm { return &netwasmv3.Wasm{} })
	return n, err
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
		{"tcp_proxy missing", "\"@type\": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy\n          stat_prefix: hashlb_tcp\n          cluster: hashlb_tcp_upstream",
			"\"@type\": type.googleapis.com/envoy.extensions.filters.network.echo.v3.Echo",
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
