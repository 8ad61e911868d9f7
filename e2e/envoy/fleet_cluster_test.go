package envoy

// The Wasm filter's persistence.fleet over a three-member etcd cluster:
// configs/envoy-fleet.yaml read into the builder's types, its hashlb_etcd
// cluster listing every member, health-checked, as its comment tells a user
// to.

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/fleettest"
	"github.com/hashlb/hashlb/internal/lateness"
)

// etcdHealthCheck is the active health check the test gives hashlb_etcd:
// etcd's /health, which fails on a member without a leader, every half
// second; a member that does not answer within a second, twice, is left
// out until it answers again.
func etcdHealthCheck() *corev3.HealthCheck {
	half := durationpb.New(500 * time.Millisecond)
	return &corev3.HealthCheck{Timeout: durationpb.New(time.Second), Interval: half, NoTrafficInterval: half,
		UnhealthyThreshold: wrapperspb.UInt32(2), HealthyThreshold: wrapperspb.UInt32(1),
		HealthChecker: &corev3.HealthCheck_HttpHealthCheck_{HttpHealthCheck: &corev3.HealthCheck_HttpHealthCheck{Path: "/health"}}}
}

// fleetClusterYAML is configs/envoy-fleet.yaml for backends bs, its
// hashlb_etcd cluster's one endpoint replaced by every member of eps
// (host:port), health-checked (etcdHealthCheck), as the file's comment
// tells a user with an etcd cluster to do.
func fleetClusterYAML(t testing.TB, bs []*envoyrun.Backend, eps []string) []byte {
	t.Helper()
	const rel = "configs/envoy-fleet.yaml"
	b := parseShipped(t, rel, envoyrun.Ports(t, envoyrun.ReadRepoFile(t, rel), bootstrapHTTPPorts(bs)))
	var etcd *cluster
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == "hashlb_etcd" {
			etcd = c
		}
	}
	if etcd == nil || len(etcd.GetLoadAssignment().GetEndpoints()) != 1 {
		t.Fatalf("%s: no hashlb_etcd cluster of one locality", rel)
	}
	var members []*endpointv3.LbEndpoint
	for _, ep := range eps {
		members = append(members, lbEndpoint(t, ep))
	}
	etcd.LoadAssignment.Endpoints[0].LbEndpoints = members
	etcd.HealthChecks = []*corev3.HealthCheck{etcdHealthCheck()}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("%s with three etcd members: %v", rel, err)
	}
	return marshal(t, b)
}

// TestFleetEnvoysCluster: three Envoys with the Wasm filter's
// persistence.fleet over a three-member etcd (fleettest.ProcCluster), their
// hashlb_etcd cluster listing the three members, health-checked:
// Zipf-drawn clients through every Envoy at once, every client answered by
// one backend through every Envoy once settled; then, under a steady load
// with new clients arriving (runFleetFaults), the leader killed and
// restarted, one member stopped (SIGSTOP) 10 s and resumed, two members
// stopped 10 s (quorum lost: some new clients are placed apart) and
// resumed, 30 % of the connections to one member reset for 10 s
// (fleettest.ResetProxy between the Envoys and the member), a member wiped
// and added back, and one Envoy stopped and started again (its shared
// data, the local table, empty): every request a 2xx, and 0 split clients
// from fleetBound after the heal.
func TestFleetEnvoysCluster(t *testing.T) {
	t.Parallel()
	newestEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		c, rp, eps := startHangCluster(t)
		f := startFilterFleetOn(t, bin, eps)
		es, urls := f.es, f.urls
		m := lateness.Start()
		defer m.Stop()
		keys := fleetKeys("zipf", 300)
		placedOnce(t, fleetAsk, urls, keys, 2000, 11, m)
		if healthy := es[0].Stat(t, "cluster.hashlb_etcd.membership_healthy"); healthy != 3 {
			t.Errorf("Envoy 0's hashlb_etcd has %d healthy members, want 3", healthy)
		}
		stopOne := func(*fleetLoad) (func() error, error) {
			o := (c.Leader() + 1) % 3 // a follower (or any member when none leads)
			c.Stop(o)
			return func() error {
				if h := es[0].Stat(t, "cluster.hashlb_etcd.membership_healthy"); h != 2 {
					t.Errorf("Envoy 0's hashlb_etcd has %d healthy members with one stopped 10 s, want 2: the health check did not leave it out", h)
				}
				c.Cont(o)
				return c.Wait(fleettest.ClusterStart)
			}, nil
		}
		restart := func(l *fleetLoad) (func() error, error) {
			const i = 2
			l.setURL(i, "")
			es[i].Stop()
			return func() error {
				es[i] = fleetStartEnvoys(t, bin, f.yaml, 1)[0]
				urls[i] = "http://" + es[i].MustListener(t, "hashlb_listener")
				l.setURL(i, urls[i])
				return nil
			}, nil
		}
		hang := hangFaults(t, c, rp, 10*time.Second)
		runFleetFaults(t, fleetAsk, urls, fleetBound, watchEtcdSlow(t, eps, fleetTimeout), []fleetFault{
			{"leader killed", memberFault(c, func(l int) []int { return []int{l} }, c.Kill, c.Restart), 2 * time.Second, false},
			{"one member stopped 10s", stopOne, 10 * time.Second, false},
			hang[1], // quorum lost by stops
			hang[2], // 30 % of the connections to a member reset
			{"member wiped and re-added", wipeFault(c), 2 * time.Second, false},
			{"proxy's Envoy restarted", restart, time.Second, false},
		})
	})
}

// filterFleet is three Envoys with the Wasm filter's persistence.fleet:
// configs/envoy-fleet.yaml over three backends (fleetClusterYAML), its
// hashlb_etcd listing etcd's members, health-checked.
type filterFleet struct {
	yaml []byte // the bootstrap, to start another Envoy of the fleet
	es   []*envoyrun.Envoy
	urls []string
}

// startFilterFleetOn starts a filterFleet of bin over the etcd members at
// eps (host:port).
func startFilterFleetOn(t testing.TB, bin envoyrun.Binary, eps []string) *filterFleet {
	t.Helper()
	bs := envoyrun.StartBackends(t, 3)
	f := &filterFleet{yaml: fleetClusterYAML(t, bs, eps)}
	f.es = fleetStartEnvoys(t, bin, f.yaml, 3)
	for _, e := range f.es {
		f.urls = append(f.urls, "http://"+e.MustListener(t, "hashlb_listener"))
	}
	return f
}
