package main

import (
	"strings"
	"syscall"
	"unsafe"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// enableSession gives the balancer the session keys from the VM's
// environment (lbcore.SessionKeyEnv: the current key, then previous ones) and
// the plugin's root_id, the scope its sessions are signed for, as the etcd
// password is read (fleet.go): never from the plugin configuration, which
// Envoy's admin endpoint shows. A configuration with a session block and no
// usable key does not start (SECURITY.md, "Session persistence").
func enableSession(bal *lbcore.Balancer, c *lbcore.Config, rootID string) error {
	if c.Session == nil {
		return nil
	}
	key, _ := syscall.Getenv(lbcore.SessionKeyEnv)
	return bal.EnableSession([]byte(key), rootID)
}

// The local replies of a request whose session value cannot be removed:
// it must never reach the upstream.
const (
	stripUnreadableBody = "hashlb: the request's Cookie header is too large to remove the session cookie from"
	stripRefusedBody    = "hashlb: the host refused to remove the session value from the request"
)

// stripSession removes the client's copies of the session's cookie or
// header from the request before it goes upstream: the value steers only
// the session check, and the upstream never sees it. It returns the status
// of the local reply to send instead (0: none), already counted, when the
// value cannot be removed.
//
// A header session is removed by name whatever the read found: Envoy's
// remove is HeaderMap::remove, every copy, and needs no read. A cookie
// session rewrites the Cookie lines the decision read (req, every cookie
// line for a cookie session: lbcore.Config.Inputs). When that read failed
// (a header map larger than the module takes, possible with Envoy's
// max_request_headers_kb raised), the first Cookie line alone is read, its
// session cookies dropped, and put back with a replace (HeaderMap::setCopy:
// every Cookie line removed, one added), so no copy of the value goes on;
// cookies of later Cookie lines are lost on that path, which RFC 6265
// clients never send. A Cookie line too large even for that read is
// answered 431.
func (h *httpContext) stripSession(req *lbcore.Request) uint32 {
	p := h.p
	s := p.cfg.Session
	if s.Type == lbcore.SessionHeader {
		if err := proxywasm.RemoveHttpRequestHeader(s.Name); err != nil {
			return h.stripFailed(500)
		}
		return 0
	}
	if p.readFailed {
		v, err := getRequestHeader("cookie")
		switch {
		case err == types.ErrorStatusNotFound:
			return 0 // no Cookie line at all
		case err != nil:
			return h.stripFailed(431)
		}
		// The decision reads the line it could not read with the map.
		req.Headers = append(req.Headers, [2]string{"cookie", v})
		b, found := lbcore.StripSessionCookie(h.cookie[:0], v, s.Name)
		if !found {
			b = append(b, v...)
		}
		h.cookie = b
		return h.putCookie(b)
	}
	// Most requests carry no such cookie: no line names it, nothing is copied.
	named := false
	for _, hd := range req.Headers {
		named = named || hd[0] == "cookie" && strings.Contains(hd[1], s.Name)
	}
	if !named {
		return 0
	}
	// Every cookie line without the session's cookies, joined into one
	// line (RFC 6265 5.4: a client sends one Cookie header; Envoy joins
	// HTTP/2 crumbs for an HTTP/1 upstream the same way).
	b, found := h.cookie[:0], false
	for _, hd := range req.Headers {
		if hd[0] != "cookie" {
			continue
		}
		n := len(b)
		if n > 0 {
			b = append(b, "; "...)
		}
		var strip bool
		if b, strip = lbcore.StripSessionCookie(b, hd[1], s.Name); strip {
			found = true
		} else {
			b = append(b, hd[1]...)
		}
		if len(b) == n+2 && n > 0 { // the line was the session's cookie alone
			b = b[:n]
		}
	}
	h.cookie = b
	if !found {
		return 0
	}
	return h.putCookie(b)
}

// putCookie sets the request's Cookie lines to b, one line, or removes them
// when b is empty.
func (h *httpContext) putCookie(b []byte) uint32 {
	var err error
	if len(b) == 0 {
		err = proxywasm.RemoveHttpRequestHeader("cookie")
	} else {
		// A view of the context's own buffer, unchanged until the stream
		// ends (pluginContext.value): the host copies it.
		err = proxywasm.ReplaceHttpRequestHeader("cookie", unsafe.String(unsafe.SliceData(b), len(b)))
	}
	if err != nil {
		return h.stripFailed(500)
	}
	return 0
}

// stripFailed counts a request whose session value cannot be removed
// (hashlb.session_strip_failed) and returns its reply's status.
func (h *httpContext) stripFailed(status uint32) uint32 {
	h.p.m.sessionStripFailed()
	return status
}

// replyStrip answers a request whose session value cannot be removed.
func (h *httpContext) replyStrip(status uint32) types.Action {
	h.local = true
	body := stripRefusedBody
	if status == 431 {
		body = stripUnreadableBody
	}
	_ = proxywasm.SendHttpResponse(status, [][2]string{{"content-type", "text/plain"}}, []byte(body), -1)
	return types.ActionPause
}

// setSession adds the session the response carries (lbcore.Decision.SetsSession):
// a Set-Cookie, or the session's header. Upstream Set-Cookie lines stay.
func (h *httpContext) setSession() {
	p := h.p
	d := &h.dec
	if !d.SetsSession() || d.At(0) != h.chosen {
		return
	}
	now := p.now
	var err error
	if p.cfg.Session.Type == lbcore.SessionCookie {
		h.session = p.bal.AppendSetCookie(h.session[:0], d, now)
		err = proxywasm.AddHttpResponseHeader("set-cookie", unsafe.String(unsafe.SliceData(h.session), len(h.session)))
	} else {
		h.session = p.bal.AppendSessionValue(h.session[:0], d, now)
		err = proxywasm.ReplaceHttpResponseHeader(p.cfg.Session.Name, unsafe.String(unsafe.SliceData(h.session), len(h.session)))
	}
	if err != nil {
		p.m.internalError.Increment(1)
		return
	}
	p.m.sessionSet(d)
}
