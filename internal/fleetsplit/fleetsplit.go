// Package fleetsplit is the fleet tests' measure of agreement: the last
// request whose key went to another service than through another proxy
// within the second before. The simulated fleet (lbcore/fleet), hostsim's
// (e2e) and real Envoy's (e2e/envoy) all judge by it. Test-only, std only:
// the module never imports it.
package fleetsplit

import (
	"fmt"
	"time"
)

// Placement is one request's outcome: when it was decided, its key, the
// proxy that served it and the service it went to.
type Placement struct {
	At      time.Time
	Key     string
	Proxy   int
	Service string
}

// Last is the time of the last placement after from that went to another
// service than a placement of the same key through another proxy within
// the second before it (zero when there is none: the fleet agreed), with
// an example.
func Last(ps []Placement, from time.Time) (last time.Time, example string) {
	byKey := map[string][]Placement{}
	for _, p := range ps {
		if p.At.After(from) {
			byKey[p.Key] = append(byKey[p.Key], p)
		}
	}
	for k, rs := range byKey {
		for i, r := range rs {
			for j := i - 1; j >= 0 && r.At.Sub(rs[j].At) <= time.Second; j-- {
				if rs[j].Proxy != r.Proxy && rs[j].Service != r.Service && r.At.After(last) {
					last = r.At
					example = fmt.Sprintf("%s: proxy %d got %s, proxy %d got %s %v later", k, rs[j].Proxy, rs[j].Service, r.Proxy, r.Service,
						r.At.Sub(rs[j].At).Round(time.Millisecond))
				}
			}
		}
	}
	return last, example
}
