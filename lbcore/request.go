package lbcore

import (
	"net/netip"
	"strings"
	"unsafe"
)

// Request is the read-only view of one HTTP request that every decision is
// made from. The filter fills it from request headers and Envoy properties;
// tests build it by hand. Nothing in it is trusted: every field may be empty
// or malformed, and every reader falls back safely.
type Request struct {
	// Target is the request target as received (":path"): origin form
	// "/a/b?q=1", or absolute form "http://host/a/b?q=1".
	Target string
	// Authority is ":authority" (or "host" for HTTP/1.0).
	Authority string
	// Method is ":method".
	Method string
	// Source is the connection's peer address, "ip:port" or "[v6]:port"
	// (Envoy property source.address).
	Source string
	// Dest is the address the connection was accepted on (destination.address).
	Dest string
	// Headers holds the request headers as received, names lower-case.
	// Repeated headers appear once per copy.
	Headers [][2]string
}

// evalCtx is what evaluating a request takes beyond the request itself: the
// configuration's trusted hops in, the caps hit out. The Balancer owns one
// and resets it for each decision, so a Request is only ever read; keyers
// and expressions receive it with the request.
type evalCtx struct {
	// hops is trustedForwardedHops: when > 0 the client IP is read from
	// x-forwarded-for (Request.clientAddr).
	hops int
	// capped notes that an input was cut by a cap of limits.go; Decide
	// reports it as Decision.Capped.
	capped bool
	// jwt is jwt()'s buffer for a decoded payload, kept across decisions.
	jwt []byte
	// m is replace()'s matcher, kept across decisions; its step count is
	// reset with capped.
	m matcher
	// work is the bytes this decision's expressions have read (MaxEvalWork).
	work int
}

// header returns the first value of the named header, or "". name must be
// lower-case; stored names are compared case-insensitively.
func (r *Request) header(name string) string {
	for _, h := range r.Headers {
		if len(h[0]) == len(name) && strings.EqualFold(h[0], name) {
			return h[1]
		}
	}
	return ""
}

// callIDHeaders are the headers that carry the SIP Call-ID, in the order
// they are read: call-id, else its compact form i (RFC 3261, 20.8).
var callIDHeaders = [...]string{"call-id", "i"}

// callID returns the SIP Call-ID: the call-id header, else its compact form i.
func (r *Request) callID() string {
	for _, name := range callIDHeaders {
		if id := r.header(name); id != "" {
			return id
		}
	}
	return ""
}

// clientAddr returns the client's IP and port. With trustedHops > 0
// (trustedForwardedHops) the IP is read from x-forwarded-for (all copies, in
// order, read right to left) and the port is 0; a missing or malformed entry
// gives ok == false, never Source: falling back to the connection address
// would let a proxy chain silently collapse every client onto one key.
func (r *Request) clientAddr(trustedHops int) (ip netip.Addr, port uint16, ok bool) {
	if trustedHops <= 0 {
		return parseAddrPort(r.Source)
	}
	hop := trustedHops
	for i := len(r.Headers) - 1; i >= 0; i-- {
		h := r.Headers[i]
		if !strings.EqualFold(h[0], "x-forwarded-for") {
			continue
		}
		v := h[1]
		for v != "" {
			j := strings.LastIndexByte(v, ',')
			item := strings.TrimSpace(v[j+1:])
			if j < 0 {
				v = ""
			} else {
				v = v[:j]
			}
			hop--
			if hop == 0 {
				return parseAddr(item)
			}
		}
	}
	return netip.Addr{}, 0, false
}

// serverAddr returns the IP and port the request was received on.
func (r *Request) serverAddr() (ip netip.Addr, port uint16, ok bool) {
	return parseAddrPort(r.Dest)
}

// host returns the request's domain: the host of an absolute request target if
// it has one, else Authority (or the host header), without port, as received
// (not lower-cased). ok is false when neither carries a host.
func (r *Request) host() (host string, ok bool) {
	if rest, found := cutScheme(r.Target); found {
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		auth := rest[:end]
		if at := strings.LastIndexByte(auth, '@'); at >= 0 {
			auth = auth[at+1:]
		}
		if h := stripPort(auth); h != "" {
			return h, true
		}
	}
	a := r.Authority
	if a == "" {
		a = r.header("host")
	}
	h := stripPort(a)
	return h, h != ""
}

// url returns the request target as received: path and query. An absolute
// target is returned whole, as Citrix hashes the URL it received.
func (r *Request) url() string { return r.Target }

// path returns the request path without the query string; for an absolute
// target, the path part only ("/" when empty).
func (r *Request) path() string {
	t := r.Target
	if rest, found := cutScheme(t); found {
		i := strings.IndexAny(rest, "/?#")
		if i < 0 {
			return "/"
		}
		t = rest[i:]
		if t[0] != '/' {
			return "/"
		}
	}
	if i := strings.IndexAny(t, "?#"); i >= 0 {
		t = t[:i]
	}
	return t
}

// query returns the raw query string (without '?'), or "".
func (r *Request) query() string {
	t := r.Target
	i := strings.IndexByte(t, '?')
	if i < 0 {
		return ""
	}
	t = t[i+1:]
	if j := strings.IndexByte(t, '#'); j >= 0 {
		t = t[:j]
	}
	return t
}

// cutScheme reports whether t is an absolute URL ("scheme://...") and returns
// what follows "://".
func cutScheme(t string) (string, bool) {
	i := strings.Index(t, "://")
	if i <= 0 || strings.IndexByte(t[:i], '/') >= 0 || strings.IndexByte(t[:i], '?') >= 0 {
		return "", false
	}
	return t[i+3:], true
}

// stripPort removes a trailing ":port" and IPv6 brackets from a host.
func stripPort(h string) string {
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i > 0 {
			return h[1:i]
		}
		return ""
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.IndexByte(h[:i], ':') < 0 {
		return h[:i]
	}
	return h
}

// parseAddrPort parses "ip:port", "[v6]:port" or a bare IP (port 0). IPv4-mapped
// IPv6 addresses are unmapped so that one client has one key.
func parseAddrPort(s string) (netip.Addr, uint16, bool) {
	if b, port, ok := parseIPv4Port(s); ok {
		return netip.AddrFrom4(b), port, true
	}
	// netip's errors are allocated, garbage for every malformed address a
	// client sends; these parsers give netip's answers and allocate nothing
	// (FuzzParseAddrPortNoAlloc). A zone is dropped: it names an interface
	// of the proxy, not the client (Envoy's addresses never carry one).
	return parseAddrPortNoAlloc(s)
}

// parseAddr is netip.ParseAddr, unmapped and without its zone, allocating
// nothing.
func parseAddr(s string) (netip.Addr, uint16, bool) {
	s, ok := dropZone(s)
	if !ok {
		return netip.Addr{}, 0, false
	}
	if a, ok := parseIPBytes(stringBytes(s)); ok {
		return a, 0, true
	}
	return netip.Addr{}, 0, false
}

// dropZone removes an IPv6 zone ("%eth0") from an address, refusing what
// netip refuses: an empty zone, or one on an IPv4 address.
func dropZone(s string) (string, bool) {
	i := strings.IndexByte(s, '%')
	if i < 0 {
		return s, true
	}
	if i == len(s)-1 || strings.IndexByte(s[:i], ':') < 0 {
		return "", false
	}
	return s[:i], true
}

// parseAddrPortNoAlloc is netip.ParseAddrPort, else netip.ParseAddr with
// port 0; unmapped, without the zone.
func parseAddrPortNoAlloc(s string) (netip.Addr, uint16, bool) {
	if len(s) > 0 && s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 || len(s) < end+3 || s[end+1] != ':' || strings.IndexByte(s[1:end], ':') < 0 {
			return netip.Addr{}, 0, false
		}
		port, ok := parsePort(s[end+2:])
		host, okz := dropZone(s[1:end])
		ip, ok6 := parseIPv6Bytes(stringBytes(host))
		if !ok || !okz || !ok6 {
			return netip.Addr{}, 0, false
		}
		return netip.AddrFrom16(ip).Unmap(), port, true
	}
	if i := strings.LastIndexByte(s, ':'); i >= 0 && strings.IndexByte(s[:i], ':') < 0 {
		port, ok := parsePort(s[i+1:])
		ip, ok4 := parseIPv4Bytes(stringBytes(s[:i]))
		if ok && ok4 {
			return netip.AddrFrom4(ip), port, true
		}
	}
	return parseAddr(s)
}

// parsePort is a port as netip reads it: decimal digits, leading zeros
// allowed, at most 65535.
func parsePort(s string) (uint16, bool) {
	if s == "" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		if n = n*10 + int(s[i]-'0'); n > 65535 {
			return 0, false
		}
	}
	return uint16(n), true
}

// stringBytes is s as bytes without a copy; they must not be written.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// parseIPv4Port is parseAddrPort's short path for what proxies pass almost
// always, a dotted quad with or without ":port": a few comparisons instead of
// netip's general parser, whose calls weigh in Go's Wasm code
// (RATIONALE.md, "Cost per request"). It accepts only what netip.ParseAddrPort or netip.ParseAddr
// accepts as a plain IPv4 address, with the same result (FuzzParseIPv4Port):
// four decimal parts of at most 255 without leading zeros, then optionally a
// colon and a decimal port of at most 65535 (leading zeros allowed, as
// strconv reads them). ok is false for anything else, which takes netip's way.
func parseIPv4Port(s string) (ip [4]byte, port uint16, ok bool) {
	i := 0
	for part := 0; part < 4; part++ {
		if part > 0 {
			if i >= len(s) || s[i] != '.' {
				return ip, 0, false
			}
			i++
		}
		start, v := i, 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' && i-start < 3 {
			v = v*10 + int(s[i]-'0')
			i++
		}
		if i == start || v > 255 || s[start] == '0' && i-start > 1 {
			return ip, 0, false
		}
		ip[part] = byte(v)
	}
	if i == len(s) {
		return ip, 0, true
	}
	if s[i] != ':' || i+1 == len(s) {
		return ip, 0, false
	}
	n := 0
	for _, c := range []byte(s[i+1:]) {
		if c < '0' || c > '9' {
			return ip, 0, false
		}
		if n = n*10 + int(c-'0'); n > 65535 {
			return ip, 0, false
		}
	}
	return ip, uint16(n), true
}
