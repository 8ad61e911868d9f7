package e2e

// BenchmarkFleet: what the fleet level costs. Run with
//
//	go test -run '^$' -bench Fleet -benchmem ./e2e
//
// hit: a local hit with persistence.fleet against one without it, timed
// interleaved on two hosts (the goal: ≤ 1.1×, hit_fleet_x_hit). miss: one
// new key per stream through a real etcd on loopback (embedded), one at a
// time: the request's wait for etcd, p50 and p99, and etcd requests per miss.

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
)

func fleetBenchHost(b *testing.B, fleet map[string]any, etcdAddr string) *hostsim.Host {
	b.Helper()
	p := persistence(nil)
	if fleet != nil {
		p["fleet"] = fleet
	}
	cfg := lbConfig(b, "LEASTCONNECTION", p, fourServices())
	h, err := hostsim.New(context.Background(), module(b), hostsim.Config{
		Workers: 1, PluginConfig: cfg, RootID: persistRootID, Clusters: map[string]string{"etcd": etcdAddr}})
	if err != nil {
		b.Fatalf("hostsim.New: %v", err)
	}
	b.Cleanup(func() { h.Close(context.Background()) })
	return h
}

func BenchmarkFleet(b *testing.B) {
	etcdAddr, _ := startEtcd(b, b.TempDir())
	fleet := map[string]any{"cluster": "etcd", "timeout": "5s"}
	b.Run("hit", func(b *testing.B) {
		hosts := [2]*hostsim.Host{fleetBenchHost(b, nil, etcdAddr), fleetBenchHost(b, fleet, etcdAddr)}
		hs := persistBenchHeaders("client-1")
		for _, h := range hosts { // the key's entry: a miss (through etcd for the second)
			if _, err := fleetRoundTrip(h, 0, "client-1"); err != nil {
				b.Fatal(err)
			}
		}
		total := interleaved(b, 2, func(_, j int) func() {
			return func() { persistStream(b, hosts[j], 0, hs) }
		})
		n := float64(b.N)
		b.ReportMetric(float64(total[0].Nanoseconds())/n, "hit-ns")
		b.ReportMetric(float64(total[1].Nanoseconds())/n, "hit_fleet-ns")
		b.ReportMetric(float64(total[1])/float64(total[0]), "hit_fleet_x_hit")
	})
	b.Run("miss", func(b *testing.B) {
		counted, count := countingProxy(b, etcdAddr)
		h := fleetBenchHost(b, fleet, counted)
		if _, err := fleetRoundTrip(h, 0, "warm"); err != nil { // the lease
			b.Fatal(err)
		}
		before := count("")
		waits := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := range b.N {
			rep, err := fleetRoundTrip(h, 0, "miss-"+strconv.Itoa(i))
			if err != nil || !rep.paused {
				b.Fatalf("miss %d: %+v, %v; want a request that waited for etcd", i, rep, err)
			}
			waits = append(waits, rep.waited)
		}
		b.StopTimer()
		b.ReportMetric(float64(percentile(waits, 0.5).Microseconds()), "p50-µs")
		b.ReportMetric(float64(percentile(waits, 0.99).Microseconds()), "p99-µs")
		b.ReportMetric(float64(count("")-before)/float64(b.N), "etcd-req/miss")
	})
}
