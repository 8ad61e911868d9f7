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
}

// Inputs returns what c's decisions read: its method's input, the token and
// persistence key expressions, and x-forwarded-for when the client IP comes
// from it.
func (c *Config) Inputs() Inputs {
	var in Inputs
	client := false
	switch c.LBMethod {
	case MethodURLHash:
		in.Target = true
	case MethodDomainHash:
		in.Target, in.Authority = true, true
		in.header("host")
	case MethodDestIPHash:
		in.Dest = true
	case MethodSourceIPHash:
		client = true
	case MethodSrcDestIPHash:
		client, in.Dest = true, true
	case MethodSrcIPSrcPortHash:
		in.Source = true // the connection's peer, never x-forwarded-for
	case MethodCallIDHash:
		in.header("call-id")
		in.header("i")
	case MethodTokenHash:
		client = c.Token.addInputs(&in) || client
	}
	if p := c.Persistence; p != nil {
		for _, k := range p.Keys {
			client = k.addInputs(&in) || client
		}
	}
	if client {
		if c.TrustedForwardedHops > 0 {
			in.header("x-forwarded-for")
		} else {
			in.Source = true
		}
	}
	return in
}

func (in *Inputs) header(name string) {
	if !slices.Contains(in.Headers, name) {
		in.Headers = append(in.Headers, name)
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
			case varCallID:
				in.header("call-id")
				in.header("i")
			}
		}
	}
	return client
}
