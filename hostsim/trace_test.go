package hostsim

import (
	"strings"
	"testing"
)

func TestTraceCalls(t *testing.T) {
	s, untraced := traceStreams(t, false)
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
	sameLines(t, "Calls()", got, want)
	if c := untraced.Calls(); c != nil {
		t.Errorf("Calls() without Config.Trace = %v, want nil", c)
	}
}

// TestTraceEntries checks the calls into the module a stream costs: every
// callback the module exports, each allocation the host makes to hand back
// a value, and nothing for a callback the module does not export (basic has
// no proxy_on_response_body).
func TestTraceEntries(t *testing.T) {
	s, untraced := traceStreams(t, true)
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
	sameLines(t, "Entries()", got, want)
	if e := untraced.Entries(); e != nil {
		t.Errorf("Entries() without Config.Trace = %v, want nil", e)
	}
}

// traceStreams runs one request (and a response body when body is set)
// through basic on a host with Config.Trace, and one on a host without it:
// both streams, finished.
func traceStreams(t *testing.T, body bool) (traced, untraced *Stream) {
	t.Helper()
	traced = newHost(t, "basic", Config{Trace: true}).Stream(0)
	if res := traced.RequestHeaders(req("/"), map[string][]byte{"source.address": PropString("10.1.2.3:5555")}); res.Err != nil {
		t.Fatal(res.Err)
	}
	traced.ResponseHeaders([][2]string{{":status", "200"}})
	if body {
		if _, err := traced.ResponseBody(512, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := traced.Finish(); err != nil {
		t.Fatal(err)
	}
	untraced = newHost(t, "basic", Config{}).Stream(0)
	untraced.RequestHeaders(req("/"), nil)
	return traced, untraced
}

// sameLines fails t when got is not want, line for line.
func sameLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s =\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
