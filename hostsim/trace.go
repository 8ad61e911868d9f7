package hostsim

import (
	"strconv"
	"strings"
)

// Call is one host function a module called while a stream's callback ran,
// with the arguments that say what it touched (Config.Trace).
type Call struct {
	// Phase is the callback that was running: "proxy_on_request_headers",
	// "proxy_on_response_headers", "proxy_on_log", ...
	Phase string
	// Func is the import: "proxy_get_header_map_value", or for WASI
	// "wasi_snapshot_preview1.clock_time_get".
	Func string
	// Map is the header map type (0 request headers, 2 response headers, ...)
	// for the header functions, else -1.
	Map int
	// Key is the header name, the metric's name, the property path (segments
	// joined with "."), the shared-data key, the log level or the WASI clock
	// id (clock_time_get: "0" realtime, "1" monotonic); "" otherwise.
	Key string
	// Value is the header value written, or for a metric the offset or value.
	Value string
	// Size is the length of the value written (header, shared data, log message).
	Size int
}

// String is the call as one line: "proxy_on_request_headers proxy_get_header_map_value 0 :path".
func (c Call) String() string {
	s := c.Phase + " " + c.Func
	if c.Map >= 0 {
		s += " " + strconv.FormatInt(int64(c.Map), 10)
	}
	if c.Key != "" {
		s += " " + c.Key
	}
	return s
}

// Calls returns the host calls the module made for this stream, in order,
// when the host was created with Config.Trace; nil otherwise.
func (s *Stream) Calls() []Call {
	s.v.mu.Lock()
	defer s.v.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Entry is one call into the module made for a stream (Config.Trace): a
// callback the host runs on the stream's context, or, during one, the
// module's allocator the host calls to hand a value back (malloc, or
// proxy_on_memory_allocate when there is no malloc). A callback the module
// does not export is never called and not recorded, as in Envoy.
type Entry struct {
	// Phase is the callback that was running; for a callback, its own name.
	Phase string
	// Func is the export called: the callback, or the allocator.
	Func string
}

// Entries returns the calls into the module made for this stream, in order,
// when the host was created with Config.Trace; nil otherwise.
func (s *Stream) Entries() []Entry {
	s.v.mu.Lock()
	defer s.v.mu.Unlock()
	return append([]Entry(nil), s.entries...)
}

// enter records a call of export name on the stream whose context runs it
// (a callback's first argument, an allocation's running context); calls
// outside a stream are not kept.
func (v *vm) enter(name string, context uint32) {
	if s := v.streams[context]; s != nil {
		phase := v.phase
		if phase == "" {
			phase = name
		}
		s.entries = append(s.entries, Entry{Phase: phase, Func: name})
	}
}

// trace records the call of mod.name with its (already normalised) arguments
// on the stream whose callback runs; calls outside a stream are not kept.
func (v *vm) trace(mod, name string, p []uint64) {
	s := v.streams[v.context()]
	if s == nil {
		return
	}
	c := Call{Phase: v.phase, Func: name, Map: -1}
	if mod != "env" {
		c.Func = mod + "." + name
	}
	str := func(ptr, size uint64) string {
		b, _ := v.mem(ptr, size)
		return string(b)
	}
	switch name {
	case "proxy_get_header_map_value", "proxy_remove_header_map_value":
		c.Map, c.Key = int(p[0]), strings.ToLower(str(p[1], p[2]))
	case "proxy_add_header_map_value", "proxy_replace_header_map_value":
		c.Map, c.Key = int(p[0]), strings.ToLower(str(p[1], p[2]))
		c.Value = str(p[3], p[4])
		c.Size = len(c.Value)
	case "proxy_get_header_map_pairs", "proxy_set_header_map_pairs", "proxy_get_header_map_size":
		c.Map = int(p[0])
	case "proxy_increment_metric", "proxy_record_metric", "proxy_get_metric":
		v.h.metrics.mu.Lock()
		if m := v.h.metrics.byID[uint32(p[0])]; m != nil {
			c.Key = m.Name
		}
		v.h.metrics.mu.Unlock()
		if name != "proxy_get_metric" {
			c.Value = strconv.FormatInt(int64(p[1]), 10)
		}
	case "proxy_get_property", "proxy_set_property":
		c.Key = strings.ReplaceAll(str(p[0], p[1]), "\x00", ".")
	case "proxy_get_shared_data":
		c.Key = str(p[0], p[1])
	case "proxy_set_shared_data":
		c.Key, c.Size = str(p[0], p[1]), int(p[3])
	case "clock_time_get":
		c.Key = strconv.FormatInt(int64(p[0]), 10)
	case "proxy_log":
		c.Key, c.Size = strconv.FormatInt(int64(p[0]), 10), int(p[2])
	}
	s.calls = append(s.calls, c)
}
