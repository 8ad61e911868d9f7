package main

import "github.com/hashlb/hashlb/lbcore"

// Envoy's foreign function set_envoy_filter_state (source/extensions/common/wasm/foreign.cc)
// sets a filter state object through the object factory registered for its
// key; hashlb sets lbcore.OriginalDstFilterState, which an ORIGINAL_DST
// cluster reads before any header (docs/envoy-host.md#steering-a-connection).
// Its argument is the protobuf message SetEnvoyFilterStateArguments
// (source/extensions/common/wasm/ext/set_envoy_filter_state.proto): path = 1
// (string), value = 2 (string), span = 3 (enum LifeSpan of
// declare_property.proto: FilterChain 0, DownstreamRequest 1,
// DownstreamConnection 2). Releases before span was added ignore field 3 as
// an unknown field and use FilterChain.

// setFilterStateFunc is the foreign function's name.
const setFilterStateFunc = "set_envoy_filter_state"

// Filter state life spans (LifeSpan in Envoy's declare_property.proto).
const (
	spanFilterChain          = 0
	spanDownstreamConnection = 2
)

// appendFilterStateArgs appends the encoded SetEnvoyFilterStateArguments
// {path, value, span} to dst. A span of 0 is proto3's default and is left out.
func appendFilterStateArgs(dst []byte, path, value string, span uint64) []byte {
	dst = appendProtoString(dst, 1, path)
	dst = appendProtoString(dst, 2, value)
	if span != 0 {
		dst = appendVarint(append(dst, 3<<3|0), span) // field 3, wire type 0 (varint)
	}
	return dst
}

// appendProtoString appends field n as wire type 2 (length-delimited).
func appendProtoString(dst []byte, n uint64, s string) []byte {
	dst = appendVarint(dst, n<<3|2)
	dst = appendVarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendVarint(dst []byte, x uint64) []byte {
	for x >= 0x80 {
		dst = append(dst, byte(x)|0x80)
		x >>= 7
	}
	return append(dst, byte(x))
}

// setUpstream hands Envoy the chosen address as the ORIGINAL_DST filter
// state of the running stream or connection. An error (NotFound on a
// release without the foreign function or the key, BadArgument for an
// address Envoy cannot parse) means Envoy was not told: the caller must then
// refuse the stream, never let it continue.
func setUpstream(address string, span uint64) error {
	fsArgs = appendFilterStateArgs(fsArgs[:0], lbcore.OriginalDstFilterState, address, span)
	return callForeign(setFilterStateFunc, fsArgs)
}

// fsArgs is setUpstream's buffer, reused: a VM runs one callback at a time.
var fsArgs []byte
