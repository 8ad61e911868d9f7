package lbcore

import "slices"

// Inputs lists what a configuration's decisions can read from a request, so
// that the filter fetches only that from the host: copying every request
// header into the module on every request costs time and garbage for
// nothing when the method hashes one header or none.
type Inputs struct {
	// Target, Authority and Method are the :path, :authority and :method
	// pseudo-headers.
	Target, Authority, Method bool
	// Source and Dest are the source.address and destination.address properties.
	Source, Dest bool
	// Headers are the lower-case names of the other headers read.
	Headers []string
	// AllCopies is true when a decision reads every copy of a header, not
	// only the first: x-forwarded-for for trustedForwardedHops (read right to
	// left across all its lines) and cookie (searched in every line). A host
	// may keep repeated header lines apart, and proxy-wasm's single-value
	// read returns only the first, so the filter must then read the whole
	// header map: reading only the first x-forwarded-for line would let a
	// client-sent line win over the one the trusted proxy appended.
	AllCopies bool
}

// Inputs returns what c's decisions read: its method's input, the token and
// persistence key expressions, and x-forwarded-for when the client IP comes
// from it.
func (c *Config) Inputs() Inputs {
	var in Inputs
	client := c.methodInputs(&in)
	if c.Token != nil {
		client = c.Token.addInputs(&in) || client
	}
	if p := c.Persistence; p != nil {
		for _, k := range p.Keys {
			client = k.addInputs(&in) || client
		}
	}
	if client {
		c.clientInputs(&in)
	}
	if s := c.Session; s != nil {
		if s.Type == SessionCookie {
			in.header("cookie")
			in.AllCopies = true
		} else {
			in.header(s.Name)
		}
	}
	return in
}

// methodInputs adds what lbMethod itself reads (methodSpec.inputs; not the
// token expression) to in and reports whether it reads the client address.
func (c *Config) methodInputs(in *Inputs) (client bool) {
	if s := c.LBMethod.spec(); s != nil && s.inputs != nil {
		return s.inputs(in)
	}
	return false
}

// clientInputs adds what reading the client address takes: x-forwarded-for
// behind trusted proxies, else the connection's source address.
func (c *Config) clientInputs(in *Inputs) {
	if c.TrustedForwardedHops > 0 {
		in.header("x-forwarded-for")
		in.AllCopies = true
	} else {
		in.Source = true
	}
}

func (in *Inputs) header(name string) {
	if !slices.Contains(in.Headers, name) {
		in.Headers = append(in.Headers, name)
	}
}

// callID adds the headers Request.callID reads.
func (in *Inputs) callID() {
	for _, name := range callIDHeaders {
		in.header(name)
	}
}

// addInputs adds what e reads to in and reports whether it reads the client
// address.
func (e *Expr) addInputs(in *Inputs) (client bool) {
	for _, part := range e.parts {
		for _, pl := range part.alts {
			switch v := pl.v; v.kind {
			case varClientIP, varClientPort:
				client = true
			case varServerIP, varServerPort:
				in.Dest = true
			case varHost:
				in.Target, in.Authority = true, true
				in.header("host")
			case varPath, varURL, varQuery:
				in.Target = true
			case varMethod:
				in.Method = true
			case varHeader:
				in.header(v.name)
			case varCookie:
				in.header("cookie")
				in.AllCopies = true
			case varCallID:
				in.callID()
			}
		}
	}
	return client
}
