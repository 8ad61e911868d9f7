package hostsim

import (
	"net/netip"
)

// hostCallForeignFunction implements proxy_call_foreign_function(name_data,
// name_size, args_data, args_size, results_ptr_ptr, results_size_ptr). Of
// Envoy's foreign functions (source/extensions/common/wasm/foreign.cc) hostsim
// offers set_envoy_filter_state; any other name is NotFound, as cpp-host
// answers for a function that is not registered (src/exports.cc).
func hostCallForeignFunction(v *vm, p []uint64) uint64 {
	name, ok1 := v.mem(p[0], p[1])
	args, ok2 := v.mem(p[2], p[3])
	if !ok1 || !ok2 {
		return statusInvalidMemoryAccess
	}
	switch string(name) {
	case "set_envoy_filter_state":
		return v.setEnvoyFilterState(args)
	}
	return statusNotFound
}

// filterStateFactories are the filter state keys hostsim knows, each with
// its object factory's parser (Envoy's FilterState::ObjectFactory
// createFromBytes): false refuses the value.
var filterStateFactories = map[string]func(string) bool{
	// source/common/network/filter_state_dst_address.cc,
	// BaseAddressObjectFactory: Utility::parseInternetAddressAndPortNoThrow,
	// "ip:port" or "[v6]:port".
	originalDstKey: func(s string) bool {
		ap, err := netip.ParseAddrPort(s)
		return err == nil && ap.Addr().Zone() == ""
	},
	// source/common/tcp_proxy/tcp_proxy.cc: a cluster name, any string.
	"envoy.tcp_proxy.cluster": func(string) bool { return true },
}

// setEnvoyFilterState is the foreign function set_envoy_filter_state: args
// is the protobuf SetEnvoyFilterStateArguments {path = 1, value = 2,
// span = 3}. Its answers follow Envoy (foreign.cc and
// Context::setEnvoyFilterState in context.cc): arguments that do not parse
// are BadArgument; a key no factory is registered for is NotFound; a value
// the factory refuses is BadArgument; a context without a stream (a root
// context) is NotFound; else the object is set on the calling context's
// stream or connection.
func (v *vm) setEnvoyFilterState(args []byte) uint64 {
	path, value, span, ok := decodeFilterStateArgs(args)
	if !ok {
		return statusBadArgument
	}
	parse, known := filterStateFactories[path]
	if !known {
		return statusNotFound
	}
	if !parse(value) {
		return statusBadArgument
	}
	s := v.streams[v.context()]
	if s == nil {
		return statusNotFound
	}
	if s.fstate == nil {
		s.fstate = map[string]FilterStateEntry{}
	}
	s.fstate[path] = FilterStateEntry{Value: value, Span: span}
	return statusOK
}

// decodeFilterStateArgs decodes SetEnvoyFilterStateArguments as protobuf's
// parser does: fields in any order, the last of a repeated one wins, unknown
// fields skipped; malformed input gives ok=false.
func decodeFilterStateArgs(b []byte) (path, value string, span int, ok bool) {
	for len(b) > 0 {
		tag, n := uvarint(b)
		if n <= 0 || tag>>3 == 0 {
			return "", "", 0, false
		}
		b = b[n:]
		field, wire := tag>>3, tag&7
		switch wire {
		case 0: // varint
			x, n := uvarint(b)
			if n <= 0 {
				return "", "", 0, false
			}
			b = b[n:]
			if field == 3 {
				span = int(int32(x))
			}
		case 2: // length-delimited
			l, n := uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return "", "", 0, false
			}
			s := string(b[n : n+int(l)])
			b = b[n+int(l):]
			switch field {
			case 1:
				path = s
			case 2:
				value = s
			}
		case 1: // 64-bit
			if len(b) < 8 {
				return "", "", 0, false
			}
			b = b[8:]
		case 5: // 32-bit
			if len(b) < 4 {
				return "", "", 0, false
			}
			b = b[4:]
		default:
			return "", "", 0, false
		}
	}
	return path, value, span, true
}

// uvarint reads a protobuf varint; n <= 0 when malformed.
func uvarint(b []byte) (uint64, int) {
	var x uint64
	for i := 0; i < len(b) && i < 10; i++ {
		x |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return x, i + 1
		}
	}
	return 0, 0
}
