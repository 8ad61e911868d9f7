package lbcore

import "strings"

// Keyer extracts a hashing method's input from a request. Each of the eight
// Citrix methods is one small Keyer; ranking is shared (hrw.go).
type Keyer interface {
	// AppendKey appends the method's hash input to dst. ok is false when the
	// request does not carry the input, and the backup method decides.
	AppendKey(dst []byte, r *Request) (key []byte, ok bool)
}

// URLHash hashes the first Length bytes of the request target as received,
// path and query (Citrix URLHASH).
type URLHash struct{ Length int }

// AppendKey implements Keyer.
func (m URLHash) AppendKey(dst []byte, r *Request) ([]byte, bool) {
	u := r.URL()
	if u == "" {
		return dst, false
	}
	return append(dst, u[:min(len(u), m.Length)]...), true
}

// DomainHash hashes the first Length bytes of the request's domain: the host
// of an absolute request URL if present, else the Host header; lower-cased,
// port removed (Citrix DOMAINHASH).
type DomainHash struct{ Length int }

// AppendKey implements Keyer.
func (m DomainHash) AppendKey(dst []byte, r *Request) ([]byte, bool) {
	h, ok := r.Host()
	if !ok {
		return dst, false
	}
	h = strings.TrimSuffix(h, ".") // "example.com." and "example.com" are one domain
	if h == "" {
		return dst, false
	}
	h = h[:min(len(h), m.Length)]
	for i := 0; i < len(h); i++ {
		c := h[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst, true
}

// DestIPHash hashes the masked address the request was received on
// (Citrix DESTINATIONIPHASH).
type DestIPHash struct{ mask ipMask }

// AppendKey implements Keyer.
func (m DestIPHash) AppendKey(dst []byte, r *Request) ([]byte, bool) {
	a, _, ok := r.ServerAddr()
	if !ok {
		return dst, false
	}
	return m.mask.appendIP(dst, a), true
}

// SourceIPHash hashes the masked client address, honouring
// trustedForwardedHops (Citrix SOURCEIPHASH).
type SourceIPHash struct{ mask ipMask }

// AppendKey implements Keyer.
func (m SourceIPHash) AppendKey(dst []byte, r *Request) ([]byte, bool) {
	a, _, ok := r.ClientAddr()
	if !ok {
		return dst, false
	}
	return m.mask.appendIP(dst, a), true
}

// SrcDestIPHash hashes the masked client and destination addresses together,
// symmetrically: swapping them gives the same key, so both directions of a
// flow reach one service (Citrix SRCIPDESTIPHASH).
type SrcDestIPHash struct{ mask ipMask }

// AppendKey implements Keyer.
func (m SrcDestIPHash) AppendKey(dst []byte, r *Request) ([]byte, bool) {
	src, _, ok1 := r.ClientAddr()
	dstIP, _, ok2 := r.ServerAddr()
	if !ok1 || !ok2 {
		return dst, false
	}
	var a, b [17]byte
	x := m.mask.appendIP(a[:0], src)
	y := m.mask.appendIP(b[:0], dstIP)
	if string(x) > string(y) { // order by bytes: the smaller address first
		x, y = y, x
	}
	return append(append(dst, x...), y...), true
}

// SrcIPSrcPortHash hashes the masked source IP and source port of the
// connection, so one connection stays on one service (Citrix
// SRCIPSRCPORTHASH). It reads the connection's peer, never x-forwarded-for,
// which carries no port: the method is about the connection itself.
type SrcIPSrcPortHash struct{ mask ipMask }

// AppendKey implements Keyer.
func (m SrcIPSrcPortHash) AppendKey(dst []byte, r *Request) ([]byte, bool) {
	a, port, ok := parseAddrPort(r.Source)
	if !ok || port == 0 {
		return dst, false
	}
	dst = m.mask.appendIP(dst, a)
	return append(dst, byte(port>>8), byte(port)), true
}

// CallIDHash hashes the SIP Call-ID header (compact form "i" too), exactly as
// received (Citrix CALLIDHASH).
type CallIDHash struct{}

// AppendKey implements Keyer.
func (CallIDHash) AppendKey(dst []byte, r *Request) ([]byte, bool) {
	v := r.CallID()
	if v == "" {
		return dst, false
	}
	return append(dst, v...), true
}

// Token hashes the value of a key expression (Citrix TOKEN, whose token is
// extracted by an expression). An empty value has no token.
type Token struct{ Expr *Expr }

// AppendKey implements Keyer.
func (m Token) AppendKey(dst []byte, r *Request) ([]byte, bool) {
	n := len(dst)
	dst = m.Expr.AppendEval(dst, r)
	return dst, len(dst) > n
}

// keyerFor returns the Keyer of c's method, or nil for ROUNDROBIN and
// LEASTCONNECTION.
func keyerFor(c *Config) Keyer {
	mask := ipMask{v4: c.Netmask, v6: c.V6NetmaskLen}
	switch c.LBMethod {
	case MethodURLHash:
		return URLHash{Length: c.HashLength}
	case MethodDomainHash:
		return DomainHash{Length: c.HashLength}
	case MethodDestIPHash:
		return DestIPHash{mask}
	case MethodSourceIPHash:
		return SourceIPHash{mask}
	case MethodSrcDestIPHash:
		return SrcDestIPHash{mask}
	case MethodSrcIPSrcPortHash:
		return SrcIPSrcPortHash{mask}
	case MethodCallIDHash:
		return CallIDHash{}
	case MethodTokenHash:
		return Token{Expr: c.Token}
	}
	return nil
}
