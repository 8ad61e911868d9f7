package lbcore

import (
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/hostile"
)

// TestHostileInputsAllocateNothing: no request of the hostile corpus makes a
// decision allocate, under configurations that reach every expression
// function, persistence and the client address from x-forwarded-for: any
// garbage per request ends in a GC cycle, 0.1 s of CPU in V8.
func TestHostileInputsAllocateNothing(t *testing.T) {
	const svcs = `"services": [{"name": "a", "address": "10.0.0.1:80"}, {"name": "b", "address": "10.0.0.2:80"}, {"name": "c", "address": "[fd00::3]:80"}]`
	configs := []struct{ name, config string }{
		{"jwt", `{"lbMethod": "TOKEN", "upstreamCount": 2, "token": "${request.header.authorization | jwt(\"sub\") || request.cookie.session | jwt(\"sub\") || request.header.authorization | jwt(\"a.b.0\")}", ` + svcs + `}`},
		{"persistence", `{"lbMethod": "SOURCEIPHASH", "persistence": {"keys": ["${client.ip}", "${request.header.x-client-id}", "${request.url | replace(\"a.*b|a\", \"x\")}", "${request.cookie.session | hash}"]}, ` + svcs + `}`},
		{"xff", `{"lbMethod": "SOURCEIPHASH", "trustedForwardedHops": 1, "netmask": "255.255.255.0", "persistence": {"keys": ["${client.ip | mask(24)}", "${client.port}${server.ip}"]}, ` + svcs + `}`},
		{"functions", `{"lbMethod": "TOKEN", "token": "${request.host | lower | prefix(8) || sip.callid | upper | suffix(4)}${request.query.user | default(\"-\")}${request.method}${request.path | replace(\"^/([^/]*)\", \"$1\")}", ` + svcs + `}`},
		{"domain", `{"lbMethod": "DOMAINHASH", "upstreamCount": 3, "hashBalanceFactor": 150, ` + svcs + `}`},
		{"session cookie", `{"lbMethod": "URLHASH", "upstreamCount": 2, "session": {"type": "cookie", "name": "session", "idleTimeout": "10m"}, "persistence": {"keys": ["${client.ip}"]}, ` + svcs + `}`},
		{"session header", `{"lbMethod": "ROUNDROBIN", "session": {"type": "header", "name": "authorization"}, ` + svcs + `}`},
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			b := NewBalancer(mustConfig(t, c.config), 1)
			b.EnablePersistence(NewMemStore(), "x")
			if err := b.EnableSession(testSessionKey); err != nil {
				t.Fatal(err)
			}
			for i, hr := range hostile.Requests() {
				r := Request{Source: hr.Source, Dest: hr.Dest}
				for _, h := range hr.Headers {
					switch h[0] {
					case ":path":
						r.Target = h[1]
					case ":authority":
						r.Authority = h[1]
					case ":method":
						r.Method = h[1]
					default:
						r.Headers = append(r.Headers, h)
					}
				}
				var d Decision
				now := time.Unix(1e9, 0)
				b.DecideInto(&d, &r, now) // the first may store the key
				if n := testing.AllocsPerRun(3, func() { b.DecideInto(&d, &r, now) }); n > 0 {
					t.Errorf("hostile request %d (%s): a decision allocated %.0f times, want 0", i, hr.Class, n)
				}
			}
		})
	}
}
