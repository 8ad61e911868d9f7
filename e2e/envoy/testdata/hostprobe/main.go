// Command hostprobe is a proxy-wasm test module (raw ABI, no SDK) that asks
// its host the questions docs/envoy-host.md answers, and logs each answer
// as one line "probe NAME = RESULT" at info. e2e/envoy runs it in real Envoy
// and under hostsim and compares the lines: where they differ, Envoy is
// right and hostsim is wrong.
//
// At proxy_on_configure it probes WASI return codes, shared data, the log
// level, properties of the root context and proxy_http_call's argument
// checks (the cluster is named by the plugin configuration); it then makes
// one callout to that cluster, whose host is expected to refuse
// connections, and logs how it fails. Each request's headers are probed in
// proxy_on_request_headers (properties, header map reads, replace over
// several copies of x-probe) and, after Continue, in
// proxy_on_response_headers (reading the request's headers again).
package main

import (
	"encoding/binary"
	"strconv"
	"unsafe"
)

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(typ, start, max uint32, ptr, size unsafe.Pointer) uint32

//go:wasmimport env proxy_get_property
func proxyGetProperty(path unsafe.Pointer, pathSize uint32, ptr, size unsafe.Pointer) uint32

//go:wasmimport env proxy_get_shared_data
func proxyGetSharedData(key unsafe.Pointer, keySize uint32, ptr, size, cas unsafe.Pointer) uint32

//go:wasmimport env proxy_set_shared_data
func proxySetSharedData(key unsafe.Pointer, keySize uint32, val unsafe.Pointer, valSize uint32, cas uint32) uint32

//go:wasmimport env proxy_get_log_level
func proxyGetLogLevel(level unsafe.Pointer) uint32

//go:wasmimport env proxy_get_header_map_value
func proxyGetHeader(typ uint32, key unsafe.Pointer, keySize uint32, ptr, size unsafe.Pointer) uint32

//go:wasmimport env proxy_get_header_map_size
func proxyGetHeaderMapSize(typ uint32, size unsafe.Pointer) uint32

//go:wasmimport env proxy_get_header_map_pairs
func proxyGetHeaderPairs(typ uint32, ptr, size unsafe.Pointer) uint32

//go:wasmimport env proxy_replace_header_map_value
func proxyReplaceHeader(typ uint32, key unsafe.Pointer, keySize uint32, val unsafe.Pointer, valSize uint32) uint32

//go:wasmimport env proxy_http_call
func proxyHTTPCall(up unsafe.Pointer, upSize uint32, hs unsafe.Pointer, hsSize uint32, body unsafe.Pointer, bodySize uint32, tr unsafe.Pointer, trSize uint32, timeout uint32, token unsafe.Pointer) uint32

//go:wasmimport env proxy_get_status
func proxyGetStatus(code, ptr, size unsafe.Pointer) uint32

//go:wasmimport env proxy_continue_stream
func proxyContinueStream(typ uint32) uint32

//go:wasmimport env proxy_close_stream
func proxyCloseStream(typ uint32) uint32

//go:wasmimport wasi_snapshot_preview1 clock_time_get
func clockTimeGet(id uint32, precision uint64, t unsafe.Pointer) uint32

//go:wasmimport wasi_snapshot_preview1 random_get
func randomGet(buf unsafe.Pointer, n uint32) uint32

//go:wasmimport wasi_snapshot_preview1 fd_write
func fdWrite(fd uint32, iovs unsafe.Pointer, n uint32, written unsafe.Pointer) uint32

//go:wasmimport wasi_snapshot_preview1 fd_fdstat_get
func fdFdstatGet(fd uint32, st unsafe.Pointer) uint32

//go:wasmimport wasi_snapshot_preview1 fd_fdstat_set_flags
func fdFdstatSetFlags(fd uint32, flags uint32) uint32

//go:wasmimport wasi_snapshot_preview1 fd_prestat_get
func fdPrestatGet(fd uint32, p unsafe.Pointer) uint32

//go:wasmimport wasi_snapshot_preview1 poll_oneoff
func pollOneoff(in, out unsafe.Pointer, n uint32, nevents unsafe.Pointer) uint32

//go:wasmimport wasi_snapshot_preview1 sched_yield
func schedYield() uint32

// keep holds the buffers handed to the host until the next callback.
var keep [][]byte

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) unsafe.Pointer {
	b := make([]byte, size+1)
	keep = append(keep, b)
	return unsafe.Pointer(&b[0])
}

//go:wasmexport proxy_on_context_create
func onContextCreate(id, root uint32) {}

//go:wasmexport proxy_on_vm_start
func onVMStart(root, size uint32) uint32 { return 1 }

func logf(msg string) {
	proxyLog(2, unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
}

func probe(name string, result string) { logf("probe " + name + " = " + result) }

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

func ptr(s string) (unsafe.Pointer, uint32) {
	if s == "" {
		return nil, 0
	}
	return unsafe.Pointer(unsafe.StringData(s)), uint32(len(s))
}

func bytesAt(p unsafe.Pointer, n uint32) string {
	if p == nil || n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(p), n))
}

func property(path ...string) (uint32, string) {
	var joined string
	for i, p := range path {
		if i > 0 {
			joined += "\x00"
		}
		joined += p
	}
	var vp unsafe.Pointer
	var vs uint32
	kp, ks := ptr(joined)
	st := proxyGetProperty(kp, ks, unsafe.Pointer(&vp), unsafe.Pointer(&vs))
	return st, bytesAt(vp, vs)
}

func header(typ uint32, name string) (uint32, string) {
	var vp unsafe.Pointer
	var vs uint32
	kp, ks := ptr(name)
	st := proxyGetHeader(typ, kp, ks, unsafe.Pointer(&vp), unsafe.Pointer(&vs))
	return st, bytesAt(vp, vs)
}

// pairs encodes header pairs as the ABI's map: count, sizes, then each
// name and value NUL-terminated.
func pairs(kv ...string) []byte {
	n := len(kv) / 2
	b := binary.LittleEndian.AppendUint32(nil, uint32(n))
	for _, s := range kv {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	}
	for _, s := range kv {
		b = append(b, s...)
		b = append(b, 0)
	}
	return b
}

func httpCall(cluster string, hs []byte, timeout uint32) (uint32, uint32) {
	var token uint32
	cp, cs := ptr(cluster)
	st := proxyHTTPCall(cp, cs, unsafe.Pointer(&hs[0]), uint32(len(hs)), nil, 0, nil, 0, timeout, unsafe.Pointer(&token))
	return st, token
}

var callToken, silentToken, resetToken uint32

//go:wasmexport proxy_on_configure
func onConfigure(root, size uint32) uint32 {
	var cp unsafe.Pointer
	var cs uint32
	proxyGetBufferBytes(7, 0, size, unsafe.Pointer(&cp), unsafe.Pointer(&cs)) // PLUGIN_CONFIGURATION
	// "DEAD SILENT RESET": a refused host, one that never answers, one that
	// closes the connection after reading the request.
	var names []string
	start := 0
	all := bytesAt(cp, cs)
	for i := 0; i <= len(all); i++ {
		if i == len(all) || all[i] == ' ' {
			names = append(names, all[start:i])
			start = i + 1
		}
	}
	for len(names) < 3 {
		names = append(names, "")
	}
	cluster, silent, reset := names[0], names[1], names[2]

	var t uint64
	probe("wasi.clock_time_get(realtime)", itoa(clockTimeGet(0, 1, unsafe.Pointer(&t))))
	probe("wasi.clock_time_get(monotonic)", itoa(clockTimeGet(1, 1, unsafe.Pointer(&t))))
	probe("wasi.clock_time_get(id 2)", itoa(clockTimeGet(2, 1, unsafe.Pointer(&t))))
	buf := make([]byte, 65537)
	probe("wasi.random_get(64 KiB)", itoa(randomGet(unsafe.Pointer(&buf[0]), 65536)))
	probe("wasi.random_get(64 KiB + 1)", itoa(randomGet(unsafe.Pointer(&buf[0]), 65537)))
	msg := []byte("probe line on fd 3\n")
	iov := [2]uint32{uint32(uintptr(unsafe.Pointer(&msg[0]))), uint32(len(msg))}
	var written uint32
	probe("wasi.fd_write(fd 3)", itoa(fdWrite(3, unsafe.Pointer(&iov[0]), 1, unsafe.Pointer(&written))))
	var st [3]uint64
	r := fdFdstatGet(1, unsafe.Pointer(&st[0]))
	probe("wasi.fd_fdstat_get(fd 1)", itoa(r)+" words "+strconv.FormatUint(st[0], 10)+","+strconv.FormatUint(st[1], 10)+","+strconv.FormatUint(st[2], 10))
	probe("wasi.fd_fdstat_get(fd 3)", itoa(fdFdstatGet(3, unsafe.Pointer(&st[0]))))
	probe("wasi.fd_fdstat_set_flags(fd 1, NONBLOCK)", itoa(fdFdstatSetFlags(1, 4)))
	var pre [8]byte
	probe("wasi.fd_prestat_get(fd 3)", itoa(fdPrestatGet(3, unsafe.Pointer(&pre[0]))))
	var in [48]byte
	var out [32]byte
	nevents := uint32(7)
	r = pollOneoff(unsafe.Pointer(&in[0]), unsafe.Pointer(&out[0]), 1, unsafe.Pointer(&nevents))
	probe("wasi.poll_oneoff", itoa(r)+" nevents "+itoa(nevents))
	probe("wasi.sched_yield", itoa(schedYield()))

	var level uint32 = 99
	r = proxyGetLogLevel(unsafe.Pointer(&level))
	probe("proxy_get_log_level", itoa(r)+" level "+itoa(level))

	// A key no other VM of this process has written.
	var rnd [8]byte
	randomGet(unsafe.Pointer(&rnd[0]), 8)
	key := "hostprobe/" + strconv.FormatUint(binary.LittleEndian.Uint64(rnd[:]), 16)
	kp, ks := ptr(key)
	var vp unsafe.Pointer
	var vs, cas uint32
	probe("shared.get(missing)", itoa(proxyGetSharedData(kp, ks, unsafe.Pointer(&vp), unsafe.Pointer(&vs), unsafe.Pointer(&cas))))
	val := "v1"
	valp, vals := ptr(val)
	probe("shared.set(missing, cas 12345)", itoa(proxySetSharedData(kp, ks, valp, vals, 12345)))
	r = proxyGetSharedData(kp, ks, unsafe.Pointer(&vp), unsafe.Pointer(&vs), unsafe.Pointer(&cas))
	probe("shared.get(after set)", itoa(r)+" value "+bytesAt(vp, vs))
	probe("shared.set(wrong cas)", itoa(proxySetSharedData(kp, ks, valp, vals, cas+1000)))
	probe("shared.set(right cas)", itoa(proxySetSharedData(kp, ks, valp, vals, cas)))
	probe("shared.set(cas 0)", itoa(proxySetSharedData(kp, ks, valp, vals, 0)))

	for _, p := range [][]string{{"plugin_name"}, {"plugin_root_id"}, {"plugin_vm_id"}, {"plugin_name.x"}, {"source", "address"}} {
		r, v := property(p...)
		name := ""
		for i, s := range p {
			if i > 0 {
				name += "/"
			}
			name += s
		}
		probe("root.property("+name+")", itoa(r)+" "+strconv.Quote(v))
	}

	ok := pairs(":method", "GET", ":path", "/", ":authority", "probe")
	r, _ = httpCall("no_such_cluster", ok, 1000)
	probe("http_call(unknown cluster)", itoa(r))
	r, _ = httpCall(cluster, pairs(":method", "GET", ":path", "/"), 1000)
	probe("http_call(no :authority)", itoa(r))
	r, _ = httpCall(cluster, pairs(":method", "GET", ":authority", "probe"), 1000)
	probe("http_call(no :path)", itoa(r))
	r, _ = httpCall(cluster, ok, 1<<31)
	probe("http_call(timeout 2^31 ms)", itoa(r))
	r, callToken = httpCall(cluster, ok, 2000)
	probe("http_call(refused host)", itoa(r))
	r, silentToken = httpCall(silent, ok, 300)
	probe("http_call(silent host, 300 ms)", itoa(r))
	r, resetToken = httpCall(reset, ok, 2000)
	probe("http_call(resetting host)", itoa(r))

	probe("root.continue_stream", itoa(proxyContinueStream(0)))
	probe("root.close_stream", itoa(proxyCloseStream(0)))
	return 1
}

//go:wasmexport proxy_on_http_call_response
func onHTTPCallResponse(root, token, nheaders, bodySize, ntrailers uint32) {
	var code uint32
	var mp unsafe.Pointer
	var ms uint32
	r := proxyGetStatus(unsafe.Pointer(&code), unsafe.Pointer(&mp), unsafe.Pointer(&ms))
	name := "http_call(unexpected token).response"
	switch token {
	case callToken:
		name = "http_call(refused host).response"
	case silentToken:
		name = "http_call(silent host, 300 ms).response"
	case resetToken:
		name = "http_call(resetting host).response"
	}
	_, status := header(6, ":status") // HTTP_CALL_RESPONSE_HEADERS
	var bp unsafe.Pointer
	var bs uint32
	proxyGetBufferBytes(4, 0, bodySize, unsafe.Pointer(&bp), unsafe.Pointer(&bs)) // HTTP_CALL_RESPONSE_BODY
	probe(name, "headers "+itoa(nheaders)+" :status "+strconv.Quote(status)+" trailers "+itoa(ntrailers)+
		" get_status "+itoa(r)+" code "+itoa(code)+" "+strconv.Quote(bytesAt(mp, ms)))
	probe(name+".body", strconv.Quote(bytesAt(bp, bs)))
	var hp unsafe.Pointer
	var hs uint32
	proxyGetHeaderPairs(6, unsafe.Pointer(&hp), unsafe.Pointer(&hs))
	probe(name+".header names", headerNames(hp, hs))
}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(id, n uint32, eos uint32) uint32 {
	keep = keep[:0]
	if p, _ := header(0, "x-probe-quiet"); p == 0 {
		return 0
	}
	r, v := property("source", "address")
	probe("stream.property(source/address) is ip:port", itoa(r)+" "+strconv.FormatBool(isIPPort(v)))
	r, _ = property("source.address")
	probe("stream.property(source.address as one segment)", itoa(r))
	r, v = property("request", "path")
	probe("stream.property(request/path)", itoa(r)+" "+strconv.Quote(v))
	r, v = header(0, "X-Probe")
	probe("stream.get(X-Probe, mixed case, 2 copies)", itoa(r)+" "+strconv.Quote(v))
	r, _ = header(0, "x-missing")
	probe("stream.get(missing)", itoa(r))
	var size uint32
	r = proxyGetHeaderMapSize(0, unsafe.Pointer(&size))
	var pp unsafe.Pointer
	var ps uint32
	proxyGetHeaderPairs(0, unsafe.Pointer(&pp), unsafe.Pointer(&ps))
	probe("stream.header_map_size is the bytes of names and values", itoa(r)+" "+strconv.FormatBool(size == pairBytes(pp, ps)))
	vk, vks := ptr("x-probe")
	nv, nvs := ptr("replaced")
	probe("stream.replace(x-probe)", itoa(proxyReplaceHeader(0, vk, vks, nv, nvs)))
	probe("stream.copies of x-probe after replace", itoa(countPairs(0, "x-probe")))
	return 0
}

//go:wasmexport proxy_on_response_headers
func onResponseHeaders(id, n uint32, eos uint32) uint32 {
	keep = keep[:0]
	r, _ := header(0, ":path")
	if r == 0 {
		return 0 // a host that keeps the request headers: quiet or not, say nothing
	}
	probe("stream.request headers after Continue", itoa(r))
	return 0
}

// pairBytes sums the lengths of the names and values in an encoded map.
func pairBytes(p unsafe.Pointer, size uint32) uint32 {
	if p == nil || size < 4 {
		return 0
	}
	b := unsafe.Slice((*byte)(p), size)
	n := binary.LittleEndian.Uint32(b)
	var sum uint32
	for i := uint32(0); i < 2*n; i++ {
		sum += binary.LittleEndian.Uint32(b[4+4*i:])
	}
	return sum
}

func countPairs(typ uint32, name string) uint32 {
	var p unsafe.Pointer
	var size uint32
	if proxyGetHeaderPairs(typ, unsafe.Pointer(&p), unsafe.Pointer(&size)) != 0 || size < 4 {
		return 0
	}
	b := unsafe.Slice((*byte)(p), size)
	n := binary.LittleEndian.Uint32(b)
	off := 4 + 8*n
	var count uint32
	for i := uint32(0); i < n; i++ {
		kl := binary.LittleEndian.Uint32(b[4+8*i:])
		vl := binary.LittleEndian.Uint32(b[8+8*i:])
		if string(b[off:off+kl]) == name {
			count++
		}
		off += kl + 1 + vl + 1
	}
	return count
}

// headerNames lists the names of an encoded map, comma-separated.
func headerNames(p unsafe.Pointer, size uint32) string {
	if p == nil || size < 4 {
		return ""
	}
	b := unsafe.Slice((*byte)(p), size)
	n := binary.LittleEndian.Uint32(b)
	off := 4 + 8*n
	out := ""
	for i := uint32(0); i < n; i++ {
		kl := binary.LittleEndian.Uint32(b[4+8*i:])
		vl := binary.LittleEndian.Uint32(b[8+8*i:])
		if i > 0 {
			out += ","
		}
		out += string(b[off:off+kl]) + "=" + string(b[off+kl+1:off+kl+1+vl])
		off += kl + 1 + vl + 1
	}
	return out
}

func isIPPort(s string) bool {
	colon := -1
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ':' {
			colon = i
			break
		}
	}
	if colon <= 0 || colon == len(s)-1 {
		return false
	}
	_, err := strconv.Atoi(s[colon+1:])
	return err == nil
}

func main() {}
