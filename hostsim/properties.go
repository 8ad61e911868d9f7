package hostsim

import (
	"encoding/binary"
	"strings"
)

var propertyFuncs = []hostFunc{
	{"proxy_get_property", "iiii", "i", hostGetProperty},
	{"proxy_set_property", "iiii", "i", hostSetProperty},
}

// PropString encodes a string property as Envoy does: the raw bytes.
func PropString(s string) []byte { return []byte(s) }

// PropInt encodes an integer property as Envoy does: 8 bytes little-endian.
func PropInt(i int64) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, uint64(i))
	return b
}

// PropBool encodes a boolean property as Envoy does: one byte, 0 or 1.
func PropBool(b bool) []byte {
	if b {
		return []byte{1}
	}
	return []byte{0}
}

// propKey turns a caller's property path into the ABI's form, segments joined
// by NUL: "source.address" becomes "source\x00address". A path that already
// contains NUL is taken as is (use that form for segments holding dots).
func propKey(path string) string {
	if strings.Contains(path, "\x00") {
		return path
	}
	return strings.ReplaceAll(path, ".", "\x00")
}

func propMap(m map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, val := range m {
		out[propKey(k)] = val
	}
	return out
}

// property resolves an ABI path (segments split only on NUL, as Envoy's
// Context::getProperty does: a single segment "source.address" is NotFound)
// for the calling context: the stream's values (set by the test, derived from
// its request and response headers, or set by the module), then the host's.
func (v *vm) property(path string) ([]byte, bool) {
	if s := v.streams[v.context()]; s != nil {
		if val, ok := s.props[path]; ok {
			return val, true
		}
		if val, ok := s.derived(path); ok {
			return val, true
		}
	}
	if val, ok := v.rootProps[path]; ok {
		return val, true
	}
	switch path {
	case "plugin_name":
		return []byte(v.h.cfg.PluginName), true
	case "plugin_root_id":
		return []byte(v.h.cfg.RootID), true
	case "plugin_vm_id":
		return []byte(v.h.cfg.VMID), true
	}
	val, ok := v.h.props[path]
	return val, ok
}

// derived gives the request.* and response.code properties Envoy computes
// from the headers it holds.
func (s *Stream) derived(path string) ([]byte, bool) {
	req := s.orig
	get := func(k string) (string, bool) { return lookup(req, k) }
	switch path {
	case "request\x00path":
		return str(get(":path"))
	case "request\x00url_path":
		p, ok := get(":path")
		if i := strings.IndexByte(p, '?'); i >= 0 {
			p = p[:i]
		}
		return []byte(p), ok
	case "request\x00query":
		p, ok := get(":path")
		if i := strings.IndexByte(p, '?'); i >= 0 {
			return []byte(p[i+1:]), true
		}
		return nil, ok
	case "request\x00host":
		return str(get(":authority"))
	case "request\x00method":
		return str(get(":method"))
	case "request\x00scheme":
		return str(get(":scheme"))
	case "response\x00code":
		if s.status == 0 {
			return nil, false
		}
		return PropInt(int64(s.status)), true
	}
	return nil, false
}

func str(s string, ok bool) ([]byte, bool) { return []byte(s), ok }

// hostGetProperty implements proxy_get_property(path_data, path_size,
// value_ptr_ptr, value_size_ptr).
func hostGetProperty(v *vm, p []uint64) uint64 {
	path, ok := v.mem(p[0], p[1])
	if !ok {
		return statusInvalidMemoryAccess
	}
	val, found := v.property(string(path))
	if !found {
		return statusNotFound
	}
	return v.copyOut(val, p[2], p[3])
}

// hostSetProperty implements proxy_set_property: the value is kept for the
// calling stream (Envoy's filter state) or, from a root context, for the VM,
// and get_property with the same path returns it.
func hostSetProperty(v *vm, p []uint64) uint64 {
	path, val, ok := v.memPair(p)
	if !ok {
		return statusInvalidMemoryAccess
	}
	if s := v.streams[v.context()]; s != nil {
		s.props[string(path)] = val
		return statusOK
	}
	if v.rootProps == nil {
		v.rootProps = map[string][]byte{}
	}
	v.rootProps[string(path)] = val
	return statusOK
}
