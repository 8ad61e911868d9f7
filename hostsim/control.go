package hostsim

// streamFuncs are the stream-control functions of the env module common to
// every ABI version.
var streamFuncs = []hostFunc{
	{"proxy_send_local_response", "iiiiiiii", "i", hostSendLocalResponse},
	{"proxy_set_effective_context", "i", "i", hostSetEffectiveContext},
	{"proxy_done", "", "i", hostDone},
}

// abi02Funcs are registered for ABI 0.2.0 and 0.2.1 (cpp-host registerCallbacks).
var abi02Funcs = []hostFunc{
	{"proxy_continue_stream", "i", "i", hostContinueStream},
	{"proxy_close_stream", "i", "i", hostCloseStream},
}

// abi010Funcs are registered for ABI 0.1.0 only.
var abi010Funcs = []hostFunc{
	{"proxy_get_configuration", "ii", "i", hostGetConfiguration},
	{"proxy_continue_request", "", "i", func(v *vm, _ []uint64) uint64 { return v.continueStream(0) }},
	{"proxy_continue_response", "", "i", func(v *vm, _ []uint64) uint64 { return v.continueStream(1) }},
	{"proxy_clear_route_cache", "", "i", ret(statusOK)},
}

// hostSendLocalResponse implements proxy_send_local_response(status,
// details, body, header pairs, grpc_status): the stream is answered by the
// filter; the reply goes through the filter's proxy_on_response_headers once
// the running callback returns (see Stream.RequestHeaders).
func hostSendLocalResponse(v *vm, p []uint64) uint64 {
	details, ok1 := v.mem(p[1], p[2])
	body, ok2 := v.mem(p[3], p[4])
	hb, ok3 := v.mem(p[5], p[6])
	if !ok1 || !ok2 || !ok3 {
		return statusInvalidMemoryAccess
	}
	hs, ok := decodePairs(hb)
	if !ok {
		return statusBadArgument
	}
	s := v.streams[v.context()]
	if s == nil {
		return statusBadArgument
	}
	if s.inLocal || s.local != nil {
		return statusOK // Envoy ignores a second local reply on the same stream
	}
	s.local = &LocalReply{Status: int(uint32(p[0])), Details: string(details), Body: body,
		Headers: hs, GRPCStatus: int32(uint32(p[7]))}
	return statusOK
}

// hostSetEffectiveContext implements proxy_set_effective_context: later host
// calls of the running callback act on context id. An id that is not a live
// context, such as a stream already reset and deleted, is BadArgument and
// leaves the effective context as it was (cpp-host src/exports.cc
// set_effective_context at 03da0e12ca6d8b677161f764a99373566c6768ff:
// getContext(cid) null → WasmResult::BadArgument; Envoy's Context is removed
// from the VM's contexts when its stream is destroyed). So a module that
// resumes a stream from a callout's response after Finish reset it gets
// BadArgument here, and its proxy_continue_stream then acts on the root
// context and finds no stream (see continueStream).
func hostSetEffectiveContext(v *vm, p []uint64) uint64 {
	id := uint32(p[0])
	if _, ok := v.roots[id]; !ok && v.streams[id] == nil {
		return statusBadArgument
	}
	v.effective = id
	return statusOK
}

// hostDone implements proxy_done (cpp-host exports.cc done, WasmBase::done):
// a root context whose proxy_on_done returned false finishes its shutdown;
// proxy_on_delete follows once the running call returns. Any other context:
// NotFound.
func hostDone(v *vm, _ []uint64) uint64 {
	r := v.roots[v.context()]
	if r == nil || !r.done {
		return statusNotFound
	}
	r.done = false // deleted once, after the call
	v.pendingDelete = append(v.pendingDelete, r)
	return statusOK
}

// hostContinueStream implements proxy_continue_stream(stream_type).
func hostContinueStream(v *vm, p []uint64) uint64 { return v.continueStream(p[0]) }

// continueStream resumes a paused request (0) or response (1): the headers
// go on and leave the module's reach (Envoy Context::continueStream defers
// continueDecoding until the guest call returns; hostsim resolves the
// stream's Wait then, see vm.settle). Downstream/upstream (2, 3) are TCP
// streams hostsim does not run. On a root context (no stream, e.g. after a
// failed proxy_set_effective_context) it answers Ok and does nothing, as
// Envoy does (context.cc: no decoder callbacks; measured in Envoy 1.36.4
// and 1.40.0 by e2e/envoy's TestHostFactsAsEnvoyAnswers).
func (v *vm) continueStream(typ uint64) uint64 {
	s := v.streams[v.context()]
	switch {
	case typ > 3:
		return statusBadArgument
	case s == nil:
		return statusOK
	case s.conn != nil:
		// A connection: downstream resumes reading (Ok, deferred in Envoy),
		// upstream is Unimplemented; request and response have no callbacks
		// on a network context and do nothing (context.cc continueStream).
		if typ == 3 {
			return statusUnimplemented
		}
		return statusOK
	case typ == 0:
		s.closeRequest()
		s.resumed = true
	case typ == 1:
		s.maps[mapResponseHeaders].state = mapClosed
		s.maps[mapResponseTrailers].state = mapClosed
	default:
		return statusUnimplemented
	}
	return statusOK
}

// hostCloseStream implements proxy_close_stream(stream_type): the stream is
// reset; later header operations on it fail. On a root context: Ok, nothing
// done, as in Envoy (see continueStream).
func hostCloseStream(v *vm, p []uint64) uint64 {
	s := v.streams[v.context()]
	switch {
	case p[0] > 3:
		return statusBadArgument
	case s == nil:
		return statusOK
	case s.conn != nil:
		// A connection: Envoy closes the downstream (2) or upstream (3)
		// connection after the callback returns, flushing what was written
		// (context.cc closeStream, FlushWrite); request and response (0, 1)
		// have no callbacks on a network context and do nothing.
		switch p[0] {
		case 2:
			s.conn.closeDownstream = true
		case 3:
			s.conn.closeUpstream = true
		}
		return statusOK
	}
	s.closed = true
	for _, m := range s.maps {
		if m.state == mapOpen {
			m.state = mapClosed
		}
	}
	return statusOK
}

// hostGetConfiguration implements ABI 0.1.0's proxy_get_configuration.
func hostGetConfiguration(v *vm, p []uint64) uint64 { return v.copyOut(v.plugin, p[0], p[1]) }

// stubFuncs are present so a module importing them links, as in Envoy, but
// hostsim offers no gRPC or DNS; of the foreign functions, only
// set_envoy_filter_state (foreign.go).
var stubFuncs = []hostFunc{
	{"proxy_grpc_call", "iiiiiiiiiiii", "i", ret(statusUnimplemented)},
	{"proxy_grpc_stream", "iiiiiiiii", "i", ret(statusUnimplemented)},
	{"proxy_grpc_close", "i", "i", ret(statusNotFound)},
	{"proxy_grpc_cancel", "i", "i", ret(statusNotFound)},
	{"proxy_grpc_send", "iiii", "i", ret(statusNotFound)},
	{"proxy_call_foreign_function", "iiiiii", "i", hostCallForeignFunction},
	// Envoy's own extension (source/extensions/common/wasm/wasm.cc).
	{"envoy_resolve_dns", "iii", "i", ret(statusUnimplemented)},
	// cpp-host always registers these two (src/wasm.cc registerCallbacks).
	{"pthread_equal", "ii", "i", func(_ *vm, p []uint64) uint64 { return boolArg(uint32(p[0]) == uint32(p[1])) }},
	{"emscripten_notify_memory_growth", "i", "", ret(0)},
}
