package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/hostile"
	"github.com/hashlb/hashlb/lbcore"
)

// v8TCPConns is how many connections each TestV8TCP job runs, cycling
// through its tuples; every other one the upstream ends first and the proxy
// closes, else the client closes or resets it.
const v8TCPConns = 10_000

// TestV8TCP runs the module as a network filter in Node's V8 with Envoy's host
// (e2e/v8/hashlbv8.mjs): under each connection hash method and both
// profiles, every connection goes to the service lbcore ranks first, through
// the ORIGINAL_DST filter state; the same 5-tuple goes to the same service
// each time, SRCIPDESTIPHASH gives the reverse flow the same service, and
// after 10⁴ connections have closed every active count is 0.
func TestV8TCP(t *testing.T) {
	node := nodeForV8(t)
	dir := t.TempDir()
	wasmFile := filepath.Join(dir, "hashlb.wasm")
	if err := os.WriteFile(wasmFile, module(t), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(repoRoot(t), filepath.FromSlash(v8Script))

	// Each tuple three times: forward, forward again, reversed (IPv4 only, so
	// that a reversed tuple is a connection a listener could accept).
	r := rand.New(rand.NewPCG(11, 13))
	var conns []hostile.Request
	for i := 0; i < 300; i++ {
		tp := randomTuple(r)
		for strings.HasPrefix(tp.src, "[") {
			tp = randomTuple(r)
		}
		conns = append(conns,
			hostile.Request{Class: "forward", Source: tp.src, Dest: tp.dst},
			hostile.Request{Class: "again", Source: tp.src, Dest: tp.dst},
			hostile.Request{Class: "reverse", Source: tp.dst, Dest: tp.src})
	}
	phases, err := json.Marshal([]v8Phase{{Name: "connections", Requests: conns}})
	if err != nil {
		t.Fatal(err)
	}
	methods := []string{"SOURCEIPHASH", "SRCIPSRCPORTHASH", "DESTINATIONIPHASH", "SRCIPDESTIPHASH"}
	var jobs []v8Job
	for _, profile := range []string{"envoy-1.33", "envoy-1.39"} {
		for _, m := range methods {
			jobs = append(jobs, v8Job{Name: profile + "/" + m, Profile: profile, Config: string(tcpConfig(m, "")),
				RootID: "hashlb", Repeat: v8TCPConns, PerRequest: true, FinalTick: true})
		}
	}
	lines := runV8Jobs(t, node, script, wasmFile, filepath.Join(dir, "jobs.json"),
		v8JobFile{Defaults: v8Job{Phases: phases}, Jobs: jobs})
	if t.Failed() {
		return
	}
	for _, job := range jobs {
		t.Run(job.Name, func(t *testing.T) {
			c, err := lbcore.ParseConfig([]byte(job.Config))
			if err != nil {
				t.Fatal(err)
			}
			oracle := lbcore.NewBalancer(c, 0)
			services := map[string]string{}
			for _, s := range c.Services {
				services[s.Address] = s.Name
			}
			var got []string
			var phase *v8Line
			for _, l := range lines[job.Name] {
				switch l.Type {
				case "load", "start":
					if !l.OK {
						t.Fatalf("%s: %s%s", l.Type, l.Error, v8Logs(l))
					}
				case "trap":
					t.Fatalf("trap at connection %d in %s: %s%s", l.Request, l.Callback, l.Error, v8Logs(l))
				case "request":
					if problem := v8Connection(services, l.Outcome); problem != "" {
						t.Fatalf("connection %d: %s: %s", l.Request, problem, v8Show(l.Outcome))
					}
					got = append(got, l.Outcome.Upstream[0])
				case "phase":
					phase = &l
				}
			}
			if len(got) != v8TCPConns || phase == nil {
				t.Fatalf("%d connections reported (phase line %v), want %d", len(got), phase != nil, v8TCPConns)
			}
			for i := 0; i < len(conns); i += 3 {
				d := oracle.Decide(&lbcore.Request{Source: conns[i].Source, Dest: conns[i].Dest}, time.Time{})
				want := c.Services[d.At(0)].Address
				if got[i] != want || got[i+1] != want {
					t.Fatalf("%s → %s went to %s, then %s; lbcore ranks %s first", conns[i].Source, conns[i].Dest, got[i], got[i+1], want)
				}
				if c.LBMethod == lbcore.MethodSrcDestIPHash && got[i+2] != want {
					t.Fatalf("reverse flow %s → %s went to %s, the forward flow to %s", conns[i+2].Source, conns[i+2].Dest, got[i+2], want)
				}
			}
			var routed int64
			for _, s := range c.Services {
				if n := phase.Metrics["hashlb.service."+s.Name+".active"]; n != 0 {
					t.Errorf("hashlb.service.%s.active = %d after every connection closed, want 0", s.Name, n)
				}
				routed += phase.Metrics["hashlb.service."+s.Name+".requests"]
			}
			if routed != v8TCPConns {
				t.Errorf("the services counted %d connections, want %d (metrics %v)", routed, v8TCPConns, phase.Metrics)
			}
			t.Log(fmt.Sprintf("%d connections, %d ms", phase.Requests, phase.Ms))
		})
	}
}
