package lbcore

import (
	"strings"
	"testing"
)

// TestExprTextFunctions: before, after and substr on values with and
// without their separator, at the edges of their offsets, and chained as the
// NetScaler jsessionid rule translates.
func TestExprTextFunctions(t *testing.T) {
	url := func(target string) *Request { return &Request{Target: target, Authority: "h"} }
	tests := []struct {
		name string
		src  string
		req  *Request
		want string
	}{
		{name: "before", src: `${request.url|before("?")}`, req: url("/a;b?c=1"), want: "/a;b"},
		{name: "before without the separator keeps the value", src: `${request.url|before("?")}`, req: url("/a;b"), want: "/a;b"},
		{name: "before at the start", src: `${request.url|before("/")}`, req: url("/a"), want: ""},
		{name: "before the first of two", src: `${request.url|before("=")}`, req: url("/p?a=1&b=2"), want: "/p?a"},
		{name: "after", src: `${request.url|after(";jsessionid=")}`, req: url("/app;jsessionid=A1B2"), want: "A1B2"},
		{name: "after without the separator is empty", src: `${request.url|after(";jsessionid=")}`, req: url("/app?x=1"), want: ""},
		{name: "after at the end is empty", src: `${request.url|after("?")}`, req: url("/app?"), want: ""},
		{name: "after the first of two", src: `${request.url|after("/")}`, req: url("/a/b"), want: "a/b"},
		{name: "multi-byte separator", src: `${request.header.x|after("ß")}`, req: &Request{Headers: [][2]string{{"x", "aßb"}}}, want: "b"},
		{name: "jsessionid in the path before a query", src: `${request.url|before("?")|after(";jsessionid=")}`, req: url("/app;jsessionid=S1?jsessionid=S2"), want: "S1"},
		{name: "jsessionid only in the query", src: `${request.url|before("?")|after(";jsessionid=")}`, req: url("/app?x=;jsessionid=S2"), want: ""},
		{name: "cookie first, then the URL", src: `${request.cookie.jsessionid||request.url|before("?")|after(";jsessionid=")}`,
			req: &Request{Target: "/app;jsessionid=U1", Headers: [][2]string{{"cookie", "jsessionid=C1"}}}, want: "C1"},
		{name: "URL when the cookie is missing", src: `${request.cookie.jsessionid||request.url|before("?")|after(";jsessionid=")}`,
			req: url("/app;jsessionid=U1?a=b"), want: "U1"},
		{name: "substr", src: `${request.path|substr(1,3)}`, req: url("/abcdef"), want: "abc"},
		{name: "substr from 0", src: `${request.path|substr(0,2)}`, req: url("/abcdef"), want: "/a"},
		{name: "substr past the end", src: `${request.path|substr(4,100)}`, req: url("/abcdef"), want: "def"},
		{name: "substr start at the length", src: `${request.path|substr(7,1)}`, req: url("/abcdef"), want: ""},
		{name: "substr start beyond", src: `${request.path|substr(50,1)}`, req: url("/abcdef"), want: ""},
		{name: "functions after a cut", src: `${request.url|after("u=")|upper|prefix(2)}`, req: url("/p?u=abc"), want: "AB"},
		{name: "empty value", src: `${request.header.none|before("?")|after("x")|substr(0,1)}`, req: url("/"), want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := ParseExpr(tt.src)
			if err != nil {
				t.Fatalf("ParseExpr(%q): %v", tt.src, err)
			}
			if got := e.Eval(tt.req); got != tt.want {
				t.Errorf("%s on %q = %q, want %q", tt.src, tt.req.Target, got, tt.want)
			}
			if n := testing.AllocsPerRun(50, func() { e.Eval(tt.req) }); n > 1 { // Eval's one string; AppendEval below has none
				t.Errorf("Eval(%q) allocates %v times", tt.src, n)
			}
			dst := make([]byte, 0, 256)
			if n := testing.AllocsPerRun(50, func() { dst = e.appendFresh(dst[:0], tt.req) }); n != 0 {
				t.Errorf("AppendEval(%q) allocates %v times, want 0", tt.src, n)
			}
		})
	}
}

func TestExprTextFunctionErrors(t *testing.T) {
	long := strings.Repeat("x", maxSeparator+1)
	tests := []struct {
		name, src, want string
	}{
		{name: "before without argument", src: `${request.url|before}`, want: "before takes 1 argument, got 0"},
		{name: "before with a number", src: `${request.url|before(1)}`, want: "before argument 1 must be a string"},
		{name: "empty separator", src: `${request.url|after("")}`, want: "after separator must be 1 to 255 bytes, got 0"},
		{name: "separator too long", src: `${request.url|after("` + long + `")}`, want: "after separator must be 1 to 255 bytes, got 256"},
		{name: "substr one argument", src: `${request.url|substr(1)}`, want: "substr takes 2 arguments, got 1"},
		{name: "substr negative start", src: `${request.url|substr(-1,2)}`, want: "substr start -1 is out of range [0, 1048576]"},
		{name: "substr zero length", src: `${request.url|substr(0,0)}`, want: "substr length 0 is out of range [1, 1048576]"},
		{name: "substr strings", src: `${request.url|substr("a","b")}`, want: "substr argument 1 must be an integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseExpr(tt.src); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseExpr(%q) = %v, want an error containing %q", tt.src, err, tt.want)
			}
		})
	}
}

// TestExprTextCanonical: the canonical form keeps the arguments, so keys that
// differ only in them are not duplicates.
func TestExprTextCanonical(t *testing.T) {
	a, _ := ParseExpr(`${ request.url | before( "?" ) | substr( 1 , 2 ) }`)
	b, _ := ParseExpr(`${request.url|before("?")|substr(1,2)}`)
	c, _ := ParseExpr(`${request.url|before("#")|substr(1,2)}`)
	if a.canonical() != b.canonical() || b.canonical() == c.canonical() {
		t.Errorf("canonical forms %q, %q, %q: want the first two equal and the third different", a.canonical(), b.canonical(), c.canonical())
	}
}

// FuzzExprText holds before, after and substr to a model written with the
// strings package, on any value and argument.
func FuzzExprText(f *testing.F) {
	f.Add("/app;jsessionid=A1?x=1", ";jsessionid=", 1, 4)
	f.Add("", "?", 0, 1)
	f.Add("abc", "abcd", 3, 1)
	f.Add("ßßß", "ß", 1, 2)
	f.Fuzz(func(t *testing.T, v, sep string, start, length int) {
		if sep == "" || len(sep) > maxSeparator || start < 0 || start > maxAffix || length < 1 || length > maxAffix {
			return
		}
		before, after := v, ""
		if i := strings.Index(v, sep); i >= 0 {
			before, after = v[:i], v[i+len(sep):]
		}
		sub := ""
		if start < len(v) {
			sub = v[start:min(len(v), start+length)]
		}
		for _, c := range []struct {
			f    exprFunc
			want string
		}{
			{exprFunc{kind: fnBefore, sep: []byte(sep)}, before},
			{exprFunc{kind: fnAfter, sep: []byte(sep)}, after},
			{exprFunc{kind: fnSubstr, n: start, m: length}, sub},
		} {
			dst := append([]byte("keep"), v...)
			got := c.f.apply(dst, 4, &evalCtx{})
			if string(got[:4]) != "keep" || string(got[4:]) != c.want {
				t.Errorf("%s on %q (sep %q, %d, %d) = %q, want %q", funcNames[c.f.kind], v, sep, start, length, got, c.want)
			}
		}
	})
}
