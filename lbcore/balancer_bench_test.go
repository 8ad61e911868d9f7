package lbcore

import (
	"fmt"
	"testing"
)

// BenchmarkSelect measures one decision per method and pool size. Compare
// methods with each other and with ROUNDROBIN (no key, no ranking) as the
// baseline of the same run.
func BenchmarkSelect(b *testing.B) {
	for _, m := range Methods() {
		sample, ok := methodSamples[m]
		if !ok {
			b.Fatalf("%s: no entry in methodSamples", m)
		}
		for _, n := range []int{3, 10, 100, 1000} {
			bal := NewBalancer(mustConfig(b, pool(m, n, sample.extra)), 0)
			r := &sample.req
			b.Run(fmt.Sprintf("%s/services=%d", m, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					bal.Decide(r, epoch)
				}
			})
		}
	}
}

// BenchmarkPersistHit is a URLHASH decision with persistence keyed on
// ${client.ip}, every request a hit that writes nothing (the common case),
// beside the same decision without persistence.
func BenchmarkPersistHit(b *testing.B) {
	r := &Request{Target: "/api/v1/catalog/items/0?view=full&lang=en", Source: "203.0.113.7:51234"}
	for _, c := range []struct{ name, extra string }{
		{"plain", ""},
		{"persistence hit", `"persistence": {"keys": ["${client.ip}"], "tableSize": 10000}`},
	} {
		bal := NewBalancer(mustConfig(b, pool("URLHASH", 4, c.extra)), 0)
		bal.EnablePersistence(NewMemStore(), "hashlb/bench")
		var d Decision
		bal.DecideInto(&d, r, epoch)
		bal.DecideInto(&d, r, epoch) // the first hit marks the entry hot
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bal.DecideInto(&d, r, epoch)
			}
			if c.extra != "" && !d.Persist.Hit {
				b.Fatalf("decision %+v is not a persistence hit", d)
			}
		})
	}
}
