package lbcore

import (
	"testing"

	"github.com/tidwall/gjson"
)

var jsonPathCases = []struct{ doc, path string }{
	{`{"sub":"alice"}`, "sub"},
	{`{"sub":"al\"ice\u00e9\ud83d\ude00\ud800x"}`, "sub"},
	{`{"a":{"b":[1,{"c":true}]}}`, "a.b.1.c"},
	{`{"a":{"b":[1,{"c":true}]}}`, "a.b.0"},
	{`{"a":{"b":[1,{"c":true}]}}`, "a.b"},
	{`{"a":{"b":[1,{"c":true}]}}`, "a.b.5"},
	{`{"n":1.5e3,"m":-0,"k":12,"f":false,"z":null}`, "n"},
	{`{"n":1.5e3,"m":-0,"k":12,"f":false,"z":null}`, "m"},
	{`{"n":1.5e3,"m":-0,"k":12,"f":false,"z":null}`, "f"},
	{`{"n":1.5e3,"m":-0,"k":12,"f":false,"z":null}`, "z"},
	{`{"k\u0041":"escaped key","kA":"second"}`, "kA"},
	{` { "a" : [ "x" , "y" ] } `, "a.1"},
	{`{"a":"x","a":"y"}`, "a"},
	{`{"groups":["admins","devs"],"realm_access":{"roles":["r1"]}}`, "realm_access.roles.0"},
}

func TestJSONPathMatchesGjson(t *testing.T) {
	for _, tt := range jsonPathCases {
		parts := simplePath(tt.path)
		if parts == nil {
			t.Fatalf("simplePath(%q) = nil, want its keys", tt.path)
		}
		want := gjson.Get(tt.doc, tt.path).String()
		if got := string(appendJSONPath(nil, tt.doc, parts)); got != want {
			t.Errorf("path %q in %s = %q, want %q as gjson", tt.path, tt.doc, got, want)
		}
	}
	for _, p := range []string{"a.*", "a.#", "@reverse", "a\\.b", "a..b", "a|b", "friends.#(last==x)"} {
		if simplePath(p) != nil {
			t.Errorf("simplePath(%q) = keys, want nil (gjson syntax)", p)
		}
	}
}

func FuzzJSONPathMatchesGjson(f *testing.F) {
	for _, tt := range jsonPathCases {
		f.Add(tt.doc, tt.path)
	}
	f.Fuzz(func(t *testing.T, doc, path string) {
		parts := simplePath(path)
		if parts == nil || !gjson.Valid(doc) || !JSONDepthOK([]byte(doc), MaxJSONDepth) {
			return
		}
		if i := skipJSONSpace(doc, 0); doc[i] != '{' {
			return // jwt() reads objects only (appendJWTClaim)
		}
		want := gjson.Get(doc, path).String()
		if got := string(appendJSONPath(nil, doc, parts)); got != want {
			t.Errorf("path %q in %q = %q, want %q as gjson", path, doc, got, want)
		}
	})
}

// TestJWTAllocatesNothing: jwt() with a plain path, on tokens with escaped
// strings and numbers gjson reformats, allocates nothing once warm.
func TestJWTAllocatesNothing(t *testing.T) {
	for _, path := range []string{"sub", "n", "a.b.0"} {
		e, err := ParseExpr(`${request.header.authorization | jwt("` + path + `")}`)
		if err != nil {
			t.Fatal(err)
		}
		r := &Request{Headers: [][2]string{{"authorization", "Bearer " + jwtWith(`{"sub":"al\u00e9\"x","n":1.5e3,"a":{"b":["q\\n"]}}`)}}}
		var x evalCtx
		buf := make([]byte, 0, 256)
		e.appendEval(buf, r, &x)
		if n := testing.AllocsPerRun(100, func() { e.appendEval(buf, r, &x) }); n != 0 {
			t.Errorf("jwt(%q) allocated %.1f times per evaluation once warm, want 0", path, n)
		}
	}
}

func TestJSONNumbersAsGjson(t *testing.T) {
	for _, n := range []string{"1e999999999", "-1e400", "1.8e308", "1e308", "0.0001e312", "123.5e307", "0e99999", "1e-999", "-0.5E+2", "12345678901234567890"} {
		doc := `{"n":` + n + `}`
		want := gjson.Get(doc, "n").String()
		if got := string(appendJSONPath(nil, doc, []string{"n"})); got != want {
			t.Errorf("number %s = %q, want %q as gjson", n, got, want)
		}
	}
}
