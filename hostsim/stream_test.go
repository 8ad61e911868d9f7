package hostsim

import (
	"strconv"
	"strings"
	"testing"
)

func req(path string) [][2]string {
	return [][2]string{{":method", "GET"}, {":path", path}, {":authority", "example.com"}}
}

func TestStartSequenceBuffers(t *testing.T) {
	h := newHost(t, "basic", Config{PluginConfig: []byte(`{"a":1}`), VMConfig: []byte("vmcfg")})
	want := []string{
		`create root: plugin config 0 {"a":1}`,              // readable in the root on_context_create
		"vm start: plugin config status 1, vm config vmcfg", // NotFound during vm_start
		`configure: {"a":1}`,
	}
	got := h.LogsAt(LogInfo)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("start logs = %q, want %q", got, want)
	}
}

func TestStreamHeadersAndPhases(t *testing.T) {
	h := newHost(t, "basic", Config{})
	s := h.Stream(0)
	res := s.RequestHeaders(req("/"), map[string][]byte{"source.address": PropString("10.1.2.3:5555")})
	if res.Err != nil || res.Action != ActionContinue {
		t.Fatalf("RequestHeaders = %+v", res)
	}
	if got, _ := res.Header("x-upstream"); got != "10.1.2.3:5555" {
		t.Fatalf("x-upstream = %q, want 10.1.2.3:5555", got)
	}
	// Size is bytes: ":method"+"GET"+":path"+"/"+":authority"+"example.com" = 7+3+5+1+10+11.
	if got, _ := res.Header("x-size"); got != "37" {
		t.Fatalf("x-size = %q, want 37 (bytes, not a count)", got)
	}
	resp := s.ResponseHeaders([][2]string{{":status", "200"}})
	if got, _ := resp.Header("x-req-status"); got != "2" {
		t.Fatalf("request header read in on_response_headers: status %q, want 2 BadArgument", got)
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	logs := h.LogsAt(LogInfo)
	if last := logs[len(logs)-1]; last != "log / read 0 write 2" {
		t.Fatalf("on_log = %q, want read ok, write BadArgument", last)
	}
	if got := h.LogsAt(LogDebug); len(got) != 1 || got[0] != "request /" {
		t.Fatalf("debug logs = %q, want [request /]", got)
	}
}

func TestPropertyEncodings(t *testing.T) {
	h := newHost(t, "basic", Config{PluginName: "hashlb-test"})
	s := h.Stream(0)
	res := s.RequestHeaders(req("/props?q=1"), map[string][]byte{
		"source.address":  PropString("10.0.0.1:80"),
		"source.port":     PropInt(80),
		"connection.mtls": PropBool(true),
	})
	tests := []struct{ header, want string }{
		{"x-prop-source/address", "0:" + hexString("10.0.0.1:80")},
		{"x-prop-source_address", "1:"}, // one segment "source.address": NotFound
		{"x-prop-source/port", "0:5000000000000000"},
		{"x-prop-connection/mtls", "0:01"},
		{"x-prop-plugin_name", "0:" + hexString("hashlb-test")},
		{"x-prop-request/url_path", "0:" + hexString("/props")},
		{"x-prop-custom/thing", "1:"},
	}
	for _, tc := range tests {
		if got, _ := res.Header(tc.header); got != tc.want {
			t.Errorf("%s = %q, want %q", tc.header, got, tc.want)
		}
	}
}

func hexString(s string) string {
	const d = "0123456789abcdef"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteByte(d[s[i]>>4])
		b.WriteByte(d[s[i]&15])
	}
	return b.String()
}

// wantLocalReply checks a local reply of the test modules: its status, body
// and details, and that it passed through on_response_headers, which added
// x-seen beside the module's own x-local.
func wantLocalReply(t *testing.T, l *LocalReply, status int, body, details string) {
	t.Helper()
	if l == nil || l.Status != status || string(l.Body) != body || l.Details != details {
		t.Fatalf("local reply = %+v, want %d %q (%s)", l, status, body, details)
	}
	for name, want := range map[string]string{"x-local": "yes", "x-seen": "1", ":status": strconv.Itoa(status)} {
		if got, _ := l.Header(name); got != want {
			t.Errorf("local reply %s = %q, want %q", name, got, want)
		}
	}
}

func TestLocalReplyPassesThroughResponseHeaders(t *testing.T) {
	h := newHost(t, "basic", Config{})
	s := h.Stream(0)
	res := s.RequestHeaders(req("/local"), nil)
	wantLocalReply(t, res.LocalReply, 403, "denied", "test_denied")
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
}

func TestTrapKillsVMFailClosed(t *testing.T) {
	h := newHost(t, "basic", Config{Workers: 2})
	res := h.Stream(0).RequestHeaders(req("/trap"), nil)
	if res.Err == nil || res.LocalReply == nil || res.LocalReply.Status != 503 {
		t.Fatalf("trap result = %+v, want Err and 503", res)
	}
	if h.Err(0) == nil || h.Err(1) != nil {
		t.Fatalf("Err(0), Err(1) = %v, %v; want only worker 0 dead", h.Err(0), h.Err(1))
	}
	if ok := h.Stream(1).RequestHeaders(req("/"), nil); ok.Err != nil || ok.LocalReply != nil {
		t.Fatalf("worker 1 = %+v, want served", ok)
	}
}

func TestMetrics(t *testing.T) {
	h := newHost(t, "basic", Config{Workers: 2, LogLevel: LogDebug})
	for i := 0; i < 3; i++ {
		s := h.Stream(i % 2)
		s.RequestHeaders(req("/"), nil)
		s.Finish()
	}
	res := h.Stream(0).RequestHeaders(req("/metrics"), nil)
	tests := []struct {
		name  string
		typ   MetricType
		value int64
	}{{"requests", Counter, 4}, {"inflight", Gauge, 12}, {"latency", Histogram, 4}}
	for _, tc := range tests {
		m, ok := h.Metric(tc.name)
		if !ok || m.Type != tc.typ || m.Value != tc.value {
			t.Errorf("Metric(%q) = %+v, %v; want type %d value %d", tc.name, m, ok, tc.typ, tc.value)
		}
	}
	if got, _ := res.Header("x-gauge-hist"); got != "12:2" {
		t.Errorf("get_metric gauge, histogram = %q, want 12:2 (histogram unreadable)", got)
	}
	if got, _ := res.Header("x-log-level"); got != "1" {
		t.Errorf("proxy_get_log_level = %q, want 1", got)
	}
	if m, _ := h.Metric("latency"); len(m.Samples) != 4 || m.Samples[0] != 42 {
		t.Errorf("latency samples = %v", m.Samples)
	}
}

func TestConfigure(t *testing.T) {
	h := newHost(t, "basic", Config{Workers: 2, PluginConfig: []byte("one")})
	if err := h.Configure([]byte("two")); err != nil {
		t.Fatal(err)
	}
	if err := h.Configure([]byte("bad")); err == nil {
		t.Fatal("Configure(bad) = nil, want proxy_on_configure false")
	}
	if h.Err(0) != nil || h.Err(1) != nil {
		t.Fatal("a refused configuration must not kill the VMs")
	}
	if res := h.Stream(1).RequestHeaders(req("/"), nil); res.Err != nil {
		t.Fatal(res.Err)
	}
}
