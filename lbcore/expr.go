package lbcore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Expr is a parsed key expression (docs/config.md, "Key expressions"): literal text and ${ choice }
// parts, evaluated against a Request. It is immutable once parsed and safe
// for concurrent use.
//
// The language:
//
//	expr     := (literal | "${" choice "}")+
//	choice   := pipeline ("||" pipeline)*      first non-empty pipeline wins
//	pipeline := variable ("|" function)*
//	function := name [ "(" [arg ("," arg)*] ")" ]
//	arg      := "string" | integer
//
// Whitespace is allowed anywhere inside ${ }. Strings are double-quoted; \"
// and \\ are escapes and a backslash before any other byte is kept as is, so
// regexp escapes such as \d need no doubling. Integers are decimal. There is
// no escape for a literal "${" in the text.
//
// Variables: client.ip, client.port, server.ip, server.port, request.host
// (as received, with port removed), request.path (without query),
// request.url (path and query as received), request.method,
// request.header.NAME (case-insensitive, first copy), request.cookie.NAME
// (exact name, all cookie headers), request.query.NAME (raw value of the
// first NAME=value pair, not percent-decoded), sip.callid (Call-ID header,
// else its compact form i). A port of 0 (unknown) reads as "".
//
// Functions, each mapping "" to "" except default:
//   - lower, upper: ASCII case mapping.
//   - hash: 16 lower-case hex digits of xxhash64.
//   - prefix(n), suffix(n): the first or last n bytes, n in [1, 1048576].
//   - mask(bits): the value read as an IP, "ip:port" or "[v6]:port", keeping
//     bits (0–128) of the address; an IPv4 address keeps at most 32. The
//     result is the masked address without port; not an IP gives "".
//   - jwt("path"): the value is a JWT, optionally after "Bearer "; the
//     payload is base64url-decoded and the claim at the gjson path read as a
//     string. The signature is NOT verified: a client can put any claim in
//     it, so use it to spread load, never to authorise.
//   - replace("re2", "repl"): regexp.ReplaceAllString with $1 expansion; the
//     regexp is compiled when the expression is parsed, to at most
//     MaxReplaceInsts instructions.
//   - default("text"): text if the value is empty.
//
// Evaluation never fails: a missing or malformed input yields "" for its
// pipeline.
//
// Exported as the type of Config.Token and of ParseExpr's result.
type Expr struct {
	src   string
	parts []exprPart
}

// exprPart is literal text (alts == nil) or one ${ choice }.
type exprPart struct {
	lit  string
	alts []exprPipeline
}

type exprPipeline struct {
	v   exprVar
	fns []exprFunc
}

type exprVarKind uint8

const (
	varClientIP exprVarKind = iota
	varClientPort
	varServerIP
	varServerPort
	varHost
	varPath
	varURL
	varMethod
	varHeader
	varCookie
	varQuery
	varCallID
)

type exprVar struct {
	kind exprVarKind
	name string // header (lower-case), cookie or query parameter name
}

type exprFuncKind uint8

const (
	fnLower exprFuncKind = iota
	fnUpper
	fnHash
	fnPrefix
	fnSuffix
	fnMask
	fnJWT
	fnReplace
	fnDefault
	fnBefore
	fnAfter
	fnSubstr
)

type exprFunc struct {
	kind exprFuncKind
	n    int          // prefix, suffix, mask; substr's start
	m    int          // substr's length
	sep  []byte       // before, after
	s    string       // jwt path, default text
	path []string     // jwt path as plain keys (simplePath), or nil
	rp   *replaceProg // replace
	repl string       // replace
}

// maxAffix bounds prefix(n) and suffix(n); a larger n would be a typo.
const maxAffix = 1 << 20

// ParseExpr parses a key expression. Errors read "col N: problem", N being the
// 1-based byte column in src; the caller prefixes the JSON path.
//
// An expression with no ${...} part is rejected: a constant key would pin all
// traffic to one service, which is never what an operator means.
func ParseExpr(src string) (*Expr, error) {
	if src == "" {
		return nil, errors.New("col 1: empty expression")
	}
	if len(src) > MaxExprBytes {
		return nil, fmt.Errorf("col 1: expression is %d bytes, more than the limit of %d (MaxExprBytes)", len(src), MaxExprBytes)
	}
	p := exprParser{src: src}
	e := &Expr{src: src}
	for p.pos < len(src) {
		i := strings.Index(src[p.pos:], "${")
		if i < 0 {
			e.parts = append(e.parts, exprPart{lit: src[p.pos:]})
			break
		}
		if i > 0 {
			e.parts = append(e.parts, exprPart{lit: src[p.pos : p.pos+i]})
		}
		p.open = p.pos + i
		p.pos = p.open + 2
		alts, err := p.choice()
		if err != nil {
			return nil, err
		}
		e.parts = append(e.parts, exprPart{alts: alts})
	}
	for _, pt := range e.parts {
		if pt.alts != nil {
			return e, nil
		}
	}
	return nil, errors.New("col 1: expression has no ${...} part")
}

// String returns the expression's source text.
func (e *Expr) String() string {
	if e == nil {
		return ""
	}
	return e.src
}

// appendFresh appends the expression's value for r to dst and returns the
// extended slice. It never fails and never panics: a missing or malformed
// input yields "" for its pipeline. Each pipeline is evaluated in place at the
// end of dst, so an expression allocates nothing when dst has room (jwt and
// replace use buffers of the evaluation context: appendFresh's own is new
// each call, a Balancer's is kept). client.ip and client.port are the connection's peer,
// as with trustedForwardedHops 0; a Balancer evaluates with its
// configuration's hops.
func (e *Expr) appendFresh(dst []byte, r *Request) []byte {
	var x evalCtx
	return e.appendEval(dst, r, &x)
}

// Eval returns the expression's value for r; see appendFresh.
func (e *Expr) Eval(r *Request) string {
	var buf [128]byte
	return string(e.appendFresh(buf[:0], r))
}

// clientIPOnly reports whether e is ${client.ip} and nothing else: no
// literal, alternative or function.
func (e *Expr) clientIPOnly() bool {
	return e != nil && len(e.parts) == 1 && e.parts[0].lit == "" && len(e.parts[0].alts) == 1 &&
		e.parts[0].alts[0].v.kind == varClientIP && len(e.parts[0].alts[0].fns) == 0
}

// appendEval is appendFresh within a decision: x gives the trusted hops and
// records the caps hit. r is only read.
func (e *Expr) appendEval(dst []byte, r *Request, x *evalCtx) []byte {
	if e == nil {
		return dst
	}
	if r == nil {
		r = &Request{}
	}
	for i := range e.parts {
		pt := &e.parts[i]
		if pt.alts == nil {
			dst = append(dst, pt.lit...)
			continue
		}
		start := len(dst)
		for j := range pt.alts {
			// An alternative writes at start; a later one overwrites it.
			if dst = pt.alts[j].appendEval(dst[:start], r, x); len(dst) > start {
				break
			}
		}
	}
	return dst
}

var (
	varNames = [...]string{varClientIP: "client.ip", varClientPort: "client.port", varServerIP: "server.ip",
		varServerPort: "server.port", varHost: "request.host", varPath: "request.path", varURL: "request.url",
		varMethod: "request.method", varHeader: "request.header.", varCookie: "request.cookie.",
		varQuery: "request.query.", varCallID: "sip.callid"}
	funcNames = [...]string{fnLower: "lower", fnUpper: "upper", fnHash: "hash", fnPrefix: "prefix",
		fnSuffix: "suffix", fnMask: "mask", fnJWT: "jwt", fnReplace: "replace", fnDefault: "default",
		fnBefore: "before", fnAfter: "after", fnSubstr: "substr"}
)

// canonical returns the expression as parsed: literal text exactly, and each
// ${ } part without its optional whitespace, header names lower-cased and
// arguments re-quoted. Two expressions with one canonical form always
// evaluate alike; the duplicate-key check compares it, not the source text,
// in which spaces inside literals and string arguments matter.
func (e *Expr) canonical() string {
	var b strings.Builder
	for _, pt := range e.parts {
		if pt.alts == nil {
			b.WriteString(pt.lit)
			continue
		}
		b.WriteString("${")
		for i, pl := range pt.alts {
			if i > 0 {
				b.WriteString("||")
			}
			b.WriteString(varNames[pl.v.kind])
			b.WriteString(pl.v.name)
			for _, f := range pl.fns {
				b.WriteByte('|')
				b.WriteString(funcNames[f.kind])
				switch f.kind {
				case fnPrefix, fnSuffix, fnMask:
					b.WriteString("(" + strconv.Itoa(f.n) + ")")
				case fnJWT, fnDefault, fnBefore, fnAfter:
					b.WriteString("(" + strconv.Quote(f.s) + ")")
				case fnSubstr:
					b.WriteString("(" + strconv.Itoa(f.n) + "," + strconv.Itoa(f.m) + ")")
				case fnReplace:
					b.WriteString("(" + strconv.Quote(f.rp.re.String()) + "," + strconv.Quote(f.repl) + ")")
				}
			}
		}
		b.WriteString("}")
	}
	return b.String()
}
