// Command baseline is a proxy-wasm module that makes the host calls its plugin
// configuration lists, per stream, and decides nothing. The e2e benchmarks
// record the calls hashlb makes for a request under hostsim (Config.Trace) and
// hand them to this module, so hashlb ÷ baseline is the cost of hashlb's own
// work with the cost of its host calls taken out, whatever calls hashlb makes.
//
// Configuration (JSON):
//
//	{"metrics": [{"name": "hashlb.decision.hash", "type": 0}],   // defined at configure; 0 counter, 1 gauge, 2 histogram
//	 "calls": [{"phase": "proxy_on_request_headers", "func": "proxy_get_header_map_value", "map": 0, "key": ":path"},
//	           {"phase": "proxy_on_request_headers", "func": "clock_time_get", "key": "0"}, ...]}
//
// phase is proxy_on_context_create, proxy_on_request_headers,
// proxy_on_response_headers or proxy_on_log. func is a host function as
// hostsim.Call names it (header map get, replace, add, remove and pairs;
// increment_metric and record_metric; get_property; get and set_shared_data;
// log) or "clock_time_get", WASI's clock read with key the clock id.
// value is the header value or metric offset written, size the length of a
// shared-data value. An unknown phase, function or metric refuses the
// configuration.
package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() { proxywasm.SetVMContext(&vmContext{}) }

// abi marks the module as proxy-wasm ABI 0.2.1, as hashlb does.
//
//go:wasmexport proxy_abi_version_0_2_1
func abi() {}

// clockTimeGet is WASI clock_time_get, called directly so that one replayed
// clock read is one host call (time.Now makes two).
//
//go:wasmimport wasi_snapshot_preview1 clock_time_get
func clockTimeGet(id uint32, precision uint64, out unsafe.Pointer) uint32

// clockNanos receives clock_time_get's result.
var clockNanos uint64

type vmContext struct{ types.DefaultVMContext }

// NewPluginContext implements types.VMContext.
func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type call struct {
	Phase string `json:"phase"`
	Func  string `json:"func"`
	Map   int    `json:"map"`
	Key   string `json:"key"`
	Value string `json:"value"`
	Size  int    `json:"size"`
}

type recipe struct {
	Metrics []struct {
		Name string `json:"name"`
		Type int    `json:"type"`
	} `json:"metrics"`
	Calls []call `json:"calls"`
}

type pluginContext struct {
	types.DefaultPluginContext
	phases map[string][]func()
}

var phaseNames = []string{"proxy_on_context_create", "proxy_on_request_headers", "proxy_on_response_headers", "proxy_on_log"}

// OnPluginStart implements types.PluginContext.
func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil && err != types.ErrorStatusNotFound {
		proxywasm.LogCriticalf("baseline: reading the configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	var r recipe
	if len(data) > 0 {
		if err := json.Unmarshal(data, &r); err != nil {
			proxywasm.LogCriticalf("baseline: %v", err)
			return types.OnPluginStartStatusFailed
		}
	}
	if p.phases, err = compile(r); err != nil {
		proxywasm.LogCriticalf("baseline: %v", err)
		return types.OnPluginStartStatusFailed
	}
	return types.OnPluginStartStatusOK
}

func compile(r recipe) (map[string][]func(), error) {
	counters := map[string]proxywasm.MetricCounter{}
	gauges := map[string]proxywasm.MetricGauge{}
	hists := map[string]proxywasm.MetricHistogram{}
	for _, m := range r.Metrics {
		switch m.Type {
		case 0:
			counters[m.Name] = proxywasm.DefineCounterMetric(m.Name)
		case 1:
			gauges[m.Name] = proxywasm.DefineGaugeMetric(m.Name)
		case 2:
			hists[m.Name] = proxywasm.DefineHistogramMetric(m.Name)
		default:
			return nil, fmt.Errorf("metric %s: unknown type %d", m.Name, m.Type)
		}
	}
	phases := map[string][]func(){}
	for _, n := range phaseNames {
		phases[n] = nil
	}
	for i, c := range r.Calls {
		if _, ok := phases[c.Phase]; !ok {
			return nil, fmt.Errorf("calls[%d]: unknown phase %q", i, c.Phase)
		}
		f, err := op(c, counters, gauges, hists)
		if err != nil {
			return nil, fmt.Errorf("calls[%d]: %v", i, err)
		}
		phases[c.Phase] = append(phases[c.Phase], f)
	}
	return phases, nil
}

func op(c call, counters map[string]proxywasm.MetricCounter, gauges map[string]proxywasm.MetricGauge, hists map[string]proxywasm.MetricHistogram) (func(), error) {
	key, value := c.Key, c.Value
	req := c.Map == 0
	if c.Map != 0 && c.Map != 2 && strings.Contains(c.Func, "header_map") {
		return nil, fmt.Errorf("%s: header map %d", c.Func, c.Map)
	}
	n, _ := strconv.ParseInt(value, 10, 64)
	switch c.Func {
	case "clock_time_get":
		id, err := strconv.ParseUint(key, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("clock_time_get: clock id %q", key)
		}
		return func() { clockTimeGet(uint32(id), 1, unsafe.Pointer(&clockNanos)) }, nil
	case "proxy_get_header_map_value":
		if req {
			return func() { _, _ = proxywasm.GetHttpRequestHeader(key) }, nil
		}
		return func() { _, _ = proxywasm.GetHttpResponseHeader(key) }, nil
	case "proxy_get_header_map_pairs":
		if req {
			return func() { _, _ = proxywasm.GetHttpRequestHeaders() }, nil
		}
		return func() { _, _ = proxywasm.GetHttpResponseHeaders() }, nil
	case "proxy_replace_header_map_value":
		if req {
			return func() { _ = proxywasm.ReplaceHttpRequestHeader(key, value) }, nil
		}
		return func() { _ = proxywasm.ReplaceHttpResponseHeader(key, value) }, nil
	case "proxy_add_header_map_value":
		if req {
			return func() { _ = proxywasm.AddHttpRequestHeader(key, value) }, nil
		}
		return func() { _ = proxywasm.AddHttpResponseHeader(key, value) }, nil
	case "proxy_remove_header_map_value":
		if req {
			return func() { _ = proxywasm.RemoveHttpRequestHeader(key) }, nil
		}
		return func() { _ = proxywasm.RemoveHttpResponseHeader(key) }, nil
	case "proxy_increment_metric", "proxy_record_metric":
		if m, ok := counters[key]; ok {
			return func() { m.Increment(uint64(n)) }, nil
		}
		if m, ok := gauges[key]; ok && c.Func == "proxy_increment_metric" {
			return func() { m.Add(n) }, nil
		}
		if m, ok := hists[key]; ok && c.Func == "proxy_record_metric" {
			return func() { m.Record(uint64(n)) }, nil
		}
		return nil, fmt.Errorf("%s: no metric %q of that kind", c.Func, key)
	case "proxy_get_property":
		path := strings.Split(key, ".")
		return func() { _, _ = proxywasm.GetProperty(path) }, nil
	case "proxy_get_shared_data":
		return func() { _, _, _ = proxywasm.GetSharedData(key) }, nil
	case "proxy_set_shared_data":
		data := make([]byte, c.Size)
		return func() { _ = proxywasm.SetSharedData(key, data, 0) }, nil
	case "proxy_log":
		msg := strings.Repeat("x", c.Size)
		switch key {
		case "0":
			return func() { proxywasm.LogTrace(msg) }, nil
		case "1":
			return func() { proxywasm.LogDebug(msg) }, nil
		case "2":
			return func() { proxywasm.LogInfo(msg) }, nil
		case "3":
			return func() { proxywasm.LogWarn(msg) }, nil
		case "4":
			return func() { proxywasm.LogError(msg) }, nil
		}
		return func() { proxywasm.LogCritical(msg) }, nil
	}
	return nil, fmt.Errorf("unsupported function %q", c.Func)
}

func run(fs []func()) {
	for _, f := range fs {
		f()
	}
}

// NewHttpContext implements types.PluginContext.
func (p *pluginContext) NewHttpContext(uint32) types.HttpContext {
	run(p.phases["proxy_on_context_create"])
	return &httpContext{req: p.phases["proxy_on_request_headers"], resp: p.phases["proxy_on_response_headers"], log: p.phases["proxy_on_log"]}
}

type httpContext struct {
	types.DefaultHttpContext
	req, resp, log []func()
}

// OnHttpRequestHeaders implements types.HttpContext.
func (h *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	run(h.req)
	return types.ActionContinue
}

// OnHttpResponseHeaders implements types.HttpContext.
func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	run(h.resp)
	return types.ActionContinue
}

// OnHttpStreamDone implements types.HttpContext (proxy_on_log).
func (h *httpContext) OnHttpStreamDone() { run(h.log) }
