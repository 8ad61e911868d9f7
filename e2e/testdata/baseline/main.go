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
// Each call is made with the host function imported directly (no SDK helper).
// phase is proxy_on_context_create, proxy_on_request_headers,
// proxy_on_response_headers or proxy_on_log. func is a host function as
// hostsim.Call names it (header map get, replace, add, remove and pairs;
// increment_metric and record_metric; get_property; get and set_shared_data;
// log) or "clock_time_get", WASI's clock read with key the clock id.
// value is the header value or metric offset written, size the length of a
// shared-data value (for get_shared_data, of the value hashlb's read found:
// the baseline stores one that long under the key when it starts, so its
// read finds a value and the host copies it, as for hashlb). An unknown phase, function or metric refuses the
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

	"github.com/hashlb/hashlb/e2e/testdata/sdkguest"
)

func main() {}

func init() { sdkguest.Start(func() types.PluginContext { return &pluginContext{} }) }

// clockTimeGet is WASI clock_time_get, called directly so that one replayed
// clock read is one host call (time.Now makes two).
//
//go:wasmimport wasi_snapshot_preview1 clock_time_get
func clockTimeGet(id uint32, precision uint64, out unsafe.Pointer) uint32

// clockNanos receives clock_time_get's result.
var clockNanos uint64

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
	free   []*httpContext
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
	key, value := []byte(c.Key), []byte(c.Value)
	if strings.Contains(c.Func, "header_map") && c.Map != 0 && c.Map != 2 {
		return nil, fmt.Errorf("%s: header map %d", c.Func, c.Map)
	}
	typ := uint32(c.Map)
	n, _ := strconv.ParseInt(c.Value, 10, 64)
	switch c.Func {
	case "clock_time_get":
		id, err := strconv.ParseUint(c.Key, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("clock_time_get: clock id %q", c.Key)
		}
		return func() { clockTimeGet(uint32(id), 1, unsafe.Pointer(&clockNanos)) }, nil
	case "proxy_get_header_map_value":
		return func() { getHeaderMapValue(typ, ptr(key), size(key), unsafe.Pointer(&retPtr), &retSize) }, nil
	case "proxy_get_header_map_pairs":
		return func() { getHeaderMapPairs(typ, unsafe.Pointer(&retPtr), &retSize) }, nil
	case "proxy_replace_header_map_value":
		return func() { replaceHeaderMapValue(typ, ptr(key), size(key), ptr(value), size(value)) }, nil
	case "proxy_add_header_map_value":
		return func() { addHeaderMapValue(typ, ptr(key), size(key), ptr(value), size(value)) }, nil
	case "proxy_remove_header_map_value":
		return func() { removeHeaderMapValue(typ, ptr(key), size(key)) }, nil
	case "proxy_increment_metric", "proxy_record_metric":
		var id uint32
		if m, ok := counters[c.Key]; ok {
			id = uint32(m)
		} else if m, ok := gauges[c.Key]; ok {
			id = uint32(m)
		} else if m, ok := hists[c.Key]; ok {
			id = uint32(m)
		} else {
			return nil, fmt.Errorf("%s: no metric %q", c.Func, c.Key)
		}
		if c.Func == "proxy_increment_metric" {
			return func() { incrementMetric(id, n) }, nil
		}
		return func() { recordMetric(id, uint64(n)) }, nil
	case "proxy_get_property":
		path := []byte(strings.ReplaceAll(c.Key, ".", "\x00"))
		return func() { getProperty(ptr(path), size(path), unsafe.Pointer(&retPtr), &retSize) }, nil
	case "proxy_get_shared_data":
		if c.Size > 0 {
			// hashlb's read found a value of that size (its bucket): the
			// baseline's finds one as long, stored now, outside any stream,
			// so the host copies as much for it.
			data := make([]byte, c.Size)
			setSharedData(ptr(key), size(key), ptr(data), size(data), 0)
		}
		var cas uint32
		return func() { getSharedData(ptr(key), size(key), unsafe.Pointer(&retPtr), &retSize, &cas) }, nil
	case "proxy_set_shared_data":
		data := make([]byte, c.Size)
		return func() { setSharedData(ptr(key), size(key), ptr(data), size(data), 0) }, nil
	case "proxy_log":
		level, _ := strconv.ParseUint(c.Key, 10, 32)
		msg := []byte(strings.Repeat("x", c.Size))
		return func() { proxyLog(uint32(level), ptr(msg), size(msg)) }, nil
	}
	return nil, fmt.Errorf("unsupported function %q", c.Func)
}

func ptr(b []byte) *byte {
	if len(b) == 0 {
		return nil
	}
	return &b[0]
}

func size(b []byte) uint32 { return uint32(len(b)) }

// retPtr and retSize receive what the host returns (it allocates through the
// SDK's malloc export, as for hashlb); the baseline never reads it.
var (
	retPtr  uint32
	retSize uint32
)

// The host functions, imported directly: a replayed call is the host call and
// nothing else (no SDK helper copying or wrapping errors), so R2 charges
// hashlb for everything but the calls themselves.

//go:wasmimport env proxy_get_header_map_value
func getHeaderMapValue(typ uint32, key *byte, keySize uint32, ret unsafe.Pointer, retSize *uint32) uint32

//go:wasmimport env proxy_get_header_map_pairs
func getHeaderMapPairs(typ uint32, ret unsafe.Pointer, retSize *uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
func replaceHeaderMapValue(typ uint32, key *byte, keySize uint32, value *byte, valueSize uint32) uint32

//go:wasmimport env proxy_add_header_map_value
func addHeaderMapValue(typ uint32, key *byte, keySize uint32, value *byte, valueSize uint32) uint32

//go:wasmimport env proxy_remove_header_map_value
func removeHeaderMapValue(typ uint32, key *byte, keySize uint32) uint32

//go:wasmimport env proxy_increment_metric
func incrementMetric(id uint32, offset int64) uint32

//go:wasmimport env proxy_record_metric
func recordMetric(id uint32, value uint64) uint32

//go:wasmimport env proxy_get_property
func getProperty(path *byte, pathSize uint32, ret unsafe.Pointer, retSize *uint32) uint32

//go:wasmimport env proxy_get_shared_data
func getSharedData(key *byte, keySize uint32, ret unsafe.Pointer, retSize *uint32, cas *uint32) uint32

//go:wasmimport env proxy_set_shared_data
func setSharedData(key *byte, keySize uint32, value *byte, valueSize uint32, cas uint32) uint32

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg *byte, size uint32) uint32

func run(fs []func()) {
	scratchOn = true
	for _, f := range fs {
		f()
	}
	scratchOn = false
}

// scratch serves the host's copies (cpp-host calls the module's malloc
// export for every value it returns) while replayed calls run: the baseline
// never reads them, so every copy may start at the same place, and a stream
// makes no garbage, as hashlb's arena makes none. Outside replayed calls (the
// configuration, which the SDK reads) malloc is Go memory.
var (
	scratch   [1 << 20]byte
	scratchOn bool
)

//go:wasmexport malloc
func hostMalloc(size uint32) *byte {
	if scratchOn && size > 0 && size <= uint32(len(scratch)) {
		return &scratch[0]
	}
	buf := make([]byte, max(size, 1))
	return &buf[0]
}

// NewHttpContext implements types.PluginContext. Contexts whose stream has
// ended are reused, as hashlb reuses its own.
func (p *pluginContext) NewHttpContext(uint32) types.HttpContext {
	run(p.phases["proxy_on_context_create"])
	if n := len(p.free); n > 0 {
		h := p.free[n-1]
		p.free = p.free[:n-1]
		return h
	}
	return &httpContext{p: p, req: p.phases["proxy_on_request_headers"], resp: p.phases["proxy_on_response_headers"], log: p.phases["proxy_on_log"]}
}

type httpContext struct {
	types.DefaultHttpContext
	p              *pluginContext
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
func (h *httpContext) OnHttpStreamDone() {
	run(h.log)
	h.p.free = append(h.p.free, h)
}
