package hostsim

import (
	"strings"
	"testing"
)

func TestTraceCalls(t *testing.T) {
	h := newHost(t, "basic", Config{Trace: true})
	s := h.Stream(0)
	if res := s.RequestHeaders(req("/"), map[string][]byte{"source.address": PropString("10.1.2.3:5555")}); res.Err != nil {
		t.Fatal(res.Err)
	}
	s.ResponseHeaders([][2]string{{":status", "200"}})
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range s.Calls() {
		if strings.Contains(c.Func, ".") { // WASI calls the Go runtime makes on its own
			continue
		}
		line := c.String()
		if c.Value != "" {
			line += " = " + c.Value
		}
		got = append(got, line)
	}
	want := []string{
		"proxy_on_request_headers proxy_increment_metric requests = 1",
		"proxy_on_request_headers proxy_increment_metric inflight = 5",
		"proxy_on_request_headers proxy_increment_metric inflight = -2",
		"proxy_on_request_headers proxy_record_metric latency = 42",
		"proxy_on_request_headers proxy_get_header_map_value 0 :path",
		"proxy_on_request_headers proxy_get_header_map_size 0",
		"proxy_on_request_headers proxy_replace_header_map_value 0 x-size = 37",
		"proxy_on_request_headers proxy_get_property source.address",
		"proxy_on_request_headers proxy_replace_header_map_value 0 x-upstream = 10.1.2.3:5555",
		"proxy_on_request_headers proxy_log 1",
		"proxy_on_response_headers proxy_get_header_map_value 0 :path",
		"proxy_on_response_headers proxy_replace_header_map_value 2 x-req-status = 2",
		"proxy_on_response_headers proxy_replace_header_map_value 2 x-seen = 1",
		"proxy_on_log proxy_get_header_map_value 0 :path",
		"proxy_on_log proxy_replace_header_map_value 0 x-late = 1",
		"proxy_on_log proxy_log 2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Calls() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	untraced := newHost(t, "basic", Config{}).Stream(0)
	untraced.RequestHeaders(req("/"), nil)
	if c := untraced.Calls(); c != nil {
		t.Errorf("Calls() without Config.Trace = %v, want nil", c)
	}
}

// TestTraceEntries checks the calls into the module a stream costs: every
// callback the module exports, each allocation the host makes to hand back
// a value, and nothing for a callback the module does not export (basic has
// no proxy_on_response_body).
func TestTraceEntries(t *testing.T) {
	h := newHost(t, "basic", Config{Trace: true})
	s := h.Stream(0)
	if res := s.RequestHeaders(req("/"), map[string][]byte{"source.address": PropString("10.1.2.3:5555")}); res.Err != nil {
		t.Fatal(res.Err)
	}
	s.ResponseHeaders([][2]string{{":status", "200"}})
	if _, err := s.ResponseBody(512, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range s.Entries() {
		got = append(got, e.Phase+" "+e.Func)
	}
	want := []string{
		"proxy_on_context_create proxy_on_context_create",
		"proxy_on_request_headers proxy_on_request_headers",
		"proxy_on_request_headers proxy_on_memory_allocate",   // :path
		"proxy_on_request_headers proxy_on_memory_allocate",   // source.address
		"proxy_on_response_headers proxy_on_response_headers", // :path refused there: no copy
		"proxy_on_done proxy_on_done",
		"proxy_on_log proxy_on_log",
		"proxy_on_log proxy_on_memory_allocate", // :path
		"proxy_on_delete proxy_on_delete",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Entries() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	untraced := newHost(t, "basic", Config{}).Stream(0)
	untraced.RequestHeaders(req("/"), nil)
	if e := untraced.Entries(); e != nil {
		t.Errorf("Entries() without Config.Trace = %v, want nil", e)
	}
}
