package main

import (
	"strings"
	"syscall"
	"unsafe"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
)

// enableSession gives the balancer the session key from the VM's
// environment (lbcore.SessionKeyEnv), as the etcd password is read
// (fleet.go): never from the plugin configuration, which Envoy's admin
// endpoint shows. A configuration with a session block and no usable key
// does not start (SECURITY.md, "Session persistence").
func enableSession(bal *lbcore.Balancer, c *lbcore.Config) error {
	if c.Session == nil {
		return nil
	}
	key, _ := syscall.Getenv(lbcore.SessionKeyEnv)
	return bal.EnableSession([]byte(key))
}

// stripSession removes the client's copies of the session's cookie or
// header from the request before it goes upstream: the value steers only
// the session check, and the upstream never sees it. req holds what the
// decision read, every cookie line among it for a cookie session
// (lbcore.Config.Inputs). A host that refuses the edit is counted in
// hashlb.internal_error; the request still goes (the value can steer
// nothing upstream).
func (h *httpContext) stripSession(req *lbcore.Request) {
	s := h.p.cfg.Session
	if s.Type == lbcore.SessionHeader {
		for _, hd := range req.Headers {
			if hd[0] == s.Name {
				if err := proxywasm.RemoveHttpRequestHeader(s.Name); err != nil {
					h.p.m.internalError.Increment(1)
				}
				return
			}
		}
		return
	}
	// Most requests carry no such cookie: no line names it, nothing is copied.
	named := false
	for _, hd := range req.Headers {
		named = named || hd[0] == "cookie" && strings.Contains(hd[1], s.Name)
	}
	if !named {
		return
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
		return
	}
	var err error
	if len(b) == 0 {
		err = proxywasm.RemoveHttpRequestHeader("cookie")
	} else {
		// A view of the context's own buffer, unchanged until the stream
		// ends (pluginContext.value): the host copies it.
		err = proxywasm.ReplaceHttpRequestHeader("cookie", unsafe.String(unsafe.SliceData(b), len(b)))
	}
	if err != nil {
		h.p.m.internalError.Increment(1)
	}
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
