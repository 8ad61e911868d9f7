package e2e

// Helpers of the session persistence tests: hosts with the session key,
// one full request and what it brought back.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/lbcore"
)

// sessionKey is the key the test proxies share; otherSessionKey another
// proxy's.
const (
	sessionKey      = "e2e-session-key-0123456789abcdef0123456789"
	otherSessionKey = "another-proxy-key-0123456789abcdef01234567"
)

// sessionConfig is a ROUNDROBIN configuration over services with debugHeader
// and the session block s (none when nil): round robin, so that a request lands on its
// service again by its session, not by a hash of something it carries.
func sessionConfig(t testing.TB, s map[string]any, services []map[string]any, extra map[string]any) []byte {
	t.Helper()
	c := map[string]any{"lbMethod": "ROUNDROBIN", "debugHeader": true, "services": services}
	if s != nil {
		c["session"] = s
	}
	return configJSON(t, c, extra)
}

// sessionServices are b1…bn on 10.0.0.11…:8080, with weights (1 when nil).
func sessionServices(n int, weights map[string]int) []map[string]any {
	var out []map[string]any
	for i := 1; i <= n; i++ {
		s := map[string]any{"name": fmt.Sprintf("b%d", i), "address": fmt.Sprintf("10.0.0.%d:8080", 10+i)}
		if w, ok := weights[s["name"].(string)]; ok {
			s["weight"] = w
		}
		out = append(out, s)
	}
	return out
}

// sessionHost runs the module in workers VMs with key in HASHLB_SESSION_KEY.
func sessionHost(t testing.TB, cfg []byte, workers int, key string) *hostsim.Host {
	t.Helper()
	return moduleHost(t, hostsim.Config{
		Workers: workers, PluginConfig: cfg, RootID: persistRootID, Env: map[string]string{lbcore.SessionKeyEnv: key}})
}

// sessionReply is one request's outcome.
type sessionReply struct {
	service  string   // x-hashlb-service
	reason   string   // reason= of x-hashlb-decision
	cookies  []string // the upstream request's cookie lines
	upstream [][2]string
	set      []string // the response's set-cookie lines
	response [][2]string
}

// header returns the response's first value of name.
func (r sessionReply) header(name string) string {
	for _, h := range r.response {
		if strings.EqualFold(h[0], name) {
			return h[1]
		}
	}
	return ""
}

// upstreamHeader returns the upstream request's first value of name.
func (r sessionReply) upstreamHeader(name string) (string, bool) {
	for _, h := range r.upstream {
		if strings.EqualFold(h[0], name) {
			return h[1], true
		}
	}
	return "", false
}

// sessionCookie returns the value the response set for cookie name, its
// attributes, and whether it set one.
func (r sessionReply) sessionCookie(t testing.TB, name string) (string, map[string]string, bool) {
	t.Helper()
	resp := http.Response{Header: http.Header{"Set-Cookie": r.set}}
	for _, c := range resp.Cookies() {
		if c.Name == name {
			attrs := map[string]string{}
			for _, raw := range r.set {
				if !strings.HasPrefix(raw, name+"=") {
					continue
				}
				for _, a := range strings.Split(raw, ";")[1:] {
					k, v, _ := strings.Cut(strings.TrimSpace(a), "=")
					attrs[strings.ToLower(k)] = v
				}
			}
			return c.Value, attrs, true
		}
	}
	return "", nil, false
}

// sessionRequest sends a GET with extra headers on worker w, answers it
// with status, and returns what happened.
func sessionRequest(h *hostsim.Host, w int, status int, extra ...[2]string) (sessionReply, error) {
	hs := [][2]string{{":method", "GET"}, {":path", "/app"}, {":authority", "lb.example"}, {":scheme", "http"}}
	hs = append(hs, extra...)
	s := h.Stream(w)
	res := s.RequestHeaders(hs, persistReq{}.props())
	if res.Err != nil || res.LocalReply != nil {
		return sessionReply{}, fmt.Errorf("worker %d: RequestHeaders = err %v, local reply %+v", w, res.Err, res.LocalReply)
	}
	var rep sessionReply
	rep.upstream = res.Headers
	rep.service, _ = res.Header("x-hashlb-service")
	for _, p := range res.Headers {
		if p[0] == "cookie" {
			rep.cookies = append(rep.cookies, p[1])
		}
	}
	out := s.ResponseHeaders([][2]string{{":status", fmt.Sprint(status)}, {"set-cookie", "app=upstream; Path=/"}})
	if out.Err != nil {
		return rep, fmt.Errorf("ResponseHeaders: %w", out.Err)
	}
	rep.response = out.Headers
	for _, p := range out.Headers {
		if p[0] == "set-cookie" {
			rep.set = append(rep.set, p[1])
		}
	}
	if !containsString(rep.set, "app=upstream; Path=/") {
		return rep, fmt.Errorf("the upstream's own Set-Cookie is gone: %q", rep.set)
	}
	_, rep.reason, _ = strings.Cut(rep.header("x-hashlb-decision"), "reason=")
	return rep, s.Finish()
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// mustSession is sessionRequest for the test's goroutine.
func mustSession(t testing.TB, h *hostsim.Host, w int, extra ...[2]string) sessionReply {
	t.Helper()
	r, err := sessionRequest(h, w, 200, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// cookieLine is a request cookie line carrying the session cookie between
// two of the client's own.
func cookieLine(name, value string) [2]string {
	return [2]string{"cookie", "theme=dark; " + name + "=" + value + "; lang=en"}
}

// checkStripped fails when the upstream request carries the session
// cookie, or lost the client's other cookies.
func checkStripped(t testing.TB, r sessionReply, name string) {
	t.Helper()
	joined := strings.Join(r.cookies, "; ")
	if strings.Contains(joined, name+"=") {
		t.Fatalf("the upstream request carries the session cookie: cookie %q", r.cookies)
	}
	if len(r.cookies) > 0 && (!strings.Contains(joined, "theme=dark") || !strings.Contains(joined, "lang=en")) {
		t.Fatalf("the upstream request lost the client's own cookies: %q", r.cookies)
	}
}
