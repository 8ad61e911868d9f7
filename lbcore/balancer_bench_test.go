package lbcore

import (
	"fmt"
	"testing"
)

// BenchmarkSelect measures one decision per method and pool size. Compare
// methods with each other and with ROUNDROBIN (no key, no ranking) as the
// baseline of the same run.
func BenchmarkSelect(b *testing.B) {
	reqs := map[string]*Request{
		"URLHASH":           {Target: "/static/js/app.3f9a1c.js?v=12"},
		"DOMAINHASH":        {Target: "/", Authority: "Img.Example.com:443"},
		"DESTINATIONIPHASH": {Dest: "198.51.100.1:443"},
		"SOURCEIPHASH":      {Source: "192.0.2.77:51234"},
		"SRCIPDESTIPHASH":   {Source: "192.0.2.77:51234", Dest: "198.51.100.1:443"},
		"SRCIPSRCPORTHASH":  {Source: "192.0.2.77:51234"},
		"CALLIDHASH":        {Headers: [][2]string{{"call-id", "a84b4c76e66710@pc33.example.com"}}},
		"TOKEN":             {Headers: [][2]string{{"x-tenant", "Blue-Team"}}},
		"LEASTCONNECTION":   {},
		"ROUNDROBIN":        {},
	}
	for _, m := range Methods() {
		for _, n := range []int{3, 10, 100, 1000} {
			extra := ""
			if m == "TOKEN" {
				extra = `"token":"${request.header.x-tenant|lower}"`
			}
			bal := NewBalancer(mustConfig(b, pool(m, n, extra)), 0)
			r := reqs[m]
			b.Run(fmt.Sprintf("%s/services=%d", m, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					bal.Decide(r, epoch)
				}
			})
		}
	}
}
