package lbcore

import (
	"slices"
	"strings"

	"github.com/tidwall/gjson"
)

// session decodes the session block.
func (d *decoder) session(path string, v gjson.Result) *Session {
	s := &Session{Name: fSessionName.defaultString(), Path: fSessionPath.defaultString(),
		Secure: fSessionSecure.defaultBool(), HTTPOnly: fSessionHTTPOnly.defaultBool(),
		Lifetime: fSessionLifetime.defaultString(), AbsoluteTimeout: fSessionAbsoluteTimeout.defaultDuration(),
		ClockSkew: fSessionClockSkew.defaultDuration()}
	hasType, idleSet := false, false
	if !d.object(path, v, func(name string, v gjson.Result) bool {
		fp := path + "." + name
		switch name {
		case "type":
			hasType = true
			d.setEnum(&s.Type, fSessionType, fp, v)
		case "name":
			if n, ok := d.str(fp, v); ok {
				switch {
				case n == "" || !isToken(n):
					d.errorf("%s: %q is not a valid cookie or header name (letters, digits and !#$%%&'*+-.^_`|~)", fp, n)
				case len(n) > maxSessionName:
					d.errorf("%s: %d bytes, at most %d", fp, len(n), maxSessionName)
				}
				s.Name = n
			}
		case "path":
			if p, ok := d.str(fp, v); ok {
				switch {
				case !strings.HasPrefix(p, "/"):
					d.errorf("%s: %q is not an absolute path such as /", fp, p)
				case !isVisibleASCII(p) || strings.ContainsAny(p, ";,"):
					d.errorf("%s: %q has a space, control character, non-ASCII byte, ';' or ',' (which would end the cookie attribute)", fp, p)
				}
				s.Path = p
			}
		case "domain":
			d.setChecked(&s.Domain, fp, v, isCookieDomain, "%s: %q is not a domain such as example.com (letters, digits, - and .)")
		case "secure":
			s.Secure = d.boolean(fp, v)
		case "httpOnly":
			s.HTTPOnly = d.boolean(fp, v)
		case "sameSite":
			d.setEnum(&s.SameSite, fSessionSameSite, fp, v)
		case "lifetime":
			d.setEnum(&s.Lifetime, fSessionLifetime, fp, v)
		case "absoluteTimeout":
			s.AbsoluteTimeout = d.duration(fSessionAbsoluteTimeout, fp, v)
		case "idleTimeout":
			idleSet = true
			s.IdleTimeout = d.duration(fSessionIdleTimeout, fp, v)
		case "clockSkew":
			s.ClockSkew = d.duration(fSessionClockSkew, fp, v)
		default:
			return false
		}
		return true
	}) {
		return nil
	}
	if !hasType {
		d.errorf("%s.type: is required", path)
	}
	if idleSet && s.IdleTimeout > s.AbsoluteTimeout {
		d.errorf("%s.idleTimeout: %q is longer than absoluteTimeout %q", path, FormatDuration(s.IdleTimeout), FormatDuration(s.AbsoluteTimeout))
	}
	if s.SameSite == "None" && !s.Secure {
		d.errorf("%s.sameSite: None needs secure true (browsers refuse a SameSite=None cookie without Secure)", path)
	}
	if s.Type == SessionHeader {
		s.Name = strings.ToLower(s.Name)
		for _, f := range []struct {
			name string
			set  bool
		}{{"path", v.Get("path").Exists()}, {"domain", s.Domain != ""}, {"secure", v.Get("secure").Exists()},
			{"httpOnly", v.Get("httpOnly").Exists()}, {"sameSite", s.SameSite != ""}, {"lifetime", v.Get("lifetime").Exists()}} {
			if f.set {
				d.errorf("%s.%s: is a cookie attribute, and type is header", path, f.name)
			}
		}
	}
	return s
}

// isCookieDomain reports whether s is a plain domain name: letters, digits,
// '-' and '.' (a leading '.' as older servers write it is allowed).
func isCookieDomain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c|0x20 && c|0x20 <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// sessionChecks refuses what a session block cannot work with: a network
// filter (no headers), a header name hashlb writes or Envoy manages, and a
// decision input that reads the session's cookie or header, which must
// never steer anything but the session check.
func (d *decoder) sessionChecks(c *Config) {
	s := c.Session
	if s == nil {
		return
	}
	if c.Network() {
		return // refused whole by the host table (hosts.go)
	}
	if s.Type == SessionHeader {
		switch {
		case s.Name == c.UpstreamHeader:
			d.errorf("session.name: %q is upstreamHeader", s.Name)
		case s.Name == c.ServiceHeader:
			d.errorf("session.name: %q is serviceHeader", s.Name)
		case s.Name == "cookie" || s.Name == "set-cookie" || s.Name == "x-hashlb-decision" || slices.Contains(managedHeaders, s.Name):
			d.errorf("session.name: %q is a header hashlb or Envoy uses otherwise; choose one of its own such as hashlb-session", s.Name)
		}
	}
	reads := func(e *Expr) bool {
		for _, part := range e.parts {
			for _, pl := range part.alts {
				switch v := pl.v; {
				case s.Type == SessionCookie && v.kind == varCookie && v.name == s.Name:
					return true
				case s.Type == SessionHeader && v.kind == varHeader && v.name == s.Name:
					return true
				}
			}
		}
		return false
	}
	const why = "which only the session check reads (hashlb removes it before the request goes upstream)"
	if c.Token != nil && reads(c.Token) {
		d.errorf("token: %q reads the session's %s %q, %s", c.Token.String(), s.Type, s.Name, why)
	}
	if p := c.Persistence; p != nil {
		for i, k := range p.Keys {
			if reads(k) {
				d.errorf("persistence.keys[%d]: %q reads the session's %s %q, %s", i, k.String(), s.Type, s.Name, why)
			}
		}
	}
}
