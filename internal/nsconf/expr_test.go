package nsconf

import (
	"strings"
	"testing"

	"github.com/hashlb/hashlb/lbcore"
)

// req builds a request: target, host, client and headers ("name: value").
func req(target, host, client string, headers ...string) *lbcore.Request {
	r := &lbcore.Request{Target: target, Authority: host, Source: client}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		r.Headers = append(r.Headers, [2]string{strings.ToLower(k), v})
	}
	return r
}

func TestTranslateExpr(t *testing.T) {
	named := map[string]string{
		"tenant_expr": `HTTP.REQ.HEADER("X-Tenant")`,
		"loop":        "loop",
	}
	tests := []struct {
		name string
		src  string
		want string // the hashlb expression
		// evals are requests and the value the expression must give them.
		evals []struct {
			r    *lbcore.Request
			want string
		}
		wantErr string
	}{
		{name: "header", src: `HTTP.REQ.HEADER("X-Tenant")`, want: "${request.header.x-tenant}",
			evals: evals(req("/", "h", "", "X-Tenant: Acme"), "Acme", req("/", "h", ""), "")},
		{name: "cookie", src: `HTTP.REQ.COOKIE.VALUE("sid")`, want: "${request.cookie.sid}",
			evals: evals(req("/", "h", "", "Cookie: a=1; sid=XY"), "XY")},
		{name: "query", src: `HTTP.REQ.URL.QUERY.VALUE("user")`, want: "${request.query.user}",
			evals: evals(req("/p?a=1&user=bob", "h", ""), "bob")},
		{name: "hostname", src: "HTTP.REQ.HOSTNAME", want: "${request.host}",
			evals: evals(req("/", "shop.example.com:8080", ""), "shop.example.com")},
		{name: "url", src: "HTTP.REQ.URL", want: "${request.url}", evals: evals(req("/a?b=1", "h", ""), "/a?b=1")},
		{name: "path", src: "http.req.url.path", want: "${request.path}", evals: evals(req("/a?b=1", "h", ""), "/a")},
		{name: "client ip", src: "CLIENT.IP.SRC", want: "${client.ip}", evals: evals(req("/", "h", "192.0.2.7:4000"), "192.0.2.7")},
		{name: "to_lower", src: `HTTP.REQ.HEADER("X-Tenant").TO_LOWER`, want: "${request.header.x-tenant | lower}",
			evals: evals(req("/", "h", "", "X-Tenant: AcMe"), "acme")},
		{name: "to_upper", src: `HTTP.REQ.COOKIE.VALUE("t").TO_UPPER`, want: "${request.cookie.t | upper}",
			evals: evals(req("/", "h", "", "Cookie: t=ab"), "AB")},
		{name: "case-insensitive words", src: `http.req.header("a").to_lower`, want: "${request.header.a | lower}"},
		{name: "ALT chain", src: `HTTP.REQ.HEADER("X-User") ALT HTTP.REQ.COOKIE.VALUE("user") ALT CLIENT.IP.SRC`,
			want: "${request.header.x-user || request.cookie.user || client.ip}",
			evals: evals(req("/", "h", "192.0.2.9:1", "X-User: u1", "Cookie: user=u2"), "u1",
				req("/", "h", "192.0.2.9:1", "Cookie: user=u2"), "u2",
				req("/", "h", "192.0.2.9:1"), "192.0.2.9")},
		{name: "path element 1", src: "HTTP.REQ.URL.PATH.GET(1)",
			want: `${request.path | replace("(?s)^[^/]*/([^/]*).*$|^.*$", "$1")}`,
			evals: evals(req("/dir1/dir2/dir3/index.html?a=1", "h", ""), "dir1", // the guide's example
				req("/", "h", ""), "", req("/only", "h", ""), "only")},
		{name: "path element 2", src: "HTTP.REQ.URL.PATH.GET(2)",
			want: `${request.path | replace("(?s)^[^/]*(?:/[^/]*){1}/([^/]*).*$|^.*$", "$1")}`,
			evals: evals(req("/dir1/dir2/dir3/index.html?a=1", "h", ""), "dir2",
				req("/dir1", "h", ""), "", // fewer elements: empty, never the whole path
				req("/dir1/", "h", ""), "",
				req("/a//c", "h", ""), "", // an empty element counts
				req("/a/b?q=/x/y", "h", ""), "b", // the query is not part of the path
				req("http://example.com/a/b/c", "", ""), "b")},
		{name: "path element 4 lower", src: "HTTP.REQ.URL.PATH.GET(4).TO_LOWER",
			want:  `${request.path | replace("(?s)^[^/]*(?:/[^/]*){3}/([^/]*).*$|^.*$", "$1") | lower}`,
			evals: evals(req("/dir1/dir2/dir3/Index.HTML", "h", ""), "index.html", req("/a/b/c", "h", ""), "")},
		{name: "named expression", src: "tenant_expr ALT CLIENT.IP.SRC", want: "${request.header.x-tenant || client.ip}"},
		{name: "named expressions do not recurse forever", src: "loop", wantErr: `"loop" not understood (named expressions nest too deeply)`},
		{name: "unknown prefix", src: "HTTP.REQ.BODY(100)", wantErr: `"HTTP.REQ.BODY(100)" not understood (the translated values are`},
		{name: "unknown operation", src: `HTTP.REQ.HEADER("a").CONTAINS("b")`, wantErr: `"CONTAINS(\"b\")" not understood (the operations translated are TO_LOWER, TO_UPPER, BEFORE_STR`},
		{name: "jsessionid: cookie ALT URL", src: `HTTP.REQ.COOKIE.VALUE("jsessionid") ALT HTTP.REQ.URL.BEFORE_STR("?").AFTER_STR(";jsessionid=")`,
			want: `${request.cookie.jsessionid || request.url | before("?") | after(";jsessionid=")}`,
			evals: evals(req("/app;jsessionid=U1?x=1", "h", "", "Cookie: jsessionid=C1"), "C1",
				req("/app;jsessionid=U1?x=1", "h", ""), "U1",
				req("/app;jsessionid=U2", "h", ""), "U2", // no query: BEFORE_STR keeps the URL
				req("/app?jsessionid=Q", "h", ""), "",
				req("/app", "h", ""), "")},
		{name: "before_str", src: `HTTP.REQ.URL.BEFORE_STR("?")`, want: `${request.url | before("?")}`,
			evals: evals(req("/a/b?c", "h", ""), "/a/b")},
		{name: "after_str of a header", src: `HTTP.REQ.HEADER("Authorization").AFTER_STR("Basic ")`, want: `${request.header.authorization | after("Basic ")}`,
			evals: evals(req("/", "h", "", "Authorization: Basic dXNlcg=="), "dXNlcg==", req("/", "h", "", "Authorization: Bearer x"), "")},
		{name: "substr prefix suffix skip", src: `HTTP.REQ.HEADER("X-Id").SUBSTR(2, 6).PREFIX(4).SUFFIX(3).SKIP(1)`,
			want:  `${request.header.x-id | substr(2, 6) | prefix(4) | suffix(3) | substr(1, 1048576)}`,
			evals: evals(req("/", "h", "", "X-Id: abcdefghij"), "ef")},
		{name: "skip 0 is nothing", src: `HTTP.REQ.URL.SKIP(0)`, want: `${request.url}`},
		{name: "typecast_text_t", src: `CLIENT.IP.SRC.TYPECAST_TEXT_T`, want: `${client.ip}`, evals: evals(req("/", "h", "192.0.2.7:1"), "192.0.2.7")},
		{name: "name-value list", src: `HTTP.REQ.HEADER("Cookie").TYPECAST_NVLIST_T('=', ';').VALUE("JSESSIONID")`,
			want: `${request.header.cookie | replace("(?s)^(?:.*?;)?\\s*JSESSIONID\\s*=([^;]*).*$|^.*$", "$1")}`,
			evals: evals(req("/", "h", "", "Cookie: a=1; JSESSIONID=S9; b=2"), "S9", req("/", "h", "", "Cookie: JSESSIONID=S1"), "S1",
				req("/", "h", "", "Cookie: XJSESSIONID=no"), "", req("/", "h", ""), "")},
		{name: "set_text_mode ignorecase", src: `HTTP.REQ.URL.SET_TEXT_MODE(IGNORECASE).AFTER_STR(";JSESSIONID=")`,
			want:  `${request.url | lower | after(";jsessionid=")}`,
			evals: evals(req("/App;JSessionID=AbC", "h", ""), "abc")},
		{name: "set_text_mode noignorecase", src: `HTTP.REQ.URL.SET_TEXT_MODE(NOIGNORECASE).AFTER_STR("x")`, want: `${request.url | after("x")}`},
		{name: "substr of a text", src: `HTTP.REQ.URL.SUBSTR("abc")`, wantErr: `a constant and never a key`},
		{name: "prefix of a character count", src: `HTTP.REQ.URL.PREFIX('/', 2)`, wantErr: `PREFIX(character, count) is not`},
		{name: "after_str of nothing", src: `HTTP.REQ.URL.AFTER_STR("")`, wantErr: `AFTER_STR takes one non-empty string`},
		{name: "bad text mode", src: `HTTP.REQ.URL.SET_TEXT_MODE(URLENCODED)`, wantErr: `SET_TEXT_MODE takes IGNORECASE or NOIGNORECASE`},
		{name: "operation after to_lower", src: `HTTP.REQ.URL.TO_LOWER.HASH`, wantErr: `"HASH" not understood`},
		{name: "comparison", src: `HTTP.REQ.URL.CONTAINS("x") == true`, wantErr: `"==" not understood (operators and comparisons`},
		{name: "boolean operator", src: `HTTP.REQ.HEADER("a") || HTTP.REQ.HEADER("b")`, wantErr: `"||" not understood`},
		{name: "path element 0", src: "HTTP.REQ.URL.PATH.GET(0)", wantErr: "element must be 1 to 1000 (element 0 is always empty)"},
		{name: "header without a name", src: "HTTP.REQ.HEADER", wantErr: `"HTTP.REQ.HEADER" not understood (HEADER takes one string)`},
		{name: "header with a number", src: "HTTP.REQ.HEADER(1)", wantErr: "HEADER takes one string"},
		{name: "dangling ALT", src: `HTTP.REQ.URL ALT`, wantErr: `"ALT" not understood (ALT needs an expression after it)`},
		{name: "two values without ALT", src: `HTTP.REQ.URL HTTP.REQ.HOSTNAME`, wantErr: `"HTTP.REQ.HOSTNAME" not understood (only ALT may join two expressions)`},
		{name: "unterminated string", src: `HTTP.REQ.HEADER("a)`, wantErr: "unterminated string"},
		{name: "hashlb refuses the name", src: `HTTP.REQ.HEADER("a b")`, wantErr: "which hashlb refuses"},
		{name: "classic syntax", src: "REQ.HTTP.HEADER Cookie", wantErr: `not understood`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := exprTranslator{named: named}
			got, err := x.translate(tt.src)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("translate(%q) = %q, %v; want an error containing %q", tt.src, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("translate(%q) = %q, %v; want %q", tt.src, got, err, tt.want)
			}
			e, err := lbcore.ParseExpr(got)
			if err != nil {
				t.Fatalf("ParseExpr(%q): %v", got, err)
			}
			for _, ev := range tt.evals {
				if v := e.Eval(ev.r); v != ev.want {
					t.Errorf("%s on %q: got %q, want %q", got, ev.r.Target, v, ev.want)
				}
			}
		})
	}
}

// evals pairs requests with the values wanted of them.
func evals(pairs ...any) []struct {
	r    *lbcore.Request
	want string
} {
	var out []struct {
		r    *lbcore.Request
		want string
	}
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, struct {
			r    *lbcore.Request
			want string
		}{pairs[i].(*lbcore.Request), pairs[i+1].(string)})
	}
	return out
}

// TestIPKey evaluates the persistence keys of SOURCEIP masks on IPv4 and
// IPv6 clients: each family gets its own mask.
func TestIPKey(t *testing.T) {
	v4 := req("/", "h", "10.1.2.3:5000")
	v6 := req("/", "h", "[2001:db8:1:2:3:4:5:6]:5000")
	tests := []struct {
		name           string
		bits4, bits6   int
		want           string
		want4, wantSix string
	}{
		{name: "no mask", bits4: 32, bits6: 128, want: "${client.ip}", want4: "10.1.2.3", wantSix: "2001:db8:1:2:3:4:5:6"},
		{name: "v6 only", bits4: 32, bits6: 64, want: "${client.ip | mask(64)}", want4: "10.1.2.3", wantSix: "2001:db8:1:2::"},
		{name: "v4 only", bits4: 24, bits6: 128, want: `${client.ip | replace(".*:.*", "") | mask(24) || client.ip}`,
			want4: "10.1.2.0", wantSix: "2001:db8:1:2:3:4:5:6"},
		{name: "both", bits4: 16, bits6: 48, want: `${client.ip | replace(".*:.*", "") | mask(16) || client.ip | mask(48)}`,
			want4: "10.1.0.0", wantSix: "2001:db8:1::"},
		{name: "v6 below 32", bits4: 32, bits6: 24, want: `${client.ip | replace(".*:.*", "") | mask(32) || client.ip | mask(24)}`,
			want4: "10.1.2.3", wantSix: "2001:d00::"},
		{name: "same bits", bits4: 8, bits6: 8, want: "${client.ip | mask(8)}", want4: "10.0.0.0", wantSix: "2000::"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ipKey("client.ip", tt.bits4, tt.bits6)
			if got != tt.want {
				t.Fatalf("ipKey(client.ip, %d, %d) = %q, want %q", tt.bits4, tt.bits6, got, tt.want)
			}
			e, err := lbcore.ParseExpr(got)
			if err != nil {
				t.Fatal(err)
			}
			if v := e.Eval(v4); v != tt.want4 {
				t.Errorf("%s on an IPv4 client = %q, want %q", got, v, tt.want4)
			}
			if v := e.Eval(v6); v != tt.wantSix {
				t.Errorf("%s on an IPv6 client = %q, want %q", got, v, tt.wantSix)
			}
		})
	}
}

// TestMaskBits: the masks -netmask takes (lbcore's netmask field's rule).
func TestMaskBits(t *testing.T) {
	tests := []struct {
		name string
		mask string
		want int
		ok   bool
	}{
		{name: "/24", mask: "255.255.255.0", want: 24, ok: true},
		{name: "/32", mask: "255.255.255.255", want: 32, ok: true},
		{name: "/1", mask: "128.0.0.0", want: 1, ok: true},
		{name: "/20", mask: "255.255.240.0", want: 20, ok: true},
		{name: "zero", mask: "0.0.0.0"},
		{name: "not contiguous", mask: "255.0.255.0"},
		{name: "not an address", mask: "24"},
		{name: "IPv6", mask: "ffff::"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := lbcore.NetmaskBits(tt.mask)
			if got != tt.want || ok != tt.ok {
				t.Errorf("NetmaskBits(%q) = %d, %v; want %d, %v", tt.mask, got, ok, tt.want, tt.ok)
			}
		})
	}
}
