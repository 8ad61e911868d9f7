package lbcore

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestRankIntoIsTheFailoverOrder: a Balancer's RankInto gives, for every
// request, the order a Balancer of the same configuration with the most
// ranks and no persistence decides, through health and load changes and at pool
// sizes with and without the rank cache; and ranking leaves the
// Balancer's own decisions as a twin that never ranked makes them.
func TestRankIntoIsTheFailoverOrder(t *testing.T) {
	variants := []struct {
		name, method, extra string
		n                   int
	}{
		{"url hash, 5 services", "URLHASH", "", 5},
		{"url hash, 300 services (rank cache)", "URLHASH", "", 300},
		{"url hash, bounded load", "URLHASH", `"hashBalanceFactor":125`, 40},
		{"url hash, persistence", "URLHASH", `"persistence":{"keys":["${request.url}"]}`, 12},
		{"domain hash, 3 services", "DOMAINHASH", "", 3},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			c := mustConfig(t, pool(v.method, v.n, v.extra))
			ref := *c
			ref.UpstreamCount, ref.Persistence = maxUpstreamCount, nil
			b, twin, full := NewBalancer(c, 3), NewBalancer(c, 3), NewBalancer(&ref, 3)
			rng := rand.New(rand.NewPCG(5, 6))
			var got, want, mine, theirs Decision
			for i := range 3000 {
				if i%100 == 0 {
					s, down := rng.IntN(v.n), rng.IntN(3) > 0
					for _, x := range []*Balancer{b, twin, full} {
						x.SetDown(s, down)
					}
				}
				if i%7 == 0 {
					s, a := rng.IntN(v.n), rng.Int64N(20)
					for _, x := range []*Balancer{b, twin, full} {
						x.SetActive(s, a)
					}
				}
				req := Request{Target: "/k/" + strconv.Itoa(rng.IntN(500)), Authority: "h" + strconv.Itoa(rng.IntN(40)) + ".example"}
				b.RankInto(&got, &req)
				full.DecideInto(&want, &req, epoch)
				if got.Len() != want.Len() || got.ranked != want.ranked || got.Reason != want.Reason {
					t.Fatalf("request %d %s: RankInto %v (%v), full order %v (%v)", i, req.Target,
						names(c, got), got.Reason, names(c, want), want.Reason)
				}
				if want.Len() < min(maxUpstreamCount, v.n) && want.Reason == ReasonHash {
					up := 0
					for s := range v.n {
						if b.Selectable(s) {
							up++
						}
					}
					if want.Len() != min(maxUpstreamCount, up) {
						t.Fatalf("request %d: %d ranks with %d services up", i, want.Len(), up)
					}
				}
				b.DecideInto(&mine, &req, epoch)
				twin.DecideInto(&theirs, &req, epoch)
				if mine.Len() != theirs.Len() || mine.ranked != theirs.ranked {
					t.Fatalf("request %d: after RankInto the Balancer chose %v, its twin %v", i, names(c, mine), names(c, theirs))
				}
			}
		})
	}
}
