package hostsim

import "strings"

// Header map types (proxy-wasm spec, WasmHeaderMapType).
const (
	mapRequestHeaders       = 0
	mapRequestTrailers      = 1
	mapResponseHeaders      = 2
	mapResponseTrailers     = 3
	mapCallResponseHeaders  = 6
	mapCallResponseTrailers = 7
)

// mapState is when Envoy lets a filter reach a header map
// (source/extensions/common/wasm/context.cc getMap/getConstMap).
type mapState int

const (
	mapAbsent   mapState = iota // not received yet: BadArgument
	mapOpen                     // the filter holds it: read and write
	mapReadOnly                 // proxy_on_log: read only
	mapClosed                   // let go (callback returned Continue): BadArgument
)

type headerMap struct {
	pairs [][2]string
	state mapState
}

var headerFuncs = []hostFunc{
	{"proxy_get_header_map_value", "iiiii", "i", hostGetHeaderMapValue},
	{"proxy_add_header_map_value", "iiiii", "i", hostAddHeaderMapValue},
	{"proxy_replace_header_map_value", "iiiii", "i", hostReplaceHeaderMapValue},
	{"proxy_remove_header_map_value", "iii", "i", hostRemoveHeaderMapValue},
	{"proxy_get_header_map_pairs", "iii", "i", hostGetHeaderMapPairs},
	{"proxy_set_header_map_pairs", "iii", "i", hostSetHeaderMapPairs},
	{"proxy_get_header_map_size", "ii", "i", hostGetHeaderMapSize},
}

// headerMap returns the map typ of the calling context if the phase allows
// the access, else a status: BadArgument for an unknown type, a map the stream
// does not hold (yet or any more), or a write to a read-only map.
func (v *vm) headerMap(typ uint64, write bool) (*headerMap, uint64) {
	switch typ {
	case mapCallResponseHeaders, mapCallResponseTrailers:
		if v.callResp == nil || write {
			return nil, statusBadArgument
		}
		m := &headerMap{pairs: v.callResp.Headers, state: mapReadOnly}
		if typ == mapCallResponseTrailers {
			m.pairs = v.callResp.Trailers
		}
		return m, statusOK
	case mapRequestHeaders, mapRequestTrailers, mapResponseHeaders, mapResponseTrailers:
	default:
		return nil, statusBadArgument
	}
	s := v.streams[v.context()]
	if s == nil {
		return nil, statusBadArgument
	}
	m := s.maps[typ]
	switch {
	case m.state == mapOpen, m.state == mapReadOnly && !write:
		return m, statusOK
	}
	return nil, statusBadArgument
}

func lookup(ps [][2]string, key string) (string, bool) {
	for _, p := range ps {
		if p[0] == key {
			return p[1], true
		}
	}
	return "", false
}

func without(ps [][2]string, key string) [][2]string {
	out := ps[:0]
	for _, p := range ps {
		if p[0] != key {
			out = append(out, p)
		}
	}
	return out
}

func (v *vm) keyValue(p []uint64, withValue bool) (string, string, bool) {
	k, ok := v.mem(p[1], p[2])
	if !ok {
		return "", "", false
	}
	var val []byte
	if withValue {
		if val, ok = v.mem(p[3], p[4]); !ok {
			return "", "", false
		}
	}
	// Envoy keys are Http::LowerCaseString.
	return strings.ToLower(string(k)), string(val), true
}

// hostGetHeaderMapValue implements proxy_get_header_map_value: the first value
// of key (Envoy returns only the first of repeated headers), NotFound if absent.
func hostGetHeaderMapValue(v *vm, p []uint64) uint64 {
	m, k, _, st := v.headerEntry(p, false, false)
	if st != statusOK {
		return st
	}
	val, found := lookup(m.pairs, k)
	if !found {
		return statusNotFound
	}
	return v.copyOut([]byte(val), p[3], p[4])
}

// editHeaderMap is the common part of the three writes: the map must be
// writable in this phase and the key (and value) readable from guest memory;
// then edit changes the map.
func editHeaderMap(v *vm, p []uint64, withValue bool, edit func(m *headerMap, k, val string)) uint64 {
	m, k, val, st := v.headerEntry(p, true, withValue)
	if st == statusOK {
		edit(m, k, val)
	}
	return st
}

// headerEntry is what the calls on one header share: the map p[0] names
// (writable in this phase if write) and the key (and value, if withValue)
// read from guest memory, or the status that refuses the call.
func (v *vm) headerEntry(p []uint64, write, withValue bool) (m *headerMap, k, val string, st uint64) {
	if m, st = v.headerMap(p[0], write); st != statusOK {
		return nil, "", "", st
	}
	k, val, ok := v.keyValue(p, withValue)
	if !ok {
		return nil, "", "", statusInvalidMemoryAccess
	}
	return m, k, val, statusOK
}

// hostAddHeaderMapValue implements proxy_add_header_map_value: appends a copy.
func hostAddHeaderMapValue(v *vm, p []uint64) uint64 {
	return editHeaderMap(v, p, true, func(m *headerMap, k, val string) {
		m.pairs = append(m.pairs, [2]string{k, val})
	})
}

// hostReplaceHeaderMapValue implements proxy_replace_header_map_value as Envoy
// does: every copy of key is removed, then one value added. Envoy's
// Context::replaceHeaderMapValue (source/extensions/common/wasm/context.cc)
// calls HeaderMap::setCopy, which is remove then addCopy
// (source/common/http/header_map_impl.cc) since 1.16, unconditionally since
// 1.19 (the runtime guard http_set_copy_replace_all_headers was removed).
// hashlb relies on it to drop a client's copies of its headers.
func hostReplaceHeaderMapValue(v *vm, p []uint64) uint64 {
	return editHeaderMap(v, p, true, func(m *headerMap, k, val string) {
		m.pairs = append(without(m.pairs, k), [2]string{k, val})
	})
}

// hostRemoveHeaderMapValue implements proxy_remove_header_map_value: removes
// every copy; removing an absent key is not an error.
func hostRemoveHeaderMapValue(v *vm, p []uint64) uint64 {
	return editHeaderMap(v, p, false, func(m *headerMap, k, _ string) {
		m.pairs = without(m.pairs, k)
	})
}

// hostGetHeaderMapPairs implements proxy_get_header_map_pairs: the whole map,
// serialised as pairs (an empty map gives address 0, size 0).
func hostGetHeaderMapPairs(v *vm, p []uint64) uint64 {
	m, st := v.headerMap(p[0], false)
	if st != statusOK {
		return st
	}
	if len(m.pairs) == 0 {
		return v.copyOut(nil, p[1], p[2])
	}
	return v.copyOut(encodePairs(m.pairs), p[1], p[2])
}

// hostSetHeaderMapPairs implements proxy_set_header_map_pairs: the map's
// entries are replaced by the given pairs.
func hostSetHeaderMapPairs(v *vm, p []uint64) uint64 {
	m, st := v.headerMap(p[0], true)
	if st != statusOK {
		return st
	}
	b, ok := v.mem(p[1], p[2])
	if !ok {
		return statusInvalidMemoryAccess
	}
	ps, ok := decodePairs(b)
	if !ok {
		return statusBadArgument
	}
	m.pairs = m.pairs[:0]
	for _, kv := range ps {
		m.pairs = append(m.pairs, [2]string{strings.ToLower(kv[0]), kv[1]})
	}
	return statusOK
}

// hostGetHeaderMapSize implements proxy_get_header_map_size: the map's size in
// bytes (keys plus values, Envoy's HeaderMap::byteSize), not its entry count.
func hostGetHeaderMapSize(v *vm, p []uint64) uint64 {
	m, st := v.headerMap(p[0], false)
	if st != statusOK {
		return st
	}
	n := 0
	for _, kv := range m.pairs {
		n += len(kv[0]) + len(kv[1])
	}
	if !v.putU32(p[1], uint32(n)) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}
