package lbcore

import (
	"reflect"
	"testing"
)

func TestInputs(t *testing.T) {
	tests := []struct {
		name, config string
		want         Inputs
	}{
		{"url", pool("URLHASH", 2, ""), Inputs{Target: true}},
		{"domain", pool("DOMAINHASH", 2, ""), Inputs{Authority: true, Headers: []string{"host"}}},
		{"source", pool("SOURCEIPHASH", 2, ""), Inputs{Source: true}},
		{"source behind proxies", pool("SOURCEIPHASH", 2, `"trustedForwardedHops":1`), Inputs{Headers: []string{"x-forwarded-for"}, AllCopies: true}},
		{"srcport ignores xff", pool("SRCIPSRCPORTHASH", 2, `"trustedForwardedHops":1`), Inputs{Source: true}},
		{"srcdest", pool("SRCIPDESTIPHASH", 2, ""), Inputs{Source: true, Dest: true}},
		{"call-id", pool("CALLIDHASH", 2, ""), Inputs{Headers: []string{"call-id", "i"}}},
		{"round robin reads nothing", pool("ROUNDROBIN", 2, ""), Inputs{}},
		{"token and persistence", pool("TOKEN", 2, `"token":"${request.header.X-Tenant||request.cookie.t}",
			"persistence":{"keys":["${client.ip|mask(24)}","${request.query.k}${request.method}${server.port}"]}`),
			Inputs{Target: true, Method: true, Source: true, Dest: true, Headers: []string{"x-tenant", "cookie"}, AllCopies: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustConfig(t, tt.config).Inputs(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Inputs() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestInputsAreComplete: a decision made from only the inputs Inputs lists
// equals the decision made from the whole request, so the filter may fetch
// no more than that. Every method of the table is tried, on its sample
// request among others.
func TestInputsAreComplete(t *testing.T) {
	var configs []string
	for _, m := range Methods() {
		configs = append(configs, pool(m, 5, methodSamples[m].extra))
	}
	configs = append(configs,
		pool("SOURCEIPHASH", 5, `"trustedForwardedHops":2`),
		pool("SRCIPDESTIPHASH", 5, `"trustedForwardedHops":1`),
		pool("TOKEN", 5, `"token":"${request.cookie.t||request.header.x-a|lower||sip.callid||request.host||client.ip}"`),
		pool("TOKEN", 5, `"token":"${request.query.q}-${request.method}-${server.ip}-${request.path}"`),
		pool("ROUNDROBIN", 5, `"persistence":{"keys":["${request.header.x-id||client.ip}"]}`),
		pool("DOMAINHASH", 5, `"persistence":{"keys":["${request.cookie.s}"],"emptyKey":"shared"}`),
	)
	requests := []Request{
		{Target: "/a?q=1", Authority: "h.example", Method: "GET", Source: "192.0.2.1:10", Dest: "198.51.100.1:80",
			Headers: [][2]string{{"host", "x"}, {"x-a", "AbC"}, {"cookie", "t=9; s=4"}, {"call-id", "c1"}, {"x-forwarded-for", "203.0.113.1, 203.0.113.2"}, {"x-id", "7"}, {"other", "z"}}},
		{Target: "http://abs.example/p", Source: "[2001:db8::1]:9", Headers: [][2]string{{"host", "hh"}, {"i", "c2"}, {"x-forwarded-for", "203.0.113.3"}}},
		{Target: "/b", Method: "POST", Dest: "198.51.100.2:443", Headers: [][2]string{{"x-other", "1"}}},
		{Target: "/c", Source: "192.0.2.9:1", Headers: [][2]string{{"host", "only-host.example"}}},
		// Repeated lines: the client's x-forwarded-for line first, the
		// trusted proxy's last; the cookie sought only in the second line.
		{Target: "/d", Source: "192.0.2.7:2", Headers: [][2]string{{"x-forwarded-for", "6.6.6.6"}, {"cookie", "x=1"},
			{"x-a", "first"}, {"x-a", "second"}, {"cookie", "t=5; s=8"}, {"x-forwarded-for", "203.0.113.9, 203.0.113.10"}}},
	}
	for _, m := range Methods() {
		requests = append(requests, methodSamples[m].req)
	}
	for _, js := range configs {
		c := mustConfig(t, js)
		in := c.Inputs()
		for i, r := range requests {
			var cut Request
			if in.Target {
				cut.Target = r.Target
			}
			if in.Authority {
				cut.Authority = r.Authority
			}
			if in.Method {
				cut.Method = r.Method
			}
			if in.Source {
				cut.Source = r.Source
			}
			if in.Dest {
				cut.Dest = r.Dest
			}
			// Without AllCopies the filter reads one value per name, the
			// first copy, as proxy-wasm's get_header_map_value does.
			for _, h := range r.Headers {
				for _, name := range in.Headers {
					if h[0] == name && (in.AllCopies || cut.header(name) == "") {
						cut.Headers = append(cut.Headers, h)
					}
				}
			}
			full := NewBalancer(c, 3).Decide(&r, epoch)
			part := NewBalancer(c, 3).Decide(&cut, epoch)
			if !reflect.DeepEqual(names(c, full), names(c, part)) || full.Reason != part.Reason {
				t.Errorf("%s, request %d: whole request %v (%v), inputs only %v (%v)", js, i, names(c, full), full.Reason, names(c, part), part.Reason)
			}
		}
	}
}
