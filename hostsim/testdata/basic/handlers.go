package main

import (
	"strings"
	"unsafe"

	"github.com/hashlb/hashlb/hostsim/testdata/guest"
)

var (
	requests uint32 // counter metric id
	gauge    uint32
	hist     uint32
	config   string
	// roots holds each root context's configuration; held, the roots whose
	// proxy_on_done returned false (configuration "hold").
	roots = map[uint32]string{}
	held  = map[uint32]bool{}
)

//go:wasmexport proxy_on_context_create
func onContextCreate(id, root uint32) {
	guest.Release()
	if root == 0 {
		c, st := guest.Buffer(7)
		logf(2, "create root: plugin config "+itoa(int64(st))+" "+c)
		logf(0, "root "+itoa(int64(id))+" created")
	}
}

//go:wasmexport proxy_on_vm_start
func onVMStart(root, size uint32) uint32 {
	guest.Release()
	_, st := guest.Buffer(7)
	vmc, _ := guest.Buffer(6)
	logf(2, "vm start: plugin config status "+itoa(int64(st))+", vm config "+vmc)
	return 1
}

//go:wasmexport proxy_on_configure
func onConfigure(root, size uint32) uint32 {
	guest.Release()
	config, _ = guest.Buffer(7)
	roots[root] = config
	logf(2, "configure: "+config)
	for _, m := range []struct {
		t    uint32
		name string
		id   *uint32
	}{{0, "requests", &requests}, {1, "inflight", &gauge}, {2, "latency", &hist}} {
		proxyDefineMetric(m.t, guest.Ptr(m.name), uint32(len(m.name)), unsafe.Pointer(m.id))
	}
	if i := strings.Index(config, "tick="); i >= 0 {
		proxySetTickPeriod(uint32(atoi(config[i+5:])))
	}
	return boolU32(config != "bad")
}

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

//go:wasmexport proxy_on_tick
func onTick(root uint32) {
	guest.Release()
	var now uint64
	proxyGetTime(unsafe.Pointer(&now))
	logf(2, "tick "+itoa(int64(now/1e9)))
	logf(0, "root "+itoa(int64(root))+" tick")
	if held[root] {
		logf(0, "root "+itoa(int64(root))+" proxy_done "+itoa(int64(proxyDone())))
	}
}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(id, n uint32, eos bool) uint32 {
	guest.Release()
	proxyIncrementMetric(requests, 1)
	proxyIncrementMetric(gauge, 5)
	proxyIncrementMetric(gauge, -2)
	proxyRecordMetric(hist, 42)
	path, _ := guest.GetHeader(0, ":path")
	switch {
	case path == "/local":
		body, hs := "denied", guest.Pairs([][2]string{{"x-local", "yes"}})
		proxySendLocalResponse(403, guest.Ptr("test_denied"), 11, guest.Ptr(body), uint32(len(body)), unsafe.Pointer(&hs[0]), uint32(len(hs)), -1)
		return 1
	case path == "/trap":
		var m map[string]int
		m["x"] = 1 // nil map write: a Go panic, the VM traps
	case strings.HasPrefix(path, "/props"):
		for _, p := range []string{"source\x00address", "source.address", "source\x00port", "connection\x00mtls", "plugin_name", "request\x00url_path", "custom\x00thing"} {
			v, st := property(p)
			guest.SetHeader(0, "x-prop-"+strings.ReplaceAll(strings.ReplaceAll(p, "\x00", "/"), ".", "_"), itoa(int64(st))+":"+hexOf(v))
		}
	case strings.HasPrefix(path, "/shared/"):
		sharedOp(path[len("/shared/"):])
	case path == "/call":
		hs := guest.Pairs([][2]string{{":method", "GET"}, {":path", "/probe"}, {":authority", "svc"}})
		var tok uint32
		st := proxyHTTPCall(guest.Ptr("cluster"), 7, unsafe.Pointer(&hs[0]), uint32(len(hs)), nil, 0, nil, 0, 1000, unsafe.Pointer(&tok))
		guest.SetHeader(0, "x-call", itoa(int64(st))+":"+itoa(int64(tok)))
		bad := guest.Pairs([][2]string{{":method", "GET"}, {":path", "/probe"}})
		st = proxyHTTPCall(guest.Ptr("cluster"), 7, unsafe.Pointer(&bad[0]), uint32(len(bad)), nil, 0, nil, 0, 1000, unsafe.Pointer(&tok))
		guest.SetHeader(0, "x-call-bad", itoa(int64(st)))
	case path == "/metrics":
		var v uint64
		proxyGetMetric(gauge, unsafe.Pointer(&v))
		st := proxyGetMetric(hist, unsafe.Pointer(&v))
		guest.SetHeader(0, "x-gauge-hist", itoa(int64(v))+":"+itoa(int64(st)))
		var lvl uint32
		proxyGetLogLevel(unsafe.Pointer(&lvl))
		guest.SetHeader(0, "x-log-level", itoa(int64(lvl)))
	}
	var size uint32
	proxyGetHeaderSize(0, unsafe.Pointer(&size))
	guest.SetHeader(0, "x-size", itoa(int64(size)))
	addr, _ := property("source\x00address")
	guest.SetHeader(0, "x-upstream", addr)
	logf(1, "request "+path)
	return 0
}

//go:wasmexport proxy_on_response_headers
func onResponseHeaders(id, n uint32, eos bool) uint32 {
	guest.Release()
	_, st := guest.GetHeader(0, ":path")
	guest.SetHeader(2, "x-req-status", itoa(int64(st)))
	guest.SetHeader(2, "x-seen", "1")
	return 0
}

//go:wasmexport proxy_on_log
func onLog(id uint32) {
	guest.Release()
	p, st := guest.GetHeader(0, ":path")
	wst := guest.SetHeader(0, "x-late", "1")
	logf(2, "log "+p+" read "+itoa(int64(st))+" write "+itoa(int64(wst)))
}

//go:wasmexport proxy_on_done
func onDone(id uint32) bool {
	c, ok := roots[id]
	if !ok {
		return true
	}
	logf(0, "root "+itoa(int64(id))+" done")
	if strings.Contains(c, "hold") {
		held[id] = true
		return false
	}
	return true
}

//go:wasmexport proxy_on_delete
func onDelete(id uint32) {
	if _, ok := roots[id]; ok {
		logf(0, "root "+itoa(int64(id))+" deleted")
		delete(roots, id)
		delete(held, id)
	}
}

//go:wasmexport proxy_on_http_call_response
func onHTTPCallResponse(root, token, nh, bodySize, nt uint32) {
	guest.Release()
	body, _ := guest.Buffer(4)
	st, _ := guest.GetHeader(6, ":status")
	logf(2, "callout "+itoa(int64(token))+" status "+st+" body "+body)
}

func hexOf(s string) string {
	const d = "0123456789abcdef"
	b := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		b = append(b, d[s[i]>>4], d[s[i]&15])
	}
	return string(b)
}

// sharedOp runs "get/KEY" or "set/KEY/VALUE/CAS" and reports the result in
// the x-shared header as "status:cas:value".
func sharedOp(op string) {
	parts := strings.Split(op, "/")
	switch parts[0] {
	case "get":
		var p, n, cas uint32
		st := proxyGetSharedData(guest.Ptr(parts[1]), uint32(len(parts[1])), unsafe.Pointer(&p), unsafe.Pointer(&n), unsafe.Pointer(&cas))
		guest.SetHeader(0, "x-shared", itoa(int64(st))+":"+itoa(int64(cas))+":"+guest.BytesAt(p, n))
	case "set":
		st := proxySetSharedData(guest.Ptr(parts[1]), uint32(len(parts[1])), guest.Ptr(parts[2]), uint32(len(parts[2])), uint32(atoi(parts[3])))
		guest.SetHeader(0, "x-shared", itoa(int64(st)))
	}
}
