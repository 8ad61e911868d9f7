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
	for _, c := range hostileConfigs {
		t.Run(c.name, func(t *testing.T) {
			b := hostileBalancer(t, c.config)
			for i, hr := range hostile.Requests() {
				r := hostileRequest(hr)
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

// TestHostileInputsKeepBuffersSmall: the buffers a Balancer keeps from one
// decision to the next (the method's key, the persistence key) stay within
// what the input caps allow after the whole hostile corpus, whose values go
// up to the 1 MiB the filter's host copies allow: grown to a hostile value's
// size they would keep that much of the worker's linear memory for good
// (TestV8 bounds hostile memory at 1.5 x a benign run's).
func TestHostileInputsKeepBuffersSmall(t *testing.T) {
	const bound = 4 * MaxValueBytes // the widest key of hostileConfigs: four capped values
	for _, c := range hostileConfigs {
		t.Run(c.name, func(t *testing.T) {
			b := hostileBalancer(t, c.config)
			biggest := 0
			for _, hr := range hostile.Requests() {
				r := hostileRequest(hr)
				for _, h := range r.Headers {
					biggest = max(biggest, len(h[1]))
				}
				var d Decision
				b.DecideInto(&d, &r, time.Unix(1e9, 0))
				b.failover(&d, &r, 0)
			}
			if biggest <= bound {
				t.Fatalf("the corpus's largest header value is %d bytes, not over %d: the test proves nothing", biggest, bound)
			}
			if cap(b.buf) > bound || cap(b.pkey) > bound {
				t.Errorf("after the hostile corpus (values up to %d bytes) the kept key buffers hold %d and %d bytes, want at most %d",
					biggest, cap(b.buf), cap(b.pkey), bound)
			}
		})
	}
}

// hostileConfigs reach every expression function, persistence, the client
// address from x-forwarded-for, every key a method builds or finds in the
// request, and sessions.
var hostileConfigs = func() []struct{ name, config string } {
	const svcs = `"services": [{"name": "a", "address": "10.0.0.1:80"}, {"name": "b", "address": "10.0.0.2:80"}, {"name": "c", "address": "[fd00::3]:80"}]`
	return []struct{ name, config string }{
		{"jwt", `{"lbMethod": "TOKEN", "upstreamCount": 2, "token": "${request.header.authorization | jwt(\"sub\") || request.cookie.session | jwt(\"sub\") || request.header.authorization | jwt(\"a.b.0\")}", ` + svcs + `}`},
		{"persistence", `{"lbMethod": "SOURCEIPHASH", "persistence": {"keys": ["${client.ip}", "${request.header.x-client-id}", "${request.url | replace(\"a.*b|a\", \"x\")}", "${request.cookie.session | hash}"]}, ` + svcs + `}`},
		{"xff", `{"lbMethod": "SOURCEIPHASH", "trustedForwardedHops": 1, "netmask": "255.255.255.0", "persistence": {"keys": ["${client.ip | mask(24)}", "${client.port}${server.ip}"]}, ` + svcs + `}`},
		{"functions", `{"lbMethod": "TOKEN", "token": "${request.host | lower | prefix(8) || sip.callid | upper | suffix(4)}${request.query.user | default(\"-\")}${request.method}${request.path | replace(\"^/([^/]*)\", \"$1\")}", ` + svcs + `}`},
		{"domain", `{"lbMethod": "DOMAINHASH", "upstreamCount": 3, "hashBalanceFactor": 150, ` + svcs + `}`},
		{"session cookie", `{"lbMethod": "URLHASH", "upstreamCount": 2, "session": {"type": "cookie", "name": "session", "idleTimeout": "10m"}, "persistence": {"keys": ["${client.ip}"]}, ` + svcs + `}`},
		{"session header", `{"lbMethod": "ROUNDROBIN", "session": {"type": "header", "name": "authorization"}, ` + svcs + `}`},
		{"callid", `{"lbMethod": "CALLIDHASH", "persistence": {"keys": ["${sip.callid}", "${request.header.x-client-id}"]}, ` + svcs + `}`},
		{"url", `{"lbMethod": "URLHASH", "hashLength": 4096, "persistence": {"keys": ["${request.header.authorization}"]}, ` + svcs + `}`},
	}
}()

func hostileBalancer(t *testing.T, config string) *Balancer {
	t.Helper()
	b := NewBalancer(mustConfig(t, config), 1)
	b.EnablePersistence(NewMemStore(), "x")
	if err := b.EnableSession(testSessionKey, ""); err != nil {
		t.Fatal(err)
	}
	return b
}

// hostileRequest is hr as the filter reads it.
func hostileRequest(hr hostile.Request) Request {
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
	return r
}
