package lbcore

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// exprTestJWT builds an unsigned-looking JWT around payload; pad selects padded
// base64url for the payload segment.
func exprTestJWT(payload string, pad bool) string {
	enc := base64.RawURLEncoding
	if pad {
		enc = base64.URLEncoding
	}
	return base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." +
		enc.EncodeToString([]byte(payload)) + ".c2ln"
}

const exprTestClaims = `{"sub":"u-1","user":{"id":"U42"},"n":12345,"f":1.5,"ok":true}`

func exprTestRequest() *Request {
	return &Request{
		Target:    "/api/v2/users/42?id=7&x=a%20b&id=9&flag&e=",
		Authority: "Shop.Example.COM:8443",
		Method:    "POST",
		Source:    "10.1.2.3:5555",
		Dest:      "[2001:db8:1:2:3:4:5:6]:443",
		Headers: [][2]string{
			{"x-user", "AliceSmith-1234"},
			{"x-tenant", "acme"},
			{"cookie", "theme=dark; sid=abc123"},
			{"cookie", "lang=en;sid=second; empty= ; Sid=upper"},
			{"authorization", "Bearer " + exprTestJWT(exprTestClaims, false)},
			{"x-jwt-padded", exprTestJWT(exprTestClaims+" ", true)},
			{"call-id", "a84b4c76e66710@pc33.atlanta.com"},
			{"x-real-ip", "192.168.77.9"},
			{"x-v6", "2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff"},
			{"x-v6-port", "[2001:db8:aaaa:bbbb::1%eth0]:8080"},
			{"x-forwarded-for", "203.0.113.7, 198.51.100.2"},
		},
	}
}

// with returns the test request changed by f.
func exprReqWith(f func(r *Request)) *Request {
	r := exprTestRequest()
	f(r)
	return r
}

func exprReqWithHeader(name, value string) *Request {
	return exprReqWith(func(r *Request) { r.Headers = append(r.Headers, [2]string{name, value}) })
}

func TestExprEval(t *testing.T) {
	tests := []struct {
		name string
		src  string
		req  *Request // nil: exprTestRequest()
		hops int      // trustedForwardedHops of the Balancer evaluating it
		want string
	}{
		// Variables.
		{name: "client.ip", src: "${client.ip}", want: "10.1.2.3"},
		{name: "client.port", src: "${client.port}", want: "5555"},
		{name: "server.ip", src: "${server.ip}", want: "2001:db8:1:2:3:4:5:6"},
		{name: "server.port", src: "${server.port}", want: "443"},
		{name: "client.ip trusted hops 1", src: "${client.ip}", hops: 1, want: "198.51.100.2"},
		{name: "client.ip trusted hops 2", src: "${client.ip}", hops: 2, want: "203.0.113.7"},
		{name: "client.ip trusted hops too many", src: "${client.ip}", hops: 3, want: ""},
		{name: "client.port unknown behind proxies", src: "${client.port}", hops: 1, want: ""},
		{name: "client.ip v4-mapped", src: "${client.ip}", req: exprReqWith(func(r *Request) { r.Source = "[::ffff:10.9.8.7]:1" }), want: "10.9.8.7"},
		{name: "client.ip missing", src: "${client.ip}", req: exprReqWith(func(r *Request) { r.Source = "" }), want: ""},
		{name: "request.host as received", src: "${request.host}", want: "Shop.Example.COM"},
		{name: "request.host absolute target", src: "${request.host}", req: exprReqWith(func(r *Request) { r.Target = "http://Abs.example:81/p?q" }), want: "Abs.example"},
		{name: "request.path", src: "${request.path}", want: "/api/v2/users/42"},
		{name: "request.url", src: "${request.url}", want: "/api/v2/users/42?id=7&x=a%20b&id=9&flag&e="},
		{name: "request.method", src: "${request.method}", want: "POST"},
		{name: "request.header", src: "${request.header.x-user}", want: "AliceSmith-1234"},
		{name: "request.header any case", src: "${request.header.X-User}", want: "AliceSmith-1234"},
		{name: "request.header missing", src: "${request.header.x-none}", want: ""},
		{name: "cookie first header", src: "${request.cookie.theme}", want: "dark"},
		{name: "cookie first of two", src: "${request.cookie.sid}", want: "abc123"},
		{name: "cookie second header", src: "${request.cookie.lang}", want: "en"},
		{name: "cookie exact name", src: "${request.cookie.Sid}", want: "upper"},
		{name: "cookie empty value", src: "${request.cookie.empty}", want: ""},
		{name: "cookie missing", src: "${request.cookie.none}", want: ""},
		{name: "query first", src: "${request.query.id}", want: "7"},
		{name: "query raw", src: "${request.query.x}", want: "a%20b"},
		{name: "query without value", src: "${request.query.flag}", want: ""},
		{name: "query missing", src: "${request.query.zzz}", want: ""},
		{name: "query no query", src: "${request.query.id}", req: exprReqWith(func(r *Request) { r.Target = "/a" }), want: ""},
		{name: "sip.callid", src: "${sip.callid}", want: "a84b4c76e66710@pc33.atlanta.com"},
		{name: "sip.callid compact", src: "${sip.callid}", req: &Request{Headers: [][2]string{{"i", "f81d4fae@host"}}}, want: "f81d4fae@host"},

		// Functions.
		{name: "lower", src: "${request.host|lower}", want: "shop.example.com"},
		{name: "upper", src: "${request.header.x-user|upper}", want: "ALICESMITH-1234"},
		{name: "lower leaves non-ASCII", src: "${request.header.x-u|lower}", req: exprReqWithHeader("x-u", "ÄB"), want: "Äb"},
		{name: "hash", src: "${request.header.x-tenant|hash}", want: "bb189bfb846fec0c"},
		{name: "hash of empty is empty", src: "${request.header.none|hash}", want: ""},
		{name: "prefix", src: "${request.header.x-user|prefix(5)}", want: "Alice"},
		{name: "prefix longer than value", src: "${request.header.x-tenant|prefix(50)}", want: "acme"},
		{name: "suffix", src: "${request.header.x-user|suffix(4)}", want: "1234"},
		{name: "suffix longer than value", src: "${request.header.x-tenant|suffix(9)}", want: "acme"},
		{name: "lower then prefix", src: "${request.header.x-user|lower|prefix(8)}", want: "alicesmi"},
		{name: "mask v4 24", src: "${client.ip|mask(24)}", want: "10.1.2.0"},
		{name: "mask v4 0", src: "${client.ip|mask(0)}", want: "0.0.0.0"},
		{name: "mask v4 above 32 clamps", src: "${client.ip|mask(64)}", want: "10.1.2.3"},
		{name: "mask v4 ip:port", src: "${request.header.x-p|mask(16)}", req: exprReqWithHeader("x-p", "172.16.99.1:8080"), want: "172.16.0.0"},
		{name: "mask v4 header", src: "${request.header.x-real-ip|mask(20)}", want: "192.168.64.0"},
		{name: "mask v6 64", src: "${request.header.x-v6|mask(64)}", want: "2001:db8:aaaa:bbbb::"},
		{name: "mask v6 bracket port zone", src: "${request.header.x-v6-port|mask(48)}", want: "2001:db8:aaaa::"},
		{name: "mask v6 server", src: "${server.ip|mask(32)}", want: "2001:db8::"},
		{name: "mask garbage", src: "${request.header.x-user|mask(24)}", want: ""},
		{name: "mask bad port", src: "${request.header.x-p|mask(24)}", req: exprReqWithHeader("x-p", "1.2.3.4:99999"), want: ""},
		{name: "mask v6 brackets without port", src: "${request.header.x-p|mask(16)}", req: exprReqWithHeader("x-p", "[2001:db8::1]"), want: "2001::"},
		{name: "mask v4 in brackets", src: "${request.header.x-p|mask(16)}", req: exprReqWithHeader("x-p", "[1.2.3.4]:80"), want: ""},
		{name: "mask list is not an IP", src: "${request.header.x-forwarded-for|mask(24)}", want: ""},
		{name: "jwt bearer", src: `${request.header.authorization|jwt("sub")}`, want: "u-1"},
		{name: "jwt bearer any case", src: `${request.header.a|jwt("sub")}`, req: exprReqWithHeader("a", "bEaReR "+exprTestJWT(exprTestClaims, false)), want: "u-1"},
		{name: "jwt nested", src: `${request.header.authorization|jwt("user.id")}`, want: "U42"},
		{name: "jwt number", src: `${request.header.authorization|jwt("n")}`, want: "12345"},
		{name: "jwt float", src: `${request.header.authorization|jwt("f")}`, want: "1.5"},
		{name: "jwt bool", src: `${request.header.authorization|jwt("ok")}`, want: "true"},
		{name: "jwt object", src: `${request.header.authorization|jwt("user")}`, want: `{"id":"U42"}`},
		{name: "jwt missing claim", src: `${request.header.authorization|jwt("nope")}`, want: ""},
		{name: "jwt without bearer, padded", src: `${request.header.x-jwt-padded|jwt("user.id")}`, want: "U42"},
		{name: "jwt two segments", src: `${request.header.a|jwt("sub")}`, req: exprReqWithHeader("a", "eyJhIjoxfQ.eyJzdWIiOiJ4In0"), want: ""},
		{name: "jwt four segments", src: `${request.header.a|jwt("sub")}`, req: exprReqWithHeader("a", exprTestJWT(exprTestClaims, false)+".x"), want: ""},
		{name: "jwt bad base64", src: `${request.header.a|jwt("sub")}`, req: exprReqWithHeader("a", "x.!!!.y"), want: ""},
		{name: "jwt not JSON", src: `${request.header.a|jwt("sub")}`, req: exprReqWithHeader("a", exprTestJWT(`{"sub":"x"`, false)), want: ""},
		{name: "replace group", src: `${request.path|replace("^/api/v[0-9]+/([^/]+).*", "$1")}`, want: "users"},
		{name: "replace no match", src: `${request.path|replace("^/web/", "")}`, want: "/api/v2/users/42"},
		{name: "replace all", src: `${request.path|replace("\d", "#")}`, want: "/api/v#/users/##"},
		{name: "replace quoted", src: `${request.path|replace("/", "\"\\")}`, want: `"\api"\v2"\users"\42`},
		{name: "default used", src: `${request.header.none|default("anon")}`, want: "anon"},
		{name: "default unused", src: `${request.header.x-tenant|default("anon")}`, want: "acme"},
		{name: "default after failing mask", src: `${request.header.x-user|mask(8)|default("none")}`, want: "none"},

		// Choices and literals.
		{name: "or first", src: "${request.cookie.sid||client.ip}", want: "abc123"},
		{name: "or second", src: "${request.cookie.none||client.ip}", want: "10.1.2.3"},
		{name: "or third", src: "${request.header.a || request.header.b|lower || request.method}", want: "POST"},
		{name: "or all empty", src: "${request.header.a||request.cookie.b}", want: ""},
		{name: "or all empty keeps literal", src: "k-${request.header.a||request.cookie.b}-z", want: "k--z"},
		{name: "or skips empty after functions", src: "${request.header.x-user|mask(24)||request.header.x-tenant}", want: "acme"},
		{name: "literal around", src: "tenant-${request.header.x-tenant}", want: "tenant-acme"},
		{name: "several parts", src: "${request.method} ${request.host|lower}${request.path}!", want: "POST shop.example.com/api/v2/users/42!"},
		{name: "dollar and braces are literal", src: "$a}{${request.method}$", want: "$a}{POST$"},
		{name: "whitespace inside", src: "${ request.header.x-user | lower | prefix ( 3 ) || client.ip }", want: "ali"},
		{name: "nil request", src: "a${client.ip}b", req: nil, want: "ab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := ParseExpr(tt.src)
			if err != nil {
				t.Fatalf("ParseExpr(%q): %v", tt.src, err)
			}
			r := tt.req
			if r == nil && tt.name != "nil request" {
				r = exprTestRequest()
			}
			eval := e.appendFresh
			if tt.hops > 0 { // as a Balancer with trustedForwardedHops evaluates
				eval = func(dst []byte, r *Request) []byte { return e.appendEval(dst, r, &evalCtx{hops: tt.hops}) }
			} else if got := e.Eval(r); got != tt.want {
				t.Errorf("Eval(%q) = %q, want %q", tt.src, got, tt.want)
			}
			if got := string(eval(nil, r)); got != tt.want {
				t.Errorf("Eval(%q) = %q, want %q", tt.src, got, tt.want)
			}
			// appendFresh keeps what dst held and appends the same value.
			got := eval([]byte("prefix|"), r)
			if string(got) != "prefix|"+tt.want {
				t.Errorf("AppendEval(%q) = %q, want %q", tt.src, got, "prefix|"+tt.want)
			}
		})
	}
}

func TestExprHashGolden(t *testing.T) {
	// hash is xxhash64 as 16 lower-case, zero-padded hex digits.
	e, err := ParseExpr("${request.header.x|hash}")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"acme", "a", "\x00\xff", strings.Repeat("z", 1000)} {
		want := fmt.Sprintf("%016x", xxhash.Sum64String(v))
		r := &Request{Headers: [][2]string{{"x", v}}}
		if got := e.Eval(r); got != want {
			t.Errorf("Eval(hash %q) = %q, want %q", v, got, want)
		}
	}
}

func TestParseExprErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string
	}{
		{name: "empty", src: "", want: "col 1: empty expression"},
		{name: "constant", src: "fixed-key", want: "col 1: expression has no ${...} part"},
		{name: "unknown function", src: `${request.header.x|jtw("sub")}`, want: `col 20: unknown function "jtw"`},
		{name: "unknown variable", src: "a-${request.heder.x}", want: `col 5: unknown variable "request.heder.x"`},
		{name: "unknown variable in second choice", src: "${client.ip || clinet.ip}", want: `col 16: unknown variable "clinet.ip"`},
		{name: "empty header name", src: "${request.header.}", want: `col 3: request.header. needs a header name`},
		{name: "bad header name", src: "${request.header.a(b)}", want: `col 19: bad header name "a(b)"`},
		{name: "bad query name", src: "${request.query.a=b}", want: `col 18: bad query name "a=b"`},
		{name: "unterminated", src: "k-${client.ip", want: `col 3: unterminated "${"`},
		{name: "unterminated after bar", src: "${client.ip|", want: `col 1: unterminated "${"`},
		{name: "unterminated in args", src: "${client.ip|mask(24", want: `col 1: unterminated "${"`},
		{name: "unterminated second part", src: "${client.ip}${request.path", want: `col 13: unterminated "${"`},
		{name: "unterminated string", src: `${client.ip|default("x})}`, want: `col 21: unterminated string`},
		{name: "bad regexp", src: `${request.path|replace("(a", "")}`, want: "col 24: bad regexp: error parsing regexp: missing closing ): `(a`"},
		{name: "too few args", src: `${request.path|replace("a")}`, want: "col 16: replace takes 2 arguments, got 1"},
		{name: "too many args", src: `${request.path|prefix(1, 2)}`, want: "col 16: prefix takes 1 argument, got 2"},
		{name: "missing args", src: `${request.path|prefix}`, want: "col 16: prefix takes 1 argument, got 0"},
		{name: "args to lower", src: `${request.path|lower(1)}`, want: "col 16: lower takes no arguments, got 1"},
		{name: "string for integer", src: `${request.path|prefix("8")}`, want: "col 23: prefix argument 1 must be an integer"},
		{name: "integer for string", src: `${request.path|default(8)}`, want: "col 24: default argument 1 must be a string"},
		{name: "prefix 0", src: `${request.path|prefix(0)}`, want: "col 23: prefix 0 is out of range [1, 1048576]"},
		{name: "suffix negative", src: `${request.path|suffix(-3)}`, want: "col 23: suffix -3 is out of range [1, 1048576]"},
		{name: "mask 200", src: `${client.ip|mask(200)}`, want: "col 18: mask 200 is out of range [0, 128]"},
		{name: "mask 129", src: `${client.ip|mask(129)}`, want: "col 18: mask 129 is out of range [0, 128]"},
		{name: "integer too large", src: `${client.ip|mask(1234567890)}`, want: "col 18: integer too large"},
		{name: "bad argument", src: `${client.ip|mask(x)}`, want: `col 18: want a string or an integer argument, got "x"`},
		{name: "bad separator", src: `${client.ip|mask(8;)}`, want: `col 19: unexpected ";" in arguments, want "," or ")"`},
		{name: "jwt empty path", src: `${request.path|jwt("")}`, want: "col 20: jwt path is empty"},
		{name: "trailing bar", src: "${client.ip|}", want: `col 12: missing function after "|"`},
		{name: "trailing bar with space", src: "${client.ip | }", want: `col 13: missing function after "|"`},
		{name: "empty pipeline", src: "${}", want: "col 3: empty pipeline"},
		{name: "empty left of or", src: "${||client.ip}", want: "col 3: empty pipeline"},
		{name: "empty right of or", src: "${client.ip||}", want: "col 14: empty pipeline"},
		{name: "empty middle of or", src: "${client.ip|| ||request.path}", want: "col 15: empty pipeline"},
		{name: "junk after pipeline", src: "${client.ip lower}", want: `col 13: unexpected "l", want "|", "||" or "}"`},
		{name: "triple bar", src: "${client.ip|||lower}", want: "col 14: empty pipeline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := ParseExpr(tt.src)
			if err == nil {
				t.Fatalf("ParseExpr(%q) = %q, want error %q", tt.src, e, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("ParseExpr(%q) error = %q, want %q", tt.src, err, tt.want)
			}
		})
	}
}

func TestExprString(t *testing.T) {
	src := "t-${ request.header.x | lower || client.ip }"
	e, err := ParseExpr(src)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.String(); got != src {
		t.Errorf("String() = %q, want %q", got, src)
	}
}

func TestExprAllocs(t *testing.T) {
	r := exprTestRequest()
	r.Headers = append(r.Headers, [2]string{"x-p", "[2001:db8::7]:443"})
	for _, src := range []string{
		"${request.header.x-user|lower|prefix(8)}",
		"${client.ip|mask(24)}",
		"${request.header.x-p|mask(64)}",
		"${request.header.x-real-ip|mask(16)|hash}",
		"${request.cookie.sid||client.ip}",
		"${request.cookie.none||client.ip}",
		"${request.header.x-user|upper|suffix(4)}-${request.query.id}",
		`${request.header.none|default("anon")|hash}`,
		"${client.port}${server.ip}${server.port}${sip.callid}${request.host}${request.url}${request.path}${request.method}",
	} {
		e, err := ParseExpr(src)
		if err != nil {
			t.Fatalf("ParseExpr(%q): %v", src, err)
		}
		dst := make([]byte, 0, 512)
		if n := testing.AllocsPerRun(100, func() { dst = e.appendFresh(dst[:0], r) }); n != 0 {
			t.Errorf("AppendEval(%q) allocates %v times, want 0", src, n)
		}
	}
}

func TestExprParseIP(t *testing.T) {
	for _, s := range []string{
		"1.2.3.4", "0.0.0.0", "255.255.255.255", "256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5", "1..2.3",
		"::", "::1", "1::", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7",
		"::ffff:1.2.3.4", "1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:7:1.2.3.4", "::1.2.3.4", "1.2.3.4::",
		"12345::", "g::", ":1", "1:", ":::", "1:::2", "1::2::3", "FFFF::abcd", "", ".", ":",
	} {
		want, err := netip.ParseAddr(s)
		got, ok := parseIPBytes([]byte(s))
		if ok != (err == nil) || ok && got != want.Unmap() {
			t.Errorf("parseIPBytes(%q) = %v, %v; netip.ParseAddr says %v, %v", s, got, ok, want, err)
		}
	}
}

func BenchmarkExpr(b *testing.B) {
	r := exprTestRequest()
	for _, bm := range []struct{ name, src string }{
		{"client.ip", "${client.ip}"},
		{"mask", "${client.ip|mask(24)}"},
		{"lower-prefix", "${request.header.x-user|lower|prefix(8)}"},
		{"cookie-or-ip", "${request.cookie.sid||client.ip}"},
		{"literal-hash", "tenant-${request.header.x-tenant|hash}"},
		{"jwt", `${request.header.authorization|jwt("user.id")}`},
		{"replace", `${request.path|replace("^/api/v[0-9]+/([^/]+).*", "$1")}`},
	} {
		e, err := ParseExpr(bm.src)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			dst := make([]byte, 0, 256)
			for b.Loop() {
				dst = e.appendFresh(dst[:0], r)
			}
		})
	}
}

// FuzzExpr parses arbitrary sources and evaluates those that parse against a
// request built from arbitrary bytes: nothing may panic, appendFresh must not
// touch what dst already held, and the allocation-free IP parser must agree
// with netip.
func FuzzExpr(f *testing.F) {
	f.Add("${request.header.x|lower|prefix(8)||client.ip|mask(24)}", []byte("x\x00ABC\x001.2.3.4:5\x00cookie\x00a=b; c=d"))
	f.Add(`${request.header.a|jwt("user.id")|default("z")}`, []byte("a\x00Bearer "+exprTestJWT(exprTestClaims, false)))
	f.Add(`k-${request.path|replace("^/(\w+)/.*", "$1")|hash}`, []byte("\x00\x00/x/y?q=1\x00[::1]:80"))
	f.Add("${request.cookie.sid}${request.query.id|suffix(2)}", []byte("cookie\x00sid=1;sid=2\x00/p?id=12345"))
	f.Add("${sip.callid|upper}${server.port}${client.port}", []byte("i\x00abc@h\x00\x00::ffff:1.2.3.4"))
	f.Add("${server.ip|mask(64)}", []byte("1:2:3:4:5:6:1.2.3.4"))
	f.Add("${client.ip|mask(8)}", []byte("::1.2.3.4"))
	f.Add(`${request.url|before("?")|after(";jsessionid=")||request.cookie.jsessionid}`, []byte("cookie\x00jsessionid=c\x00/a;jsessionid=s?q=1"))
	f.Add(`${request.path|substr(2,5)|after("")}`, []byte("\x00\x00/abcdefgh"))
	f.Add(`${request.header.x|substr(1048576,1048576)|before("ab")}`, []byte("x\x00abab"))
	// Hostile shapes (SECURITY.md): deep JSON in a JWT, a quadratic
	// replace, cookies split over lines, over-long values.
	f.Add(`${request.header.authorization|jwt("sub")}`, []byte("authorization\x00"+jwtWith(strings.Repeat("[", 3000)+strings.Repeat("]", 3000))))
	f.Add(`${request.header.authorization|jwt("a.b")}`, []byte("authorization\x00"+jwtWith(`{"a":{"b":"x","c":`+strings.Repeat(`{"d":`, 40)+"1"+strings.Repeat("}", 40)+"}}")))
	f.Add(`${request.path|replace("a.*b|a","x")}`, []byte("\x00\x00/"+strings.Repeat("a", 4096)))
	f.Add(`${request.cookie.s|replace("(a)(b)?","$2$1$1")}`, []byte("cookie\x00a=1\x00cookie\x00s="+strings.Repeat("ab", 600)))
	f.Add("${request.header.x|hash}", []byte("x\x00"+strings.Repeat("\xff\x00", 10000)))
	addHostileExprSeeds(f)
	f.Fuzz(func(t *testing.T, src string, data []byte) {
		e, err := ParseExpr(src)
		if ip, ok := parseIPBytes(data); bytes.IndexByte(data, '%') < 0 {
			want, err := netip.ParseAddr(string(data))
			if ok != (err == nil) || ok && ip != want.Unmap() {
				t.Errorf("parseIPBytes(%q) = %v, %v; netip.ParseAddr says %v, %v", data, ip, ok, want, err)
			}
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "col ") {
				t.Errorf("ParseExpr(%q) error %q lacks a column", src, err)
			}
			return
		}
		if e.String() != src {
			t.Errorf("String() = %q, want %q", e.String(), src)
		}
		r, x := exprFuzzRequest(data)
		got := e.appendEval([]byte("keep"), r, x)
		if !bytes.HasPrefix(got, []byte("keep")) {
			t.Fatalf("AppendEval(%q) = %q, lost its prefix", src, got)
		}
		x.m.steps, x.work = 0, 0 // a new decision: its budgets start again
		if again := string(e.appendEval(nil, r, x)); again != string(got[4:]) {
			t.Errorf("Eval(%q) = %q, then %q", src, got[4:], again)
		}
	})
}

// exprFuzzRequest builds a request from NUL-separated fields: pairs of the first
// twelve are headers, and fields 1–5 also give dest, target, authority,
// method and source. The first byte picks the trusted hops.
func exprFuzzRequest(data []byte) (*Request, *evalCtx) {
	f := strings.Split(string(data), "\x00")
	r, x := &Request{}, &evalCtx{}
	if len(data) > 0 {
		x.hops = int(data[0] % 3)
	}
	for i := 0; i+1 < len(f) && i < 12; i += 2 {
		r.Headers = append(r.Headers, [2]string{f[i], f[i+1]})
	}
	at := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	r.Target, r.Authority, r.Method, r.Source, r.Dest = at(2), at(3), at(4), at(5), at(1)
	return r, x
}

// FuzzIPv4Text: the short path for ${client.ip} writes exactly what the
// general one (parseAddrPort, then AppendTo) writes, whenever it answers.
func FuzzIPv4Text(f *testing.F) {
	for _, s := range []string{"192.0.2.7:5000", "192.0.2.7", "192.0.2.7:", "192.0.2.7:65536", "192.0.2.7:0080",
		"010.0.0.1:80", "[::ffff:192.0.2.7]:80", "::ffff:192.0.2.7", "[2001:db8::1]:443", "1.2.3.4:5:6", "", ":80",
		"192.0.2.7:00000000000000000000080", "256.1.1.1:1", "1.2.3.4:+80", "1.2.3.4%eth0:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		txt, ok := ipv4Text(s)
		if !ok {
			return
		}
		ip, _, ok2 := parseAddrPort(s)
		if !ok2 || string(ip.AppendTo(nil)) != txt {
			t.Fatalf("ipv4Text(%q) = %q; parseAddrPort gives %v, %v", s, txt, ip, ok2)
		}
	})
}
