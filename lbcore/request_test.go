package lbcore

import (
	"strings"
	"testing"
)

func TestRequestView(t *testing.T) {
	tests := []struct {
		name                string
		target              string
		wantPath, wantQuery string
		wantHost            string
		wantHostOK          bool
	}{
		{"origin form", "/a/b?x=1&y=2", "/a/b", "x=1&y=2", "", false},
		{"absolute", "https://Example.com:8443/p?q", "/p", "q", "Example.com", true},
		{"absolute no path", "http://h.example", "/", "", "h.example", true},
		{"absolute query only", "http://h.example?x", "/", "x", "h.example", true},
		{"fragment dropped", "/p#frag", "/p", "", "", false},
		{"path with ://", "/redirect?to=http://x", "/redirect", "to=http://x", "", false},
		{"empty", "", "", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Request{Target: tt.target}
			h, ok := r.Host()
			if r.Path() != tt.wantPath || r.Query() != tt.wantQuery || h != tt.wantHost || ok != tt.wantHostOK {
				t.Errorf("Request{Target: %q}: Path %q Query %q Host %q,%v; want %q %q %q,%v",
					tt.target, r.Path(), r.Query(), h, ok, tt.wantPath, tt.wantQuery, tt.wantHost, tt.wantHostOK)
			}
		})
	}
}

// FuzzRequest feeds arbitrary request fields to every method: a decision
// never panics and always names a configured service.
func FuzzRequest(f *testing.F) {
	f.Add("/a?b", "h:80", "192.0.2.1:5", "[::1]:80", "x-forwarded-for", "1.2.3.4, 5.6.7.8")
	f.Add("http://[::1", "[", "::ffff:1.2.3.4", "1.2.3.4:99999", "call-id", "\x00\xff")
	f.Add("/", "h", "192.0.2.1:1", "192.0.2.2:2", "authorization", jwtWith(strings.Repeat("{\"a\":", 2000)+"1"+strings.Repeat("}", 2000)))
	f.Add("/", "h", "192.0.2.1:1", "192.0.2.2:2", "cookie", "s="+strings.Repeat("a", 3000))
	f.Add("/", "h", "[fe80::1%eth0]:80", "1.2.3.4", "x-forwarded-for", strings.Repeat(",", 1000)+"fe80::1%25eth0")
	addHostileRequestSeeds(f)
	var bals []*Balancer
	for i, m := range append(Methods(), "SOURCEIPHASH", "SRCIPDESTIPHASH") {
		extra := `"upstreamCount":3,"hashBalanceFactor":150`
		if i >= len(Methods()) {
			extra += `,"trustedForwardedHops":2`
		}
		if m == "TOKEN" {
			extra += `,"token":"${request.header.call-id|lower||request.header.authorization|jwt(\"sub\")||request.cookie.s|replace(\"a.*b|a\",\"x\")||client.ip|mask(24)}"`
		} else if e := methodSamples[m].extra; e != "" {
			extra += "," + e
		}
		c, err := ParseConfig([]byte(pool(m, 5, extra)))
		if err != nil {
			f.Fatal(err)
		}
		bals = append(bals, NewBalancer(c, 0))
	}
	f.Fuzz(func(t *testing.T, target, auth, src, dst, hname, hval string) {
		for _, b := range bals {
			c := b.Config()
			r := &Request{Target: target, Authority: auth, Source: src, Dest: dst, Headers: [][2]string{{hname, hval}, {"i", hval}}}
			d := b.Decide(r, epoch)
			if d.Len() < 1 || d.Len() > 3 {
				t.Fatalf("%s: decision names %d services", c.LBMethod, d.Len())
			}
			for i := 0; i < d.Len(); i++ {
				if d.At(i) < 0 || d.At(i) >= len(c.Services) {
					t.Fatalf("%s: index %d out of range", c.LBMethod, d.At(i))
				}
			}
		}
	})
}
