package hostsim

// Buffer types (proxy-wasm spec, WasmBufferType).
const (
	bufDownstreamData       = 2
	bufUpstreamData         = 3
	bufHTTPCallResponseBody = 4
	bufVMConfiguration      = 6
	bufPluginConfiguration  = 7
	bufMax                  = 8 // CallData
)

var bufferFuncs = []hostFunc{
	{"proxy_get_buffer_status", "iii", "i", hostGetBufferStatus},
	{"proxy_get_buffer_bytes", "iiiii", "i", hostGetBufferBytes},
	{"proxy_set_buffer_bytes", "iiiii", "i", hostSetBufferBytes},
}

// buffer returns the bytes of buffer typ if it is readable in the running
// call: the VM configuration during proxy_on_vm_start, the plugin
// configuration during the root proxy_on_context_create and
// proxy_on_configure, the callout body during proxy_on_http_call_response.
// the connection's data during proxy_on_downstream_data and
// proxy_on_upstream_data. Bodies are not streamed by hostsim, so the body
// buffers are absent.
func (v *vm) buffer(typ uint64) ([]byte, uint64) {
	switch {
	case typ > bufMax:
		return nil, statusBadArgument
	case typ == bufVMConfiguration && v.bufVM:
		return v.h.cfg.VMConfig, statusOK
	case typ == bufPluginConfiguration && v.bufPlugin:
		return v.plugin, statusOK
	case (typ == bufDownstreamData || typ == bufUpstreamData) && typ == v.netBuf:
		return v.netData, statusOK
	case typ == bufHTTPCallResponseBody && v.callResp != nil:
		return v.callResp.Body, statusOK
	}
	return nil, statusNotFound
}

// hostGetBufferStatus implements proxy_get_buffer_status: length and flags 0.
func hostGetBufferStatus(v *vm, p []uint64) uint64 {
	b, st := v.buffer(p[0])
	if st != statusOK {
		return st
	}
	if !v.putU32(p[1], uint32(len(b))) || !v.putU32(p[2], 0) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

// hostGetBufferBytes implements proxy_get_buffer_bytes(type, start, length,
// ptr_ptr, size_ptr), clamping the range to the buffer as cpp-host does.
func hostGetBufferBytes(v *vm, p []uint64) uint64 {
	b, st := v.buffer(p[0])
	if st != statusOK {
		return st
	}
	start, length := uint32(p[1]), uint32(p[2])
	if start > start+length {
		return statusBadArgument
	}
	if start > uint32(len(b)) {
		length = 0
	} else if start+length > uint32(len(b)) {
		length = uint32(len(b)) - start
	}
	if length == 0 {
		return v.copyOut(nil, p[3], p[4])
	}
	return v.copyOut(b[start:start+length], p[3], p[4])
}

// hostSetBufferBytes implements proxy_set_buffer_bytes. The buffers hostsim
// holds (configurations, callout bodies) are read-only: BadArgument.
func hostSetBufferBytes(v *vm, p []uint64) uint64 {
	if _, st := v.buffer(p[0]); st != statusOK {
		return st
	}
	return statusBadArgument
}
