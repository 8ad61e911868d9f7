package lbcore

import (
	"bytes"
	"strings"
	"testing"
)

// keyOf runs one keyer on r, as a Balancer with trustedForwardedHops 0 does.
func keyOf(k keyer, r *Request) (string, bool) {
	key, ok := k.AppendKey(nil, r, &evalCtx{})
	return string(key), ok
}

// behind runs k as a Balancer with trustedForwardedHops hops does.
type behind struct {
	k    keyer
	hops int
}

func (b behind) AppendKey(dst []byte, r *Request, x *evalCtx) ([]byte, bool) {
	x.hops = b.hops
	return b.k.AppendKey(dst, r, x)
}

// methodSamples holds, for every method, the configuration fields it needs
// besides lbMethod and a request that carries its input. Tests that cover
// every method (and BenchmarkSelect) read it; TestMethodSpecs fails for a
// method without an entry.
var methodSamples = map[string]struct {
	extra string // top-level configuration fields, for pool
	req   Request
}{
	"URLHASH":           {req: Request{Target: "/static/js/app.3f9a1c.js?v=12"}},
	"DOMAINHASH":        {req: Request{Target: "/", Authority: "Img.Example.com:443"}},
	"DESTINATIONIPHASH": {req: Request{Dest: "198.51.100.1:443"}},
	"SOURCEIPHASH":      {req: Request{Source: "192.0.2.77:51234"}},
	"SRCIPDESTIPHASH":   {req: Request{Source: "192.0.2.77:51234", Dest: "198.51.100.1:443"}},
	"SRCIPSRCPORTHASH":  {req: Request{Source: "192.0.2.77:51234"}},
	"CALLIDHASH":        {req: Request{Headers: [][2]string{{"call-id", "a84b4c76e66710@pc33.example.com"}}}},
	"TOKEN":             {extra: `"token":"${request.header.x-tenant|lower}"`, req: Request{Headers: [][2]string{{"x-tenant", "Blue-Team"}}}},
	"LEASTCONNECTION":   {},
	"ROUNDROBIN":        {},
}

// TestMethodSpecs checks the method table: each method once, its name
// round-trips, a hashing method has a keyer that finds its input in its
// sample request and none in an empty one, a method that does not hash can
// choose on its own (and so be backupLBMethod).
func TestMethodSpecs(t *testing.T) {
	seen := map[Method]bool{}
	for _, s := range methodSpecs {
		m := s.method
		if seen[m] {
			t.Errorf("%s: twice in methodSpecs", s.name)
		}
		seen[m] = true
		if s.name == "" || s.name != strings.ToUpper(s.name) {
			t.Errorf("method %d: name %q, want an upper-case token", m, s.name)
		}
		if got, ok := methodNamed(strings.ToLower(s.name)); !ok || got != m || m.String() != s.name {
			t.Errorf("%s: methodNamed = %v, %v; String = %q", s.name, got, ok, m.String())
		}
		if m.IsHash() != (s.keyer != nil) || (s.keyer != nil) == (s.pick != nil) {
			t.Errorf("%s: IsHash %v, keyer %v, pick %v: want a keyer or pick, not both", s.name, m.IsHash(), s.keyer != nil, s.pick != nil)
		}
		if s.ownBackup && (s.backup.spec() == nil || s.backup.spec().pick == nil) {
			t.Errorf("%s: backup %v cannot choose without a key", s.name, s.backup)
		}
		sample, ok := methodSamples[s.name]
		if !ok {
			t.Errorf("%s: add a sample configuration and request to methodSamples", s.name)
			continue
		}
		c := mustConfig(t, pool(s.name, 3, sample.extra))
		if c.LBMethod != m {
			t.Errorf("ParseConfig(lbMethod %s).LBMethod = %v", s.name, c.LBMethod)
		}
		if s.keyer == nil {
			continue
		}
		k := keyerFor(c)
		if key, ok := keyOf(k, &sample.req); !ok || key == "" {
			t.Errorf("%s: AppendKey(%+v) = %q, %v, want its key", s.name, sample.req, key, ok)
		}
		if key, ok := keyOf(k, &Request{}); ok {
			t.Errorf("%s: AppendKey(empty request) = %q, %v, want no key", s.name, key, ok)
		}
	}
	if len(Methods()) != len(methodSpecs) {
		t.Errorf("Methods() = %v, want the %d methods of methodSpecs", Methods(), len(methodSpecs))
	}
}

func TestKeyExtraction(t *testing.T) {
	v4 := func(a, b, c, d byte) string { return string([]byte{4, a, b, c, d}) }
	m24 := ipMask{v4: 24, v6: 128}
	m64 := ipMask{v4: 32, v6: 64}
	tests := []struct {
		name   string
		keyer  keyer
		req    Request
		want   string
		wantOK bool
	}{
		{"url whole", urlHash{Length: 80}, Request{Target: "/a/b?x=1"}, "/a/b?x=1", true},
		{"url cut to hashLength", urlHash{Length: 4}, Request{Target: "/abcdef"}, "/abc", true},
		{"url absolute as received", urlHash{Length: 80}, Request{Target: "http://h.example/p?q"}, "http://h.example/p?q", true},
		{"url missing", urlHash{Length: 80}, Request{}, "", false},

		{"domain from authority, port and case folded", domainHash{Length: 80}, Request{Target: "/", Authority: "WWW.Example.COM:8443"}, "www.example.com", true},
		{"domain absolute URL wins over Host", domainHash{Length: 80}, Request{Target: "http://Cache.Example.net:81/x", Authority: "other.example"}, "cache.example.net", true},
		{"domain host header when no authority", domainHash{Length: 80}, Request{Target: "/", Headers: [][2]string{{"host", "a.example"}}}, "a.example", true},
		{"domain trailing dot", domainHash{Length: 80}, Request{Authority: "a.example."}, "a.example", true},
		{"domain cut to hashLength", domainHash{Length: 3}, Request{Authority: "ABCDEF"}, "abc", true},
		{"domain ipv6 literal", domainHash{Length: 80}, Request{Authority: "[2001:db8::1]:80"}, "2001:db8::1", true},
		{"domain userinfo ignored", domainHash{Length: 80}, Request{Target: "http://u:p@h.example/"}, "h.example", true},
		{"domain missing", domainHash{Length: 80}, Request{Target: "/"}, "", false},

		{"dest v4 masked /24", destIPHash{m24}, Request{Dest: "198.51.100.77:443"}, v4(198, 51, 100, 0), true},
		{"dest v6 masked /64", destIPHash{m64}, Request{Dest: "[2001:db8:1:2:3:4:5:6]:443"},
			string(append([]byte{6}, 0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0)), true},
		{"dest missing", destIPHash{m24}, Request{}, "", false},
		{"dest malformed", destIPHash{m24}, Request{Dest: "not-an-ip"}, "", false},

		{"source v4 /32", sourceIPHash{ipMask{32, 128}}, Request{Source: "192.0.2.9:5555"}, v4(192, 0, 2, 9), true},
		{"source v4-mapped v6 is v4", sourceIPHash{ipMask{32, 128}}, Request{Source: "[::ffff:192.0.2.9]:5555"}, v4(192, 0, 2, 9), true},
		{"source xff one hop", behind{sourceIPHash{ipMask{32, 128}}, 1}, Request{Source: "10.0.0.1:1",
			Headers: [][2]string{{"x-forwarded-for", "203.0.113.5, 198.51.100.7"}}}, v4(198, 51, 100, 7), true},
		{"source xff two hops across copies", behind{sourceIPHash{ipMask{32, 128}}, 2}, Request{Source: "10.0.0.1:1",
			Headers: [][2]string{{"x-forwarded-for", "203.0.113.5"}, {"X-Forwarded-For", "198.51.100.7"}}}, v4(203, 0, 113, 5), true},
		{"source xff too few hops", behind{sourceIPHash{ipMask{32, 128}}, 3}, Request{Source: "10.0.0.1:1",
			Headers: [][2]string{{"x-forwarded-for", "203.0.113.5"}}}, "", false},
		{"source xff garbage", behind{sourceIPHash{ipMask{32, 128}}, 1}, Request{Source: "10.0.0.1:1",
			Headers: [][2]string{{"x-forwarded-for", "unknown"}}}, "", false},

		{"srcdest", srcDestIPHash{ipMask{32, 128}}, Request{Source: "192.0.2.1:1000", Dest: "198.51.100.2:80"},
			v4(192, 0, 2, 1) + v4(198, 51, 100, 2), true},
		{"srcdest swapped is the same", srcDestIPHash{ipMask{32, 128}}, Request{Source: "198.51.100.2:80", Dest: "192.0.2.1:1000"},
			v4(192, 0, 2, 1) + v4(198, 51, 100, 2), true},
		{"srcdest needs both", srcDestIPHash{ipMask{32, 128}}, Request{Source: "192.0.2.1:1000"}, "", false},

		{"srcip srcport", srcIPSrcPortHash{m24}, Request{Source: "192.0.2.1:4660"}, v4(192, 0, 2, 0) + "\x12\x34", true},
		{"srcip srcport no port", srcIPSrcPortHash{m24}, Request{Source: "192.0.2.1"}, "", false},

		{"call-id", callIDHash{}, Request{Headers: [][2]string{{"call-id", "a84b4c76e66710@pc33.example.com"}}}, "a84b4c76e66710@pc33.example.com", true},
		{"call-id compact i", callIDHash{}, Request{Headers: [][2]string{{"i", "f81d4fae@192.0.2.4"}}}, "f81d4fae@192.0.2.4", true},
		{"call-id exact value, case kept", callIDHash{}, Request{Headers: [][2]string{{"Call-ID", "AbC"}}}, "AbC", true},
		{"call-id missing", callIDHash{}, Request{}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := keyOf(tt.keyer, &tt.req)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("AppendKey(%+v) = %q, %v, want %q, %v", tt.req, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestTokenKey(t *testing.T) {
	e, err := ParseExpr("${request.header.x-tenant||request.cookie.tenant}")
	if err != nil {
		t.Fatal(err)
	}
	k := tokenKeyer{Expr: e}
	if got, ok := keyOf(k, &Request{Headers: [][2]string{{"cookie", "a=1; tenant=blue"}}}); got != "blue" || !ok {
		t.Errorf("token from cookie = %q, %v, want blue, true", got, ok)
	}
	if got, ok := keyOf(k, &Request{}); got != "" || ok {
		t.Errorf("token of a request without it = %q, %v, want \"\", false", got, ok)
	}
}

// TestKeysAppend checks every keyer appends after existing bytes.
func TestKeysAppend(t *testing.T) {
	r := &Request{Target: "/x", Authority: "h", Source: "192.0.2.1:9", Dest: "192.0.2.2:80",
		Headers: [][2]string{{"call-id", "c"}}}
	for _, k := range []keyer{urlHash{80}, domainHash{80}, destIPHash{ipMask{32, 128}}, sourceIPHash{ipMask{32, 128}},
		srcDestIPHash{ipMask{32, 128}}, srcIPSrcPortHash{ipMask{32, 128}}, callIDHash{}} {
		a, _ := k.AppendKey(nil, r, &evalCtx{})
		b, _ := k.AppendKey([]byte("prefix"), r, &evalCtx{})
		if !bytes.Equal(b, append([]byte("prefix"), a...)) {
			t.Errorf("%T.AppendKey did not append: %q vs %q", k, b, a)
		}
	}
}
