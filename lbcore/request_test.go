package lbcore

import (
	"net/netip"
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
			h, ok := r.host()
			if r.path() != tt.wantPath || r.query() != tt.wantQuery || h != tt.wantHost || ok != tt.wantHostOK {
				t.Errorf("Request{Target: %q}: Path %q Query %q Host %q,%v; want %q %q %q,%v",
					tt.target, r.path(), r.query(), h, ok, tt.wantPath, tt.wantQuery, tt.wantHost, tt.wantHostOK)
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

// FuzzParseIPv4Port: whatever the IPv4 short path accepts, netip accepts as
// the same plain IPv4 address and port (parseAddrPort's general path).
func FuzzParseIPv4Port(f *testing.F) {
	for _, s := range []string{"192.0.2.7:5000", "192.0.2.7", "192.0.2.7:", "192.0.2.7:65536", "192.0.2.7:0080",
		"010.0.0.1:80", "0.0.0.0:0", "255.255.255.255:65535", "256.1.1.1:1", "1.2.3:4", "1.2.3.4.5", "1..2.3",
		"1.2.3.4:+80", "1.2.3.4%eth0:80", "[::ffff:192.0.2.7]:80", "::ffff:192.0.2.7", "1.2.3.4:5:6", "", ":80",
		"1.2.3.4 :80", "1.2.3.4:00000000000000000000080", "1.2.3.0004"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, port, ok := parseIPv4Port(s)
		if !ok {
			return
		}
		var want netip.Addr
		var wantPort uint16
		if ap, err := netip.ParseAddrPort(s); err == nil {
			want, wantPort = ap.Addr(), ap.Port()
		} else if a, err := netip.ParseAddr(s); err == nil {
			want = a
		} else {
			t.Fatalf("parseIPv4Port(%q) = %v:%d; netip refuses it", s, b, port)
		}
		if !want.Is4() || want.As4() != b || wantPort != port {
			t.Fatalf("parseIPv4Port(%q) = %v:%d; netip reads %v:%d", s, b, port, want, wantPort)
		}
	})
}

// TestParseIPv4PortCommonForms: what proxies pass takes the short path, and
// what it must not read goes to netip.
func TestParseIPv4PortCommonForms(t *testing.T) {
	for s, want := range map[string]bool{
		"192.0.2.10:51234": true, "10.1.0.5:8080": true, "127.0.0.1": true, "0.0.0.0:0": true,
		"255.255.255.255:65535": true, "1.2.3.4:0080": true,
		"010.0.0.1:80": false, "256.0.0.1:80": false, "1.2.3.4:65536": false, "1.2.3.4:": false,
		"[2001:db8::1]:443": false, "::ffff:1.2.3.4": false, "1.2.3.4%eth0": false, "1.2.3": false,
	} {
		if _, _, ok := parseIPv4Port(s); ok != want {
			t.Errorf("parseIPv4Port(%q) ok = %v, want %v", s, ok, want)
		}
	}
}

// TestAppendIPv4Masked: the masking by hand matches netip's Prefix for every
// netmask length.
func TestAppendIPv4Masked(t *testing.T) {
	a := netip.MustParseAddr("203.0.113.77")
	for bits := 0; bits <= 32; bits++ {
		p, _ := a.Prefix(bits)
		want := append([]byte{4}, p.Addr().AsSlice()...)
		if got := (ipMask{v4: bits, v6: 64}).appendIP(nil, a); string(got) != string(want) {
			t.Errorf("/%d: %x, want %x", bits, got, want)
		}
	}
}

// netipAddrPort is parseAddrPort by netip alone, as it was written before
// the allocation-free parsers.
func netipAddrPort(s string) (netip.Addr, uint16, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), ap.Port(), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), 0, true
	}
	return netip.Addr{}, 0, false
}

func FuzzParseAddrPortNoAlloc(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "1.2.3.4:80", "1.2.3.4:00080", "[::1]:80", "::1", "[::1]", "[1.2.3.4]:80",
		"[::ffff:1.2.3.4]:9", "::ffff:1.2.3.4", "1.2.3.4:", "1.2.3.4:65536", "01.2.3.4", "[::1]:", "1:2", "", "[", "]:1",
		"fe80::1%eth0", "[fe80::1%eth0]:80", "fe80::1%", "1.2.3.4%x", "[fe80::1%]:80", "::ffff:1.2.3.4%z", "fe80::1%eth0:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, p, ok := parseAddrPortNoAlloc(s)
		wa, wp, wok := netipAddrPort(s)
		if wa = wa.WithZone(""); a != wa || p != wp || ok != wok {
			t.Errorf("parseAddrPortNoAlloc(%q) = %v, %d, %v; netip says %v, %d, %v (zone dropped)", s, a, p, ok, wa, wp, wok)
		}
		if i := strings.LastIndexByte(s, ','); i < 0 {
			a, _, ok := parseAddr(s)
			w, err := netip.ParseAddr(s)
			if ok != (err == nil) || ok && a != w.Unmap().WithZone("") {
				t.Errorf("parseAddr(%q) = %v, %v; netip says %v, %v", s, a, ok, w, err)
			}
		}
	})
}
