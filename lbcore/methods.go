package lbcore

import "strings"

// Method is a load-balancing method, named by the vendor token operators know.
type Method uint8

// The load-balancing methods. The first eight are the Citrix ADC hashing
// methods; LEASTCONNECTION and ROUNDROBIN are the fallbacks and may also be
// used on their own. A new method gets a constant here and an entry in
// methodSpecs; its values need not follow any order. Each is exported with
// its type, whether or not a package outside names it.
const (
	MethodRoundRobin Method = iota
	MethodLeastConnection
	MethodURLHash
	MethodDomainHash
	MethodDestIPHash
	MethodSourceIPHash
	MethodSrcDestIPHash
	MethodSrcIPSrcPortHash
	MethodCallIDHash
	MethodTokenHash
)

// methodSpec is everything lbcore knows about one method. ParseConfig,
// Inputs, Methods, IsHash, the Balancer and the tests all read methodSpecs,
// so a new method is one entry there plus its keyer.
type methodSpec struct {
	method Method
	// name is the vendor token, as configured (case-insensitively) and as
	// reported in metrics and the debug header.
	name string
	// keyer returns the keyer that extracts the method's hash input under c.
	// It is nil for a method that does not hash: such a method chooses with
	// pick, and may be backupLBMethod.
	keyer func(c *Config) keyer
	// inputs adds what the keyer reads to in and reports whether it reads
	// the client address (Inputs adds x-forwarded-for or source.address for
	// that). nil: the method reads nothing, or only its expression (TOKEN's
	// token, added with the other expressions).
	inputs func(in *Inputs) (client bool)
	// backup, when ownBackup is set, chooses for a request without the
	// method's input instead of backupLBMethod (Citrix balances a URLHASH
	// request without a URL round robin).
	backup    Method
	ownBackup bool
	// pick chooses without a key, for a method that does not hash: it fills
	// in d's services and returns d. reason is the decision's Reason when
	// the method itself chose. (d goes by value: a pointer passed to a func
	// value escapes, and the Decision would be allocated on every request.)
	pick   func(b *Balancer, d Decision) Decision
	reason Reason
}

// methodSpecs describes every method, hashing methods first, in the order
// the Citrix documentation lists them (Methods, docs/config.md and the schema
// keep this order).
var methodSpecs = [...]methodSpec{
	{method: MethodURLHash, name: "URLHASH", backup: MethodRoundRobin, ownBackup: true,
		keyer:  func(c *Config) keyer { return urlHash{Length: c.HashLength} },
		inputs: func(in *Inputs) bool { in.Target = true; return false }},
	{method: MethodDomainHash, name: "DOMAINHASH",
		keyer: func(c *Config) keyer { return domainHash{Length: c.HashLength} },
		// Not :path: Envoy's HTTP/1 codec moves an absolute-form target's
		// host to :authority (allow_absolute_url, on by default), so
		// Request.host finds it there (RATIONALE.md, cost per request).
		inputs: func(in *Inputs) bool {
			in.Authority = true
			in.header("host")
			return false
		}},
	{method: MethodDestIPHash, name: "DESTINATIONIPHASH",
		keyer:  func(c *Config) keyer { return destIPHash{c.ipMask()} },
		inputs: func(in *Inputs) bool { in.Dest = true; return false }},
	{method: MethodSourceIPHash, name: "SOURCEIPHASH",
		keyer:  func(c *Config) keyer { return sourceIPHash{c.ipMask()} },
		inputs: func(in *Inputs) bool { return true }},
	{method: MethodSrcDestIPHash, name: "SRCIPDESTIPHASH",
		keyer:  func(c *Config) keyer { return srcDestIPHash{c.ipMask()} },
		inputs: func(in *Inputs) bool { in.Dest = true; return true }},
	{method: MethodSrcIPSrcPortHash, name: "SRCIPSRCPORTHASH",
		keyer: func(c *Config) keyer { return srcIPSrcPortHash{c.ipMask()} },
		// The connection's peer, never x-forwarded-for.
		inputs: func(in *Inputs) bool { in.Source = true; return false }},
	{method: MethodCallIDHash, name: "CALLIDHASH",
		keyer:  func(*Config) keyer { return callIDHash{} },
		inputs: func(in *Inputs) bool { in.callID(); return false }},
	{method: MethodTokenHash, name: "TOKEN",
		keyer: func(c *Config) keyer { return tokenKeyer{Expr: c.Token} }},
	{method: MethodLeastConnection, name: "LEASTCONNECTION",
		pick:   func(b *Balancer, d Decision) Decision { b.leastConnection(&d); return d },
		reason: ReasonLeastConnection},
	{method: MethodRoundRobin, name: "ROUNDROBIN",
		pick:   func(b *Balancer, d Decision) Decision { b.roundRobin(&d); return d },
		reason: ReasonRoundRobin},
}

// spec returns m's description, or nil for a value that is no method.
func (m Method) spec() *methodSpec {
	for i := range methodSpecs {
		if methodSpecs[i].method == m {
			return &methodSpecs[i]
		}
	}
	return nil
}

// methodNamed returns the method called name (case-insensitively).
func methodNamed(name string) (Method, bool) {
	for i := range methodSpecs {
		if strings.EqualFold(methodSpecs[i].name, name) {
			return methodSpecs[i].method, true
		}
	}
	return 0, false
}

// String returns the vendor token, for example "URLHASH".
func (m Method) String() string {
	if s := m.spec(); s != nil {
		return s.name
	}
	return "UNKNOWN"
}

// IsHash reports whether m is a hashing method: it ranks the services by a
// key taken from the request.
func (m Method) IsHash() bool {
	s := m.spec()
	return s != nil && s.keyer != nil
}

// Methods returns every method token, hashing methods first, in the order the
// Citrix documentation lists them.
func Methods() []string {
	out := make([]string, 0, len(methodSpecs))
	for i := range methodSpecs {
		out = append(out, methodSpecs[i].name)
	}
	return out
}

// backupMethods returns the tokens backupLBMethod accepts: the methods that
// need no input from the request.
func backupMethods() []string {
	var out []string
	for i := range methodSpecs {
		if methodSpecs[i].pick != nil {
			out = append(out, methodSpecs[i].name)
		}
	}
	return out
}

// ipMask is the configured netmask and v6NetmaskLen.
func (c *Config) ipMask() ipMask { return ipMask{v4: c.Netmask, v6: c.V6NetmaskLen} }

// keyer extracts a hashing method's input from a request. Each of the eight
// Citrix methods is one small keyer; ranking is shared (hrw.go).
type keyer interface {
	// AppendKey appends the method's hash input to dst. ok is false when the
	// request does not carry the input, and the backup method decides. x is
	// the decision's evaluation context (trusted hops, caps hit).
	AppendKey(dst []byte, r *Request, x *evalCtx) (key []byte, ok bool)
}

// urlHash hashes the first Length bytes of the request target as received,
// path and query (Citrix URLHASH).
type urlHash struct{ Length int }

// AppendKey implements keyer.
func (m urlHash) AppendKey(dst []byte, r *Request, _ *evalCtx) ([]byte, bool) {
	k, ok := m.key(r)
	return append(dst, k...), ok
}

// key is the key AppendKey appends, where it lies in r (Balancer.decide
// hashes it there).
func (m urlHash) key(r *Request) (string, bool) {
	u := r.url()
	return u[:min(len(u), m.Length)], u != ""
}

// domainHash hashes the first Length bytes of the request's domain: the host
// of an absolute request URL if present, else the Host header; lower-cased,
// port removed (Citrix DOMAINHASH).
type domainHash struct{ Length int }

// AppendKey implements keyer.
func (m domainHash) AppendKey(dst []byte, r *Request, _ *evalCtx) ([]byte, bool) {
	h, ok := r.host()
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

// destIPHash hashes the masked address the request was received on
// (Citrix DESTINATIONIPHASH).
type destIPHash struct{ mask ipMask }

// AppendKey implements keyer.
func (m destIPHash) AppendKey(dst []byte, r *Request, _ *evalCtx) ([]byte, bool) {
	a, _, ok := r.serverAddr()
	if !ok {
		return dst, false
	}
	return m.mask.appendIP(dst, a), true
}

// sourceIPHash hashes the masked client address, honouring
// trustedForwardedHops (Citrix SOURCEIPHASH).
type sourceIPHash struct{ mask ipMask }

// AppendKey implements keyer.
func (m sourceIPHash) AppendKey(dst []byte, r *Request, x *evalCtx) ([]byte, bool) {
	a, _, ok := r.clientAddr(x.hops)
	if !ok {
		return dst, false
	}
	return m.mask.appendIP(dst, a), true
}

// srcDestIPHash hashes the masked client and destination addresses together,
// symmetrically: swapping them gives the same key, so both directions of a
// flow reach one service (Citrix SRCIPDESTIPHASH).
type srcDestIPHash struct{ mask ipMask }

// AppendKey implements keyer.
func (m srcDestIPHash) AppendKey(dst []byte, r *Request, x *evalCtx) ([]byte, bool) {
	src, _, ok1 := r.clientAddr(x.hops)
	dstIP, _, ok2 := r.serverAddr()
	if !ok1 || !ok2 {
		return dst, false
	}
	var a, b [17]byte
	p := m.mask.appendIP(a[:0], src)
	q := m.mask.appendIP(b[:0], dstIP)
	if string(p) > string(q) { // order by bytes: the smaller address first
		p, q = q, p
	}
	return append(append(dst, p...), q...), true
}

// srcIPSrcPortHash hashes the masked source IP and source port of the
// connection, so one connection stays on one service (Citrix
// SRCIPSRCPORTHASH). It reads the connection's peer, never x-forwarded-for,
// which carries no port: the method is about the connection itself.
type srcIPSrcPortHash struct{ mask ipMask }

// AppendKey implements keyer.
func (m srcIPSrcPortHash) AppendKey(dst []byte, r *Request, _ *evalCtx) ([]byte, bool) {
	a, port, ok := parseAddrPort(r.Source)
	if !ok || port == 0 {
		return dst, false
	}
	dst = m.mask.appendIP(dst, a)
	return append(dst, byte(port>>8), byte(port)), true
}

// callIDHash hashes the SIP Call-ID header (compact form "i" too), exactly as
// received (Citrix CALLIDHASH).
type callIDHash struct{}

// AppendKey implements keyer.
func (callIDHash) AppendKey(dst []byte, r *Request, _ *evalCtx) ([]byte, bool) {
	v := r.callID()
	if v == "" {
		return dst, false
	}
	return append(dst, v...), true
}

// keyInRequest returns the key of a keyer whose key lies in r as it is
// (URLHASH, CALLIDHASH), what its AppendKey would append; inPlace is false for
// the other keyers, whose keys are built.
func keyInRequest(k keyer, r *Request) (key string, ok, inPlace bool) {
	switch m := k.(type) {
	case urlHash:
		key, ok = m.key(r)
		return key, ok, true
	case callIDHash:
		key = r.callID()
		return key, key != "", true
	}
	return "", false, false
}

// tokenKeyer hashes the value of a key expression (Citrix TOKEN, whose token is
// extracted by an expression). An empty value has no token.
type tokenKeyer struct{ Expr *Expr }

// AppendKey implements keyer.
func (m tokenKeyer) AppendKey(dst []byte, r *Request, x *evalCtx) ([]byte, bool) {
	n := len(dst)
	dst = m.Expr.appendEval(dst, r, x)
	return dst, len(dst) > n
}

// keyerFor returns the keyer of c's method, or nil for a method that does not
// hash.
func keyerFor(c *Config) keyer {
	if s := c.LBMethod.spec(); s != nil && s.keyer != nil {
		return s.keyer(c)
	}
	return nil
}
