//go:build !wasip1

package main

import (
	"slices"
	"testing"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/proxytest"
)

// TestActiveHealthProbeRequest: the probe carries healthCheck's method, host
// and port, and with expectBody a 200 whose body lacks the text fails it.
func TestActiveHealthProbeRequest(t *testing.T) {
	tests := []struct {
		name       string
		check      string
		wantMethod string
		wantAuth   func(addr string) string
		wantAddr   map[string]string // service address → address probed
		body       func(addr string) string
		wantDown   string // the service whose probe fails, by address
	}{
		{
			name:       "HEAD on another port",
			check:      `"method":"HEAD","path":"/keepAlive.html","port":8585`,
			wantMethod: "HEAD",
			wantAuth:   func(addr string) string { return addr },
			wantAddr: map[string]string{"10.0.0.1:8080": "10.0.0.1:8585", "10.0.0.2:8080": "10.0.0.2:8585",
				"10.0.0.3:8080": "10.0.0.3:8585", "[2001:db8::4]:8080": "[2001:db8::4]:8585"},
			body: func(string) string { return "" },
		},
		{
			name:       "GET with a host and a body to find",
			check:      `"path":"/status","host":"app.example.com","expectBody":"Status=running"`,
			wantMethod: "GET",
			wantAuth:   func(string) string { return "app.example.com" },
			body: func(addr string) string {
				if addr == "10.0.0.2:8080" {
					return "Status=stopped"
				}
				return "app\nStatus=running\n"
			},
			wantDown: "10.0.0.2:8080",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			config := `{"lbMethod":"URLHASH","healthCheck":{` + tt.check + `,"interval":"1s","unhealthyThreshold":1,"healthyThreshold":1,"cluster":"probe"},` + services + `}`
			h := startHost(t, &vmContext{}, config)
			h.Tick()
			calls := slices.Clone(h.GetCalloutAttributesFromContext(proxytest.PluginContextID))
			if len(calls) != 4 {
				t.Fatalf("one tick sent %d probes, want 4", len(calls))
			}
			for _, c := range calls {
				hdr := map[string]string{}
				for _, kv := range c.Headers {
					hdr[kv[0]] = kv[1]
				}
				probed := hdr["x-envoy-original-dst-host"]
				svc := probed
				for s, p := range tt.wantAddr {
					if p == probed {
						svc = s
					}
				}
				if tt.wantAddr != nil && tt.wantAddr[svc] != probed {
					t.Errorf("probe to %s: want one of the services' addresses on port 8585", probed)
				}
				if hdr[":method"] != tt.wantMethod || hdr[":authority"] != tt.wantAuth(probed) {
					t.Errorf("probe %v: want :method %s and :authority %s", c.Headers, tt.wantMethod, tt.wantAuth(probed))
				}
				h.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", "200"}}, nil, []byte(tt.body(svc)))
			}
			for _, name := range []string{"a", "b", "c", "d"} {
				n, _ := h.GetCounterMetric("hashlb.service." + name + ".health_down")
				if want := addressOf(name) == tt.wantDown; (n == 1) != want {
					t.Errorf("hashlb.service.%s.health_down = %d; want DOWN %v", name, n, want)
				}
			}
		})
	}
}
