//go:build !wasip1

package main

import (
	"slices"
	"testing"
	"time"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// The SDK's emulator (and its wasm runner) has one root context, so a second
// configuration in the same VM is started here by calling the new plugin
// context's start directly, as Envoy's proxy_on_configure of a new root
// context would; against the module, hostsim runs the same sequence
// (e2e/reconfigure_test.go).

const reconfigHealth = `"healthCheck":{"path":"/ready","interval":"1s","unhealthyThreshold":1,"healthyThreshold":2,"cluster":"probe"}`

// probeRound answers the callouts a tick sent: status 500 for the addresses
// in failing, 200 for the others. It returns the probed addresses, sorted.
func (h *host) probeRound(failing ...string) []string {
	h.t.Helper()
	calls := slices.Clone(h.GetCalloutAttributesFromContext(proxytest.PluginContextID))
	var addrs []string
	for _, c := range calls {
		var addr string
		for _, kv := range c.Headers {
			if kv[0] == "x-envoy-original-dst-host" {
				addr = kv[1]
			}
		}
		addrs = append(addrs, addr)
		status := "200"
		if slices.Contains(failing, addr) {
			status = "500"
		}
		h.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", status}}, nil, nil)
	}
	slices.Sort(addrs)
	return addrs
}

func TestReconfigureCarriesOver(t *testing.T) {
	vm := &vmContext{}
	h := startHost(t, vm, `{"lbMethod":"URLHASH",`+reconfigHealth+`,`+services+`}`)
	if h.started != types.OnPluginStartStatusOK {
		t.Fatalf("plugin refused: %v", h.GetErrorLogs())
	}
	old := vm.current("default")
	h.Tick()
	h.probeRound("10.0.0.2:8080") // b goes DOWN
	// A request in flight on the old configuration.
	stream := h.InitializeHttpContext()
	h.CallOnRequestHeaders(stream, [][2]string{{":method", "GET"}, {":path", "/k"}, {":authority", "h"}}, true)
	chosen := get(h.GetCurrentRequestHeaders(stream), "x-hashlb-service")
	if len(chosen) != 1 {
		t.Fatalf("service header %v, want one", chosen)
	}

	// The new configuration drops c and adds e.
	next := vm.NewPluginContext(50).(*pluginContext)
	newServices := `"services":[{"name":"a","address":"10.0.0.1:8080"},{"name":"b","address":"10.0.0.2:8080"},
		{"name":"d","address":"[2001:db8::4]:8080"},{"name":"e","address":"10.0.0.5:8080"}]`
	if st := next.start([]byte(`{"lbMethod":"URLHASH",` + reconfigHealth + `,` + newServices + `}`)); st != types.OnPluginStartStatusOK {
		t.Fatalf("new configuration refused: %v", h.GetErrorLogs())
	}
	if !old.draining || vm.current("default") != next {
		t.Fatalf("after the new configuration: old draining %v, current is the new one %v; want true, true", old.draining, vm.current("default") == next)
	}
	wantUp := map[string]bool{"a": true, "b": false, "d": true, "e": false} // b: carried DOWN; e: pending
	var active int64
	for i, s := range next.cfg.Services {
		if got := next.bal.Selectable(i); got != wantUp[s.Name] {
			t.Errorf("new configuration: %s selectable %v, want %v", s.Name, got, wantUp[s.Name])
		}
		active += next.bal.Active(i)
		if s.Name == chosen[0] && next.bal.Active(i) != 1 {
			t.Errorf("new configuration: %s has %d active requests, want the old one's 1", s.Name, next.bal.Active(i))
		}
	}
	if chosen[0] != "c" && active != 1 {
		t.Errorf("new configuration counts %d active requests in all, want 1", active)
	}

	// Only the new configuration probes: the old context's tick sends
	// nothing, even when its next round is due.
	old.health.nextRound = time.Time{}
	h.Tick()
	if n := len(h.GetCalloutAttributesFromContext(proxytest.PluginContextID)); n != 0 {
		t.Fatalf("the draining context sent %d probes, want 0", n)
	}
	next.OnTick()
	if got, want := h.probeRound(), []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.5:8080", "[2001:db8::4]:8080"}; !slices.Equal(got, want) {
		t.Fatalf("first round of the new configuration probed %v, want %v", got, want)
	}
	wantUp["e"] = true // one good probe brings a new service UP; b needs healthyThreshold (2)
	for i, s := range next.cfg.Services {
		if got := next.bal.Selectable(i); got != wantUp[s.Name] {
			t.Errorf("after the first round: %s selectable %v, want %v", s.Name, got, wantUp[s.Name])
		}
	}

	// The old stream ends, then the old context goes away: its count is gone.
	h.CallOnResponseHeaders(stream, [][2]string{{":status", "200"}}, true)
	h.CompleteHttpContext(stream)
	old.OnPluginDone()
	next.OnTick()
	h.probeRound()
	for i, s := range next.cfg.Services {
		if n := next.bal.Active(i); n != 0 {
			t.Errorf("after the old context is done: %s has %d active requests, want 0", s.Name, n)
		}
	}
}

// Two plugin contexts of one root_id (two filters with the same root_id and
// configuration): the newer probes; when it goes away the older one
// probes again, so health checks never stop.
func TestReconfigureSharedRootID(t *testing.T) {
	vm := &vmContext{}
	config := `{"lbMethod":"URLHASH",` + reconfigHealth + `,` + services + `}`
	h := startHost(t, vm, config)
	if h.started != types.OnPluginStartStatusOK {
		t.Fatalf("plugin refused: %v", h.GetErrorLogs())
	}
	first := vm.current("default")
	second := vm.NewPluginContext(60).(*pluginContext)
	if st := second.start([]byte(config)); st != types.OnPluginStartStatusOK {
		t.Fatal("second context refused")
	}
	if !first.draining || second.draining {
		t.Fatalf("draining first %v, second %v; want true, false", first.draining, second.draining)
	}
	second.OnPluginDone()
	if first.draining || vm.current("default") != first {
		t.Errorf("after the newer context is done: first draining %v, current is first %v; want false, true", first.draining, vm.current("default") == first)
	}
	h.Tick()
	if got := h.probeRound(); len(got) != 4 {
		t.Errorf("the remaining context probed %v, want all 4 services", got)
	}
}

// TestReconfigureKeepsMetrics: a new configuration counts each service into
// the stats named after it: a service kept under its name goes on counting
// into the same stat (its ids are taken over, no new definitions), one
// renamed (same identity) or added into its own new stat, with health
// metrics when health checks are configured.
func TestReconfigureKeepsMetrics(t *testing.T) {
	vm := &vmContext{}
	h := startHost(t, vm, `{"lbMethod":"URLHASH","services":[{"name":"a","address":"10.0.0.1:8080"},{"name":"b","address":"10.0.0.2:8080"}]}`)
	if h.started != types.OnPluginStartStatusOK {
		t.Fatalf("plugin refused: %v", h.GetErrorLogs())
	}
	old := vm.current("default")
	old.active(0, 1)
	old.active(1, 1)
	old.m.flush()
	next := vm.NewPluginContext(50).(*pluginContext)
	config := `{"lbMethod":"URLHASH",` + reconfigHealth + `,"services":[{"name":"a","address":"10.0.0.1:8080"},
		{"name":"b2","address":"10.0.0.2:8080"},{"name":"c","address":"10.0.0.3:8080"}]}`
	if st := next.start([]byte(config)); st != types.OnPluginStartStatusOK {
		t.Fatalf("new configuration refused: %v", h.GetErrorLogs())
	}
	if next.m.requests[0] != old.m.requests[0] || next.m.active[0] != old.m.active[0] {
		t.Errorf("service a: metric ids %d/%d, want the old configuration's %d/%d", next.m.requests[0], next.m.active[0], old.m.requests[0], old.m.active[0])
	}
	for i := range next.cfg.Services {
		next.active(i, 1)
	}
	next.m.flush()
	for name, want := range map[string]uint64{"a": 2, "b": 1, "b2": 1, "c": 1} {
		if got, err := h.GetCounterMetric("hashlb.service." + name + ".requests"); err != nil || got != want {
			t.Errorf("hashlb.service.%s.requests = %d (%v), want %d", name, got, err, want)
		}
	}
	for _, name := range []string{"a", "b2", "c"} {
		for _, m := range []string{"health_down", "health_up", "ejected"} {
			if _, err := h.GetCounterMetric("hashlb.service." + name + "." + m); err != nil {
				t.Errorf("hashlb.service.%s.%s: %v, want it defined", name, m, err)
			}
		}
	}
}
