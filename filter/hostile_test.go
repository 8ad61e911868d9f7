//go:build !wasip1

package main

import (
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// TestEveryCopyOfRepeatedHeaders: a host that keeps header lines apart shows
// the client's x-forwarded-for line before the one the trusted proxy
// appended, and may carry the session cookie in a second cookie line. The
// decision must be lbcore's over every line (the filter read only the first
// copy before: the client's line won).
func TestEveryCopyOfRepeatedHeaders(t *testing.T) {
	tests := []struct {
		name, config string
		headers      [][2]string
	}{
		{"x-forwarded-for", `{"lbMethod":"SOURCEIPHASH","trustedForwardedHops":1,` + services + `}`,
			[][2]string{{"x-forwarded-for", "6.6.6.6"}, {"x-forwarded-for", "192.0.2.77, 203.0.113.9"}}},
		{"cookie", `{"lbMethod":"TOKEN","token":"${request.cookie.session}",` + services + `}`,
			[][2]string{{"cookie", "theme=dark"}, {"cookie", "session=s-4711"}}},
	}
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				h := newHost(t, tt.config)
				if h.started != types.OnPluginStartStatusOK {
					t.Fatalf("plugin refused: %v", h.GetErrorLogs())
				}
				// The trusted line varies per path, so that a decision made
				// from the first line alone cannot agree with lbcore by luck.
				for _, p := range []string{"/a", "/b", "/c", "/d", "/e", "/f"} {
					lines := slices.Clone(tt.headers)
					lines[1][1] = variant(lines[1][1], p)
					want := oracle(t, tt.config, lbcore.Request{Target: p, Source: "192.0.2.1:1", Headers: lines})
					r := h.request("192.0.2.1:1", "198.51.100.1:80", append([][2]string{{":path", p}}, lines...)...)
					if got := get(r.headers, "x-envoy-original-dst-host"); !slices.Equal(got, want) {
						t.Errorf("%s %s: upstream %v, want %v (lbcore over every line)", tt.name, p, got, want)
					}
				}
			})
		}
	})
}

// variant makes the trusted line's value differ per path: a new address in
// x-forwarded-for, a new session in the cookie.
func variant(v, p string) string {
	if strings.HasPrefix(v, "session=") {
		return v + p
	}
	return v[:strings.LastIndexByte(v, '.')+1] + string('0'+rune(p[1]-'a'))
}

// TestUnstartedPluginFailsClosed: on a host that sends requests to a plugin
// whose start failed, every request is answered 503 and none leaves without
// hashlb's header (before, such a request was passed on untouched).
func TestUnstartedPluginFailsClosed(t *testing.T) {
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		h := newHost(t, `{"lbMethod":"URLHASH","hashLength":0,`+services+`}`)
		if h.started != types.OnPluginStartStatusFailed {
			t.Fatalf("plugin start = %v, want failed", h.started)
		}
		r := h.request("192.0.2.1:1", "198.51.100.1:80", [2]string{":path", "/"},
			[2]string{"x-envoy-original-dst-host", "6.6.6.6:666"})
		if r.local == nil || r.local.StatusCode != 503 {
			t.Fatalf("local reply %+v, want 503", r.local)
		}
		if r.action != types.ActionPause {
			t.Errorf("action = %v, want pause (answered locally)", r.action)
		}
	})
}

// TestCappedInputCounted: a JWT nested deeper than lbcore.MaxJSONDepth is
// read as empty, the backup method decides, and hashlb.input_capped counts it.
func TestCappedInputCounted(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	deep := "Bearer " + enc([]byte(`{}`)) + "." + enc([]byte(strings.Repeat("[", 5000)+strings.Repeat("]", 5000))) + ".s"
	config := `{"lbMethod":"TOKEN","token":"${request.header.authorization|jwt(\"sub\")}","debugHeader":true,` + services + `}`
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		h := newHost(t, config)
		r := h.request("192.0.2.1:1", "198.51.100.1:80", [2]string{":path", "/"}, [2]string{"authorization", deep})
		if got := get(r.headers, "x-envoy-original-dst-host"); len(got) != 1 {
			t.Fatalf("upstream %v, want one address", got)
		}
		if got := get(r.response, "x-hashlb-decision"); len(got) != 1 || !strings.Contains(got[0], "reason=backup") {
			t.Errorf("debug header %v, want the backup method", got)
		}
		if n := h.counter("hashlb.input_capped"); n != 1 {
			t.Errorf("hashlb.input_capped = %d, want 1", n)
		}
	})
}
