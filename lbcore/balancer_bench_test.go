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
