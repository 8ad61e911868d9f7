package lbcore

import "slices"

// HostOnlyForAuthority reports whether c reads the host header only where
// Request.host does: as the fallback for a request without :authority
// (DOMAINHASH, ${host}). A filter may then read host only when :authority is
// missing and save a host call on every other request; Envoy carries an
// HTTP/1.1 Host and HTTP/2's :authority both as :authority. It is false when
// an expression reads ${request.header.host} itself.
func (c *Config) HostOnlyForAuthority() bool {
	in := c.Inputs()
	if !slices.Contains(in.Headers, "host") {
		return false
	}
	if c.Token != nil && c.Token.readsHeader("host") {
		return false
	}
	if p := c.Persistence; p != nil {
		for _, k := range p.Keys {
			if k.readsHeader("host") {
				return false
			}
		}
	}
	return true
}

// readsHeader reports whether e reads request header name by name.
func (e *Expr) readsHeader(name string) bool {
	for _, part := range e.parts {
		for _, pl := range part.alts {
			if pl.v.kind == varHeader && pl.v.name == name {
				return true
			}
		}
	}
	return false
}

// CompactCallIDOnlyAsFallback reports whether c reads the header i (the
// Call-ID's compact form) only where Request.callID does: when call-id is
// missing or empty. A filter may then read i only for such a request and
// save a host call on every other one. It is false when an expression reads
// ${request.header.i} itself.
func (c *Config) CompactCallIDOnlyAsFallback() bool {
	in := c.Inputs()
	if !slices.Contains(in.Headers, callIDHeaders[1]) {
		return false
	}
	if c.Token != nil && c.Token.readsHeader(callIDHeaders[1]) {
		return false
	}
	if p := c.Persistence; p != nil {
		for _, k := range p.Keys {
			if k.readsHeader(callIDHeaders[1]) {
				return false
			}
		}
	}
	return true
}
