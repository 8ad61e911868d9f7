//go:build !wasip1

package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

const services = `"services":[
	{"name":"a","address":"10.0.0.1:8080"},{"name":"b","address":"10.0.0.2:8080"},
	{"name":"c","address":"10.0.0.3:8080"},{"name":"d","address":"[2001:db8::4]:8080"}]`

// oracle is lbcore deciding the same request directly.
func oracle(t *testing.T, config string, r lbcore.Request) []string {
	t.Helper()
	c, err := lbcore.ParseConfig([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	d := lbcore.NewBalancer(c, 0).Decide(&r, time.Time{})
	var out []string
	for i := 0; i < d.Len(); i++ {
		out = append(out, c.Services[d.At(i)].Address)
	}
	return out
}

func TestEveryMethod(t *testing.T) {
	tests := []struct {
		method, extra string
		src, dst      string
		headers       [][2]string
	}{
		{"URLHASH", "", "192.0.2.1:5000", "198.51.100.1:80", nil},
		{"DOMAINHASH", "", "192.0.2.1:5000", "198.51.100.1:80", nil},
		{"DESTINATIONIPHASH", `"netmask":"255.255.255.0"`, "192.0.2.1:5000", "198.51.100.77:80", nil},
		{"SOURCEIPHASH", `"v6NetmaskLen":64`, "[2001:db8:1:2::99]:5000", "198.51.100.1:80", nil},
		{"SRCIPDESTIPHASH", "", "192.0.2.1:5000", "198.51.100.1:80", nil},
		{"SRCIPSRCPORTHASH", "", "192.0.2.1:5001", "198.51.100.1:80", nil},
		{"CALLIDHASH", "", "192.0.2.1:5000", "198.51.100.1:80", [][2]string{{"i", "f81d4fae-7dec@192.0.2.4"}}},
		{"TOKEN", `"token":"${request.header.x-tenant|lower}"`, "192.0.2.1:5000", "198.51.100.1:80", [][2]string{{"x-tenant", "Blue"}}},
	}
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		for _, tt := range tests {
			t.Run(tt.method, func(t *testing.T) {
				config := fmt.Sprintf(`{"lbMethod":%q,%s}`, tt.method, strings.Trim(tt.extra+","+services, ","))
				h := newHost(t, config)
				if h.started != types.OnPluginStartStatusOK {
					t.Fatalf("plugin refused %s: %v", config, h.GetErrorLogs())
				}
				for i := 0; i < 20; i++ {
					path := fmt.Sprintf("/item/%d?q=%d", i, i*7)
					auth := fmt.Sprintf("Host%d.Example.com:8443", i)
					hdrs := append([][2]string{{":method", "GET"}, {":path", path}, {":authority", auth}}, tt.headers...)
					r := h.request(tt.src, tt.dst, hdrs...)
					want := oracle(t, config, lbcore.Request{Target: path, Authority: auth, Source: tt.src, Dest: tt.dst, Headers: tt.headers})
					if got := get(r.headers, "x-envoy-original-dst-host"); !slices.Equal(got, want) {
						t.Fatalf("request %d: upstream header %v, want %v", i, got, want)
					}
					if r.action != types.ActionContinue || r.local != nil {
						t.Fatalf("request %d: action %v, local reply %v; want Continue, none", i, r.action, r.local)
					}
					if len(get(r.headers, "x-hashlb-service")) != 1 {
						t.Fatalf("request %d: service header %v, want one", i, get(r.headers, "x-hashlb-service"))
					}
				}
			})
		}
	})
}

// TestForgedHeadersStripped: a client's copies of our headers never decide
// where the request goes. The filter does not read them: its replace removes
// every copy in Envoy (setCopy; route in http.go), which hostsim and the V8
// host model and the e2e tests check (TestHostCallsPerRequest, the hostile
// corpus's repeated-forged class). The SDK's emulator here replaces only the
// first copy, so this test holds what ORIGINAL_DST and a route read, the
// first copy, and that a request nothing can serve is answered, not sent.
func TestForgedHeadersStripped(t *testing.T) {
	config := `{"lbMethod":"URLHASH",` + services + `}`
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		forged := [][2]string{
			{":method", "GET"}, {":path", "/x"}, {":authority", "h"},
			{"x-envoy-original-dst-host", "6.6.6.6:1"},
			{"X-Envoy-Original-Dst-Host", "6.6.6.7:1"},
			{"x-hashlb-service", "evil"}, {"X-Hashlb-Service", "evil"},
		}
		t.Run("routed", func(t *testing.T) {
			h := newHost(t, config)
			r := h.request("192.0.2.1:1", "198.51.100.1:80", forged...)
			want := oracle(t, config, lbcore.Request{Target: "/x"})
			if got := get(r.headers, "x-envoy-original-dst-host"); len(got) == 0 || got[0] != want[0] {
				t.Errorf("upstream header %v, want %v first", got, want)
			}
			if got := get(r.headers, "x-hashlb-service"); len(got) == 0 || got[0] == "evil" {
				t.Errorf("service header %v, want hashlb's first", got)
			}
		})
		t.Run("local reply", func(t *testing.T) {
			h2 := newHost(t, `{"lbMethod":"URLHASH","services":[{"name":"a","address":"10.0.0.1:80","enabled":false}]}`)
			r := h2.request("192.0.2.1:1", "198.51.100.1:80", forged...)
			if r.local == nil || r.local.StatusCode != 503 {
				t.Errorf("a request with forged headers and nothing selectable got local reply %+v, want 503", r.local)
			}
		})
	})
}

func TestLocal503WhenNothingSelectable(t *testing.T) {
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		for _, m := range []string{"URLHASH", "ROUNDROBIN", "LEASTCONNECTION"} {
			t.Run(m, func(t *testing.T) {
				h := newHost(t, `{"lbMethod":"`+m+`","debugHeader":true,"services":[{"name":"a","address":"10.0.0.1:80","enabled":false},{"name":"b","address":"10.0.0.2:80","enabled":false}]}`)
				r := h.request("192.0.2.1:1", "198.51.100.1:80", [2]string{":path", "/"})
				if r.local == nil || r.local.StatusCode != 503 || string(r.local.Data) != "no healthy service" {
					t.Fatalf("%s: local reply %+v, want 503 \"no healthy service\"", m, r.local)
				}
				if r.action != types.ActionPause {
					t.Errorf("%s: action %v, want Pause after a local reply", m, r.action)
				}
				if got := get(r.headers, "x-envoy-original-dst-host"); len(got) != 0 {
					t.Errorf("%s: upstream header %v set on a refused request", m, got)
				}
				if n := h.counter("hashlb.decision.no_service"); n != 1 {
					t.Errorf("%s: hashlb.decision.no_service = %d, want 1", m, n)
				}
			})
		}
	})
}

func TestUpstreamCountRankOrder(t *testing.T) {
	config := `{"lbMethod":"SOURCEIPHASH","upstreamCount":3,` + services + `}`
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		h := newHost(t, config)
		for i := 0; i < 10; i++ {
			src := fmt.Sprintf("192.0.2.%d:4000", i+1)
			r := h.request(src, "198.51.100.1:80", [2]string{":path", "/"})
			want := strings.Join(oracle(t, config, lbcore.Request{Source: src}), ",")
			if got := get(r.headers, "x-envoy-original-dst-host"); len(got) != 1 || got[0] != want || strings.Count(want, ",") != 2 {
				t.Fatalf("client %s: upstream header %v, want [%s] (three addresses in rank order)", src, got, want)
			}
		}
	})
}

func TestInvalidConfigRefused(t *testing.T) {
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		h := newHost(t, `{"lbMethod":"URLHASH","hashLength":0,"services":[{"name":"a","address":"10.0.0.1"}]}`)
		if h.started != types.OnPluginStartStatusFailed {
			t.Fatalf("plugin start = %v, want failed", h.started)
		}
		logs := strings.Join(h.GetErrorLogs(), "\n")
		for _, want := range []string{"hashLength: 0 is out of range [1, 4096]", `services[0].address: "10.0.0.1" is not ip:port`} {
			if !strings.Contains(logs, want) {
				t.Errorf("error logs %q do not contain %q", logs, want)
			}
		}
	})
}

func TestDebugHeaderAndMetrics(t *testing.T) {
	config := `{"lbMethod":"CALLIDHASH","debugHeader":true,` + services + `}`
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		h := newHost(t, config)
		r := h.request("192.0.2.1:1", "198.51.100.1:80", [2]string{":path", "/"}, [2]string{"call-id", "abc@host"})
		name := get(r.headers, "x-hashlb-service")
		want := fmt.Sprintf("method=CALLIDHASH; service=%s; reason=hash", name[0])
		if got := get(r.response, "x-hashlb-decision"); len(got) != 1 || got[0] != want {
			t.Errorf("debug header %v, want [%s]", got, want)
		}
		r = h.request("192.0.2.1:1", "198.51.100.1:80", [2]string{":path", "/"}) // no Call-ID: backup
		if got := get(r.response, "x-hashlb-decision"); len(got) != 1 || !strings.Contains(got[0], "method=LEASTCONNECTION") || !strings.Contains(got[0], "reason=backup") {
			t.Errorf("debug header without Call-ID %v, want least connection backup", got)
		}
		if n := h.counter("hashlb.service." + name[0] + ".requests"); n < 1 {
			t.Errorf("hashlb.service.%s.requests = %d, want ≥ 1", name[0], n)
		}
		if n := h.gauge("hashlb.service." + name[0] + ".active"); n != 0 {
			t.Errorf("active gauge after the streams ended = %d, want 0", n)
		}
		if n := h.counter("hashlb.decision.backup"); n != 1 {
			t.Errorf("hashlb.decision.backup = %d, want 1", n)
		}
	})
}

func TestPersistenceSticksAndCounts(t *testing.T) {
	config := `{"lbMethod":"ROUNDROBIN","persistence":{"keys":["${request.header.x-client-id}"]},` + services + `}`
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		h := newHost(t, config)
		if h.started != types.OnPluginStartStatusOK {
			t.Fatalf("plugin refused: %v", h.GetErrorLogs())
		}
		first := map[string]string{}
		spread := map[string]bool{}
		for round := 0; round < 3; round++ {
			for c := 0; c < 8; c++ {
				id := fmt.Sprintf("client-%d", c)
				r := h.request("192.0.2.1:1", "198.51.100.1:80", [2]string{":path", "/"}, [2]string{"x-client-id", id})
				got := get(r.headers, "x-envoy-original-dst-host")[0]
				if round == 0 {
					first[id] = got
					spread[got] = true
				} else if got != first[id] {
					t.Fatalf("round %d: %s went to %s, first to %s", round, id, got, first[id])
				}
			}
		}
		if len(spread) < 3 {
			t.Errorf("8 new clients went to %d services, want round robin to spread them", len(spread))
		}
		hits := h.counter("hashlb.persistence_hit")
		misses := h.counter("hashlb.persistence_miss")
		if hits != 16 || misses != 8 {
			t.Errorf("persistence hits/misses = %d/%d, want 16/8", hits, misses)
		}
		// A request without the key is balanced, not persisted, and counted.
		h.request("192.0.2.1:1", "198.51.100.1:80", [2]string{":path", "/"})
		if n := h.counter("hashlb.persistence_empty_key"); n != 1 {
			t.Errorf("hashlb.persistence_empty_key = %d, want 1", n)
		}
	})
}

// TestMetricsFlushedOnTick: the request path counts in the worker and the
// tick gives the host the counts (no metric host call per request); after a
// tick every counter and gauge is exact.
func TestMetricsFlushedOnTick(t *testing.T) {
	config := `{"lbMethod":"URLHASH",` + services + `}`
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		h := newHost(t, config)
		var first string
		for i := range 5 {
			r := h.request("192.0.2.1:1", "198.51.100.1:80", [2]string{":path", "/same"},
				[2]string{"x-envoy-original-dst-host", "203.0.113.9:80"})
			if i == 0 {
				first = get(r.headers, "x-hashlb-service")[0]
			}
		}
		if n, _ := h.GetCounterMetric("hashlb.service." + first + ".requests"); n != 0 {
			t.Errorf("hashlb.service.%s.requests = %d before a tick, want 0 (counted in the worker)", first, n)
		}
		want := map[string]uint64{"hashlb.service." + first + ".requests": 5, "hashlb.decision.hash": 5}
		for name, v := range want {
			if n := h.counter(name); n != v {
				t.Errorf("%s = %d after a tick, want %d", name, n, v)
			}
		}
		if n := h.gauge("hashlb.service." + first + ".active"); n != 0 {
			t.Errorf("hashlb.service.%s.active = %d after the streams ended and a tick, want 0", first, n)
		}
		// A stream still open counts as active after the tick.
		id := h.InitializeHttpContext()
		h.CallOnRequestHeaders(id, [][2]string{{":path", "/same"}}, true)
		if n := int64(h.gauge("hashlb.service." + first + ".active")); n != 1 {
			t.Errorf("hashlb.service.%s.active = %d with one open stream, want 1", first, n)
		}
		h.CompleteHttpContext(id)
		if n := h.gauge("hashlb.service." + first + ".active"); n != 0 {
			t.Errorf("hashlb.service.%s.active = %d after it ended, want 0", first, n)
		}
		if n := h.counter("hashlb.service." + first + ".requests"); n != 6 {
			t.Errorf("hashlb.service.%s.requests = %d, want 6", first, n)
		}
	})
}

// TestHeaderNamed: the lines kept from the whole header map are the named
// ones, whatever their case, and no other of the same length.
func TestHeaderNamed(t *testing.T) {
	names := []string{"x-tenant", "cookie"}
	for line, want := range map[string]bool{
		"x-tenant": true, "X-Tenant": true, "COOKIE": true, "cookie": true,
		"x-tenanT": true, "y-tenant": false, "cookies": false, "accept": false, "": false, "x-tenan": false,
	} {
		if got := headerNamed(names, line); got != want {
			t.Errorf("headerNamed(%q, %q) = %v, want %v", names, line, got, want)
		}
	}
}

// TestSteerFailureLoggedOnce: a host that refuses the upstream header or
// filter state refuses it on every request; each refusal is counted in
// hashlb.internal_error, and only the first is logged, with the host's
// error and what was being set.
func TestSteerFailureLoggedOnce(t *testing.T) {
	h := startHost(t, &vmContext{}, `{"lbMethod":"URLHASH",`+services+`}`)
	p, ok := sdkState.pluginContexts[proxytest.PluginContextID].context.(*pluginContext)
	if !ok {
		t.Fatal("no hashlb plugin context")
	}
	for range 3 {
		p.steerFailed("filter state ", lbcore.OriginalDstFilterState, types.ErrorStatusNotFound, " (Envoy 1.28 or later is needed)")
	}
	var lines []string
	for _, l := range h.GetErrorLogs() {
		if strings.Contains(l, "hashlb: setting filter state") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], lbcore.OriginalDstFilterState+": "+types.ErrorStatusNotFound.Error()) {
		t.Errorf("error logs %q, want one line naming the filter state and the host's error", lines)
	}
	if n := h.counter("hashlb.internal_error"); n != 3 {
		t.Errorf("hashlb.internal_error = %d, want 3 (every refusal counted)", n)
	}
}
