package lbcore

import (
	"bytes"
	"encoding/base64"
	"net/netip"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/tidwall/gjson"
)

func (pl *exprPipeline) appendEval(dst []byte, r *Request, x *evalCtx) []byte {
	start := len(dst)
	if x.work > MaxEvalWork {
		x.capped = true
		return dst
	}
	dst = pl.v.appendValue(dst, r, x)
	if len(dst)-start > MaxValueBytes {
		dst = dst[:start+MaxValueBytes]
		x.capped = true
	}
	x.work += len(dst) - start
	for i := range pl.fns {
		n := len(dst) - start
		if pl.fns[i].kind == fnJWT {
			n *= 3
		}
		if x.work += n; x.work > MaxEvalWork {
			x.capped = true
			return dst[:start]
		}
		dst = pl.fns[i].apply(dst, start, x)
	}
	return dst
}

// appendValueCapped appends v cut to its first MaxValueBytes bytes (recording
// the cut in x). The cut comes before the copy: the buffer a decision
// appends into is kept for the next one (Balancer.buf, Balancer.pkey), and
// a copy of the whole value would grow it to the largest value a client
// ever sent, up to what the host can hand the module (1 MiB), for the
// worker's life.
func appendValueCapped(dst []byte, v string, x *evalCtx) []byte {
	if len(v) > MaxValueBytes {
		v = v[:MaxValueBytes]
		x.capped = true
	}
	return append(dst, v...)
}

func (v *exprVar) appendValue(dst []byte, r *Request, x *evalCtx) []byte {
	switch v.kind {
	case varClientIP, varClientPort, varServerIP, varServerPort:
		if v.kind == varClientIP && x.hops <= 0 {
			if txt, ok := ipv4Text(r.Source); ok {
				return append(dst, txt...) // what the general path below writes, without formatting it again
			}
		}
		var ip netip.Addr
		var port uint16
		var ok bool
		if v.kind == varClientIP || v.kind == varClientPort {
			ip, port, ok = r.clientAddr(x.hops)
		} else {
			ip, port, ok = r.serverAddr()
		}
		switch {
		case !ok:
		case v.kind == varClientIP || v.kind == varServerIP:
			dst = ip.AppendTo(dst)
		case port != 0: // 0 means unknown, e.g. a client read from x-forwarded-for
			dst = strconv.AppendUint(dst, uint64(port), 10)
		}
		return dst
	case varHost:
		h, _ := r.host()
		return appendValueCapped(dst, h, x)
	case varPath:
		return appendValueCapped(dst, r.path(), x)
	case varURL:
		return appendValueCapped(dst, r.url(), x)
	case varMethod:
		return appendValueCapped(dst, r.Method, x)
	case varHeader:
		return appendValueCapped(dst, r.header(v.name), x)
	case varCookie:
		c, _, read := cookieValue(r, v.name, x)
		x.work += read
		return appendValueCapped(dst, c, x)
	case varQuery:
		q := r.query()
		if len(q) > MaxScanBytes {
			q = q[:MaxScanBytes]
			x.capped = true
		}
		x.work += len(q)
		return appendValueCapped(dst, exprQuery(q, v.name), x)
	case varCallID:
		return appendValueCapped(dst, r.callID(), x)
	}
	return dst
}

// ipv4Text returns the IPv4 address of an "ip:port" (or bare "ip") source
// address as text, when parseAddrPort would read an IPv4 address from it
// (parseIPv4Port): without leading zeros or out-of-range parts, a dotted quad
// is already in the canonical form netip.Addr.AppendTo writes. ok is false
// for anything else (IPv6, an IPv4-mapped address, a bad port), which takes
// the general path.
func ipv4Text(s string) (string, bool) {
	// One pass, as parseIPv4Port reads (TestIPv4TextMatchesParse): each
	// part's at most three digits unrolled, since a loop's back edge is a
	// jump through the function's dispatch in Go's Wasm code.
	i := 0
	for part := 0; part < 4; part++ {
		if part > 0 {
			if i >= len(s) || s[i] != '.' {
				return "", false
			}
			i++
		}
		if i >= len(s) || s[i]-'0' > 9 {
			return "", false
		}
		v := int(s[i] - '0')
		i++
		if i < len(s) && s[i]-'0' <= 9 {
			if v == 0 {
				return "", false // a leading zero
			}
			v = v*10 + int(s[i]-'0')
			i++
			if i < len(s) && s[i]-'0' <= 9 {
				v = v*10 + int(s[i]-'0')
				i++
			}
		}
		if v > 255 {
			return "", false
		}
	}
	if i == len(s) {
		return s, true
	}
	if s[i] != ':' || i+1 == len(s) {
		return "", false
	}
	n := 0
	for _, c := range []byte(s[i+1:]) {
		if c < '0' || c > '9' {
			return "", false
		}
		if n = n*10 + int(c-'0'); n > 65535 {
			return "", false
		}
	}
	return s[:i], true
}

// cookieValue returns the value of the first cookie called name in any
// cookie header ("a=1; b=2"), trimmed of spaces but otherwise as received,
// and whether there is one: ${request.cookie.NAME} and the session's cookie.
// It searches the first MaxScanBytes bytes of cookie headers (x.capped when
// there are more) and returns how many bytes it read.
func cookieValue(r *Request, name string, x *evalCtx) (v string, found bool, read int) {
	budget := MaxScanBytes
	for _, h := range r.Headers {
		if len(h[0]) != len("cookie") || !strings.EqualFold(h[0], "cookie") {
			continue
		}
		rest := h[1]
		if len(rest) > budget {
			rest = rest[:budget]
			x.capped = true
		}
		budget -= len(rest)
		for rest != "" {
			var pair string
			pair, rest, _ = strings.Cut(rest, ";")
			k, val, ok := strings.Cut(pair, "=")
			if ok && strings.TrimSpace(k) == name {
				return strings.TrimSpace(val), true, MaxScanBytes - budget
			}
		}
		if budget == 0 {
			break
		}
	}
	return "", false, MaxScanBytes - budget
}

// exprQuery returns the raw value of the first name=value pair in query.
// Neither name nor value is percent-decoded: decoding would allocate, and the
// raw bytes are as good a key as the decoded ones.
func exprQuery(query, name string) string {
	for query != "" {
		var pair string
		pair, query, _ = strings.Cut(query, "&")
		if k, v, ok := strings.Cut(pair, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// apply transforms the value dst[start:] in place and returns dst. A cap it
// hits is noted in x.
func (f *exprFunc) apply(dst []byte, start int, x *evalCtx) []byte {
	v := dst[start:]
	if len(v) == 0 {
		if f.kind == fnDefault {
			return append(dst, f.s...)
		}
		return dst
	}
	switch f.kind {
	case fnLower:
		for i, c := range v {
			if 'A' <= c && c <= 'Z' {
				v[i] = c + 'a' - 'A'
			}
		}
	case fnUpper:
		for i, c := range v {
			if 'a' <= c && c <= 'z' {
				v[i] = c - ('a' - 'A')
			}
		}
	case fnHash:
		dst = appendHashHex(dst[:start], xxhash.Sum64(v))
	case fnPrefix:
		if len(v) > f.n {
			dst = dst[:start+f.n]
		}
	case fnSuffix:
		if len(v) > f.n {
			copy(v, v[len(v)-f.n:])
			dst = dst[:start+f.n]
		}
	case fnMask:
		// Parse before writing: the result overwrites the value.
		ip, ok := ipFromBytes(v)
		dst = dst[:start]
		if ok {
			bits := f.n
			if ip.Is4() && bits > 32 {
				bits = 32
			}
			p, _ := ip.Prefix(bits)
			dst = p.Addr().AppendTo(dst)
		}
	case fnJWT:
		var capped bool
		dst, capped = appendJWTClaim(dst, start, f, &x.jwt)
		x.capped = x.capped || capped
	case fnReplace:
		in := v[:min(len(v), MaxReplaceInput)]
		out, capped := x.m.replaceAll(f.rp, bytesString(in), f.repl)
		x.capped = x.capped || capped || len(v) > MaxReplaceInput
		dst = append(dst[:start], out...)
	case fnBefore, fnAfter, fnSubstr:
		dst = dst[:start+f.cutText(v)]
	}
	return dst
}

// appendJWTClaim replaces the JWT in dst[start:] (optionally after
// "Bearer ") by the claim at f's path in its payload, and returns dst. The
// signature is not verified. Anything malformed gives "", and so does a
// token longer than MaxJWTBytes or a payload nested deeper than
// MaxJSONDepth (capped is then true).
//
// The decoded payload goes to *scratch, sized once for the longest token
// and kept for the next call.
func appendJWTClaim(dst []byte, start int, f *exprFunc, scratch *[]byte) (_ []byte, capped bool) {
	v := dst[start:]
	dst = dst[:start] // the claim is appended from *scratch, never from v
	if len(v) >= 7 && bytes.EqualFold(v[:7], []byte("bearer ")) {
		v = v[7:]
	}
	v = bytes.TrimSpace(v)
	if len(v) > MaxJWTBytes {
		return dst, true
	}
	if bytes.Count(v, []byte(".")) != 2 {
		return dst, false
	}
	payload := v[bytes.IndexByte(v, '.')+1:]
	payload = payload[:bytes.IndexByte(payload, '.')]
	payload = bytes.TrimRight(payload, "=")
	if len(*scratch) < base64.RawURLEncoding.DecodedLen(MaxJWTBytes) {
		*scratch = make([]byte, base64.RawURLEncoding.DecodedLen(MaxJWTBytes))
	}
	buf := *scratch
	// Refused before decoding: the decoder's error is allocated (garbage
	// per malformed token). A header value holds no CR or LF, which the
	// decoder would skip.
	if len(payload)%4 == 1 || !isBase64URL(payload) {
		return dst, false
	}
	n, err := base64.RawURLEncoding.Decode(buf, payload)
	if err != nil {
		return dst, false
	}
	// gjson recurses once per nesting level, in validation and in lookup: a
	// 13 KiB header of nested arrays overflowed V8's stack and trapped.
	if !JSONDepthOK(buf[:n], MaxJSONDepth) {
		return dst, true
	}
	if !gjson.ValidBytes(buf[:n]) {
		return dst, false
	}
	doc := bytesString(buf[:n])
	if i := skipJSONSpace(doc, 0); i == len(doc) || doc[i] != '{' {
		return dst, false // a JWT's claims are an object (RFC 7519, section 7.2)
	}
	if f.path != nil {
		return appendJSONPath(dst, doc, f.path), false
	}
	return append(dst, gjson.Get(doc, f.s).String()...), false
}

// isBase64URL reports whether every byte of b is in base64url's alphabet.
func isBase64URL(b []byte) bool {
	for _, c := range b {
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ipFromBytes parses "ip", "ip:port" or "[v6]:port" (a zone is dropped) as
// parseAddrPort does, but from bytes and without allocating: mask runs on
// the hot path, and netip.ParseAddr would need a string copy of v.
func ipFromBytes(v []byte) (netip.Addr, bool) {
	host := v
	if len(v) > 0 && v[0] == '[' {
		end := bytes.IndexByte(v, ']')
		if end < 0 || !isPortSuffix(v[end+1:], true) {
			return netip.Addr{}, false
		}
		host = v[1:end]
		if bytes.IndexByte(host, ':') < 0 {
			return netip.Addr{}, false // "[1.2.3.4]" is not an address
		}
	} else if c := bytes.IndexByte(v, ':'); c >= 0 && bytes.IndexByte(v[c+1:], ':') < 0 {
		if !isPortSuffix(v[c:], false) {
			return netip.Addr{}, false
		}
		host = v[:c]
	}
	if z := bytes.IndexByte(host, '%'); z >= 0 && bytes.IndexByte(host, ':') >= 0 {
		host = host[:z]
	}
	return parseIPBytes(host)
}

// parseIPBytes parses an IPv4 or IPv6 address without zone, as netip.ParseAddr
// does (FuzzExpr checks that they agree), and unmaps IPv4-mapped addresses.
func parseIPBytes(b []byte) (netip.Addr, bool) {
	if bytes.IndexByte(b, ':') < 0 {
		ip, ok := parseIPv4Bytes(b)
		return netip.AddrFrom4(ip), ok
	}
	ip, ok := parseIPv6Bytes(b)
	return netip.AddrFrom16(ip).Unmap(), ok
}

// isPortSuffix reports whether s is ":port" (or "" when optional).
func isPortSuffix(s []byte, optional bool) bool {
	if len(s) == 0 {
		return optional
	}
	if s[0] != ':' || len(s) < 2 || len(s) > 6 {
		return false
	}
	n := 0
	for _, c := range s[1:] {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}

// parseIPv4Bytes parses dotted-quad IPv4 with netip's rules (no leading zeros).
func parseIPv4Bytes(b []byte) (ip [4]byte, ok bool) {
	field, val, digits := 0, 0, 0
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == '.' {
			if digits == 0 || field == 4 {
				return ip, false
			}
			ip[field] = byte(val)
			field, val, digits = field+1, 0, 0
			continue
		}
		c := b[i]
		if c < '0' || c > '9' || digits > 0 && val == 0 {
			return ip, false
		}
		val, digits = val*10+int(c-'0'), digits+1
		if val > 255 {
			return ip, false
		}
	}
	return ip, field == 4
}

// parseIPv6Bytes parses an IPv6 address without zone, with netip's rules: groups
// of 1–4 hex digits, at most one "::" standing for at least one zero group,
// and an optional trailing dotted IPv4 counting as two groups.
func parseIPv6Bytes(b []byte) (ip [16]byte, ok bool) {
	var head, tail [8]uint16
	var nh, nt int
	if i := bytes.Index(b, []byte("::")); i >= 0 {
		if nh, ok = parseV6Groups(b[:i], &head, false); !ok {
			return ip, false
		}
		if nt, ok = parseV6Groups(b[i+2:], &tail, true); !ok || nh+nt > 7 {
			return ip, false
		}
	} else if nh, ok = parseV6Groups(b, &head, true); !ok || nh != 8 {
		return ip, false
	}
	for k := 0; k < nh; k++ {
		ip[2*k], ip[2*k+1] = byte(head[k]>>8), byte(head[k])
	}
	for k := 0; k < nt; k++ {
		at := 2 * (8 - nt + k)
		ip[at], ip[at+1] = byte(tail[k]>>8), byte(tail[k])
	}
	return ip, true
}

// parseV6Groups parses "" or "h:h:...:h" into g and returns the group count;
// with v4 the last field may be a dotted IPv4 address (two groups).
func parseV6Groups(b []byte, g *[8]uint16, v4 bool) (n int, ok bool) {
	if len(b) == 0 {
		return 0, true
	}
	for {
		field, rest, more := bytes.Cut(b, []byte(":"))
		if !more && v4 && bytes.IndexByte(field, '.') >= 0 {
			q, ok := parseIPv4Bytes(field)
			if !ok || n > 6 {
				return 0, false
			}
			g[n], g[n+1] = uint16(q[0])<<8|uint16(q[1]), uint16(q[2])<<8|uint16(q[3])
			return n + 2, true
		}
		if n == 8 || len(field) == 0 || len(field) > 4 {
			return 0, false
		}
		var val uint16
		for _, c := range field {
			d, ok := hexDigit(c)
			if !ok {
				return 0, false
			}
			val = val<<4 | uint16(d)
		}
		g[n] = val
		n++
		if !more {
			return n, true
		}
		b = rest
	}
}
