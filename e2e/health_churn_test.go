package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/lbcore"
)

// TestHealthChurnBoundsSharedData: 10^4 pod identities go through a plugin
// as the controller writes them (one services list per rollout step, half
// of the churning pods replaced each time), with active health checks. The
// health records' keys in shared data stay as many as the largest services
// list plus three, whatever the churn; the pods that stay keep their
// verdicts across every reconfiguration (a DOWN pod stays DOWN, a good one
// serves at once); a pod that joins waits for its first probe even when it
// takes the slot of a pod that left UP, and passes it even when the slot's
// last owner was DOWN. Every worker's choice for every key is lbcore's with
// exactly the expected pods DOWN.
func TestHealthChurnBoundsSharedData(t *testing.T) {
	const workers, churning, identities, keys = 2, 96, 10_000, 24
	stay := []pod{{"stay-a", "10.9.0.1"}, {"stay-b", "10.9.0.2"}, {"stay-c", "10.9.0.3"}, {"stay-d", "10.9.0.4"}}
	// stay-a and every pod whose number ends in 0, 3, 6 or 9 fail their probes.
	failing := func(name string) bool {
		return name == "stay-a" || strings.HasPrefix(name, "web-") && name[len(name)-1]%3 == 0
	}
	var mu sync.Mutex
	down := map[string]bool{} // addresses that fail their probes
	handler := func(r *hostsim.CallRequest) (*hostsim.CallResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		if down[r.Header("x-envoy-original-dst-host")] {
			return &hostsim.CallResponse{Headers: [][2]string{{":status", "503"}}}, nil
		}
		return &hostsim.CallResponse{Headers: [][2]string{{":status", "200"}}}, nil
	}
	seq := 0
	fresh := func() pod {
		seq++
		p := pod{fmt.Sprintf("web-%05d", seq), fmt.Sprintf("10.%d.%d.%d", 10+seq/62500, seq/250%250, seq%250+1)}
		if failing(p.name) {
			mu.Lock()
			down[p.ip+":8080"] = true
			mu.Unlock()
		}
		return p
	}
	mu.Lock()
	down["10.9.0.1:8080"] = true
	mu.Unlock()
	churn := make([]pod, churning)
	for i := range churn {
		churn[i] = fresh()
	}
	hc := map[string]any{"healthCheck": map[string]any{"interval": "1s", "unhealthyThreshold": 1, "healthyThreshold": 1, "cluster": "backends"}}
	config := func() []byte { return podConfig(t, "URLHASH", append(append([]pod(nil), stay...), churn...), hc) }
	var host *hostsim.Host
	// check sends keys on every worker and wants lbcore's choice with the
	// pods isDown names DOWN.
	check := func(step int, when string, cfg []byte, isDown func(name string) bool) {
		t.Helper()
		o := newOracle(t, cfg)
		for i, s := range o.cfg.Services {
			o.bal.SetDown(i, isDown(s.Name))
		}
		for k := 0; k < keys; k++ {
			k := step*keys + k
			r := lbcore.Request{Target: keyPath(k), Authority: "h", Method: "GET", Source: "192.0.2.1:4000", Dest: "10.0.0.100:80"}
			d := o.bal.Decide(&r, time.Unix(0, 0))
			want := o.cfg.Services[d.At(0)].Name
			if got := mustSend(t, host, k%workers, k).service; got != want {
				t.Fatalf("step %d, %s: key %d went to %s, want %s (DOWN: stay-a, pods failing probes, pods not probed yet)", step, when, k, got, want)
			}
		}
	}
	cfg := config()
	host = podHost(t, cfg, workers, handler)
	host.Advance(time.Second) // first round
	host.Advance(time.Second) // every worker reads it
	check(0, "first configuration", cfg, failing)
	mostHealth, mostKeys, steps := 0, 0, 0
	for seen := churning; seen < identities; steps++ {
		joined := map[string]bool{}
		for i := steps % 2; i < churning; i += 2 {
			churn[i] = fresh()
			joined[churn[i].name] = true
			seen++
		}
		cfg = config()
		if err := host.Configure(cfg); err != nil {
			t.Fatalf("step %d: %v", steps, err)
		}
		check(steps, "right after the change", cfg, func(name string) bool { return failing(name) || joined[name] })
		host.Advance(time.Second) // the new configuration's first round
		host.Advance(time.Second)
		check(steps, "after the first round", cfg, failing)
		nh, n := 0, 0
		for _, k := range host.SharedData().Keys() {
			n++
			if strings.Contains(k, "/h/") {
				nh++
			}
		}
		mostHealth, mostKeys = max(mostHealth, nh), max(mostKeys, n)
	}
	services := len(stay) + churning
	t.Logf("%d pod identities through %d reconfigurations of %d services, %d workers: at most %d keys in shared data, %d of them health (slots, table, lease, marker)", seq, steps, services, workers, mostKeys, mostHealth)
	if mostHealth > services+3 {
		t.Errorf("health keys in shared data reached %d, want at most %d: one slot per service of the largest configuration, the slot table, the probe lease and the create marker", mostHealth, services+3)
	}
	// The rest are the active-request slots (lbcore.LoadBoard) and their marker.
	if mostKeys > services+3+lbcore.MaxSlots+1 {
		t.Errorf("keys in shared data reached %d, want at most %d", mostKeys, services+3+lbcore.MaxSlots+1)
	}
}
