package lbcore

import (
	"fmt"
	"slices"
	"testing"
	"time"
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

// BenchmarkDecideSlowStart is a URLHASH decision over 1024 keys in turn,
// on three Balancers in alternation, so that all three see the same load of
// the machine: without slowStart (the baseline), with slowStart and no
// service ramping (what the option must not cost: x-plain-idle, the ratio
// to the baseline) and with one service ramping (every service ranked in
// full and weighted: x-plain-ramping). One op is 1024 decisions on each.
func BenchmarkDecideSlowStart(b *testing.B) {
	urls := make([]Request, 1024)
	for i := range urls {
		urls[i] = Request{Target: fmt.Sprintf("/api/v1/items/%d?view=full", i)}
	}
	const window = `"slowStart":{"window":"60s"}`
	for _, n := range []int{3, 10, 100, 1000} {
		plain := NewBalancer(mustConfig(b, pool("URLHASH", n, "")), 0)
		idle := NewBalancer(mustConfig(b, pool("URLHASH", n, window)), 0)
		ramping := NewBalancer(mustConfig(b, pool("URLHASH", n, window)), 0)
		ramping.Decide(&urls[0], epoch)
		ramping.SetDown(n-1, true)
		ramping.SetDown(n-1, false)
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var idleX, rampX []float64
			var total time.Duration
			bals := []*Balancer{plain, idle, ramping}
			for round := 0; b.Loop(); round++ {
				var spent [3]time.Duration
				for o := range bals {
					// Each in turn goes first, so none always follows the
					// ramping one's pass over every service.
					j := (o + round) % len(bals)
					bal := bals[j]
					t0 := time.Now()
					for i := range urls {
						bal.Decide(&urls[i], epoch)
					}
					spent[j] = time.Since(t0)
				}
				total += spent[0]
				idleX = append(idleX, float64(spent[1])/float64(spent[0]))
				rampX = append(rampX, float64(spent[2])/float64(spent[0]))
			}
			// The median of the rounds' ratios: a round the machine's other
			// work slowed counts once, not by how long it took.
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*len(urls)), "ns/plain")
			b.ReportMetric(median(idleX), "x-plain-idle")
			b.ReportMetric(median(rampX), "x-plain-ramping")
		})
	}
}

// median is the middle of xs (which it sorts).
func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}
