//go:build !wasip1

package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// respond runs one stream that the upstream answers with status.
func (h *host) respond(path, status string) string {
	h.t.Helper()
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", path}, {":authority", "h"}}, true)
	got := get(h.GetCurrentRequestHeaders(id), "x-hashlb-service")
	h.CallOnResponseHeaders(id, [][2]string{{":status", status}}, true)
	h.CompleteHttpContext(id)
	if len(got) != 1 {
		h.t.Fatalf("request %s: service header %v, want one", path, got)
	}
	return got[0]
}

func TestPassiveHealthEjects(t *testing.T) {
	config := `{"lbMethod":"URLHASH","passiveHealth":{"consecutiveFailures":2,"ejectionTime":"1h"},` + services + `}`
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		h := newHost(t, config)
		if h.started != types.OnPluginStartStatusOK {
			t.Fatalf("plugin refused: %v", h.GetErrorLogs())
		}
		bad := h.respond("/k", "503")
		if got := h.respond("/k", "200"); got != bad {
			t.Fatalf("same key went to %s then %s", bad, got)
		}
		h.respond("/k", "502") // a success in between reset the count: this is failure 1
		if got := h.respond("/k", "504"); got != bad {
			t.Fatalf("ejected after one failure in a row: went to %s", got)
		}
		moved := h.respond("/k", "200")
		if moved == bad {
			t.Fatalf("after 2 failures in a row %s still gets the key", bad)
		}
		if n, _ := h.GetCounterMetric("hashlb.service." + bad + ".ejected"); n != 1 {
			t.Errorf("hashlb.service.%s.ejected = %d, want 1", bad, n)
		}
		logs := strings.Join(h.GetInfoLogs(), "\n")
		if !strings.Contains(logs, "service "+bad) || !strings.Contains(logs, "ejected for 1h after 2 failed responses") {
			t.Errorf("info logs %q do not report the ejection", logs)
		}
	})
}

func TestPassiveHealthKeepsLastService(t *testing.T) {
	config := `{"lbMethod":"URLHASH","passiveHealth":{"consecutiveFailures":1},"services":[{"name":"only","address":"10.0.0.1:80"}]}`
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		h := newHost(t, config)
		for i := 0; i < 3; i++ {
			if got := h.respond("/k", "503"); got != "only" {
				t.Fatalf("request %d went to %q", i, got)
			}
		}
	})
}

// The SDK's wasm runner cannot deliver HTTP call responses, so active checks
// run natively here and against the module under hostsim (e2e/health_test.go).
func TestActiveHealthProbes(t *testing.T) {
	config := `{"lbMethod":"URLHASH","healthCheck":{"path":"/ready","interval":"1s","unhealthyThreshold":1,"healthyThreshold":1,"cluster":"probe"},` + services + `}`
	h := startHost(t, &vmContext{}, config)
	if h.started != types.OnPluginStartStatusOK || h.GetTickPeriod() != 1000 {
		t.Fatalf("plugin start %v, tick period %d ms, want ok and 1000", h.started, h.GetTickPeriod())
	}
	before := h.respond("/k", "200")
	h.Tick()
	// Cloned: the emulator removes answered callouts from the slice it returned.
	calls := slices.Clone(h.GetCalloutAttributesFromContext(proxytest.PluginContextID))
	if len(calls) != 4 {
		t.Fatalf("one tick sent %d probes, want one per service (4)", len(calls))
	}
	var addrs []string
	for _, c := range calls {
		if c.Upstream != "probe" {
			t.Errorf("probe sent to cluster %q, want probe", c.Upstream)
		}
		hdr := map[string]string{}
		for _, kv := range c.Headers {
			hdr[kv[0]] = kv[1]
		}
		if hdr[":path"] != "/ready" || hdr["x-envoy-original-dst-host"] != hdr[":authority"] {
			t.Errorf("probe headers %v: want :path /ready and the upstream header naming the service", c.Headers)
		}
		addrs = append(addrs, hdr["x-envoy-original-dst-host"])
		status := "200"
		if hdr[":authority"] == addressOf(before) {
			status = "500"
		}
		h.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", status}}, nil, nil)
	}
	slices.Sort(addrs)
	if want := []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080", "[2001:db8::4]:8080"}; !slices.Equal(addrs, want) {
		t.Errorf("probed %v, want %v", addrs, want)
	}
	if after := h.respond("/k", "200"); after == before {
		t.Errorf("after a failed probe (unhealthyThreshold 1) %s still gets the key", before)
	}
	if n, _ := h.GetCounterMetric("hashlb.service." + before + ".health_down"); n != 1 {
		t.Errorf("hashlb.service.%s.health_down = %d, want 1", before, n)
	}
}

func addressOf(name string) string {
	return map[string]string{"a": "10.0.0.1:8080", "b": "10.0.0.2:8080", "c": "10.0.0.3:8080", "d": "[2001:db8::4]:8080"}[name]
}

// A connection failure is a failure whatever failureStatuses says: Envoy
// answers 503 itself with response flag UF.
func TestPassiveHealthCountsConnectionFailures(t *testing.T) {
	config := `{"lbMethod":"URLHASH","passiveHealth":{"consecutiveFailures":2,"failureStatuses":"500"},` + services + `}`
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		h := newHost(t, config)
		if err := h.SetProperty([]string{"response", "flags"}, []byte{0x20, 0, 0, 0, 0, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
		bad := h.respond("/k", "503")
		h.respond("/k", "503")
		if got := h.respond("/k", "200"); got == bad {
			t.Errorf("two connection failures (503, flag UF) in a row did not eject %s", bad)
		}
	})
}
