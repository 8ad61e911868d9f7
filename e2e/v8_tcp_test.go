package e2e

import (
	"encoding/json"
	"math/rand/v2"
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
// (e2e/v8/hashlbv8.mjs), under both profiles: under each connection hash
// method every connection goes to the service lbcore ranks first, through
// the ORIGINAL_DST filter state, and the same 5-tuple to the same service
// each time; SRCIPDESTIPHASH gives the reverse flow the same service; a
// service out of rotation moves only its own tuples; persistence keeps a
// client IP on its first service under LEASTCONNECTION; and after 10⁴
// connections, closed by the client or after the upstream ended, every
// active count is 0.
func TestV8TCP(t *testing.T) {
	rig := newV8Rig(t, "")

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
	// c out of rotation: the same ranking as a DOWN service (V8's host answers no health probe).
	disabledC := strings.Replace(string(tcpConfig("SRCIPSRCPORTHASH", "")), `"weight":2}`, `"weight":2,"enabled":false}`, 1)
	persistLC := string(tcpConfig("LEASTCONNECTION", `"persistence":{"keys":["${client.ip}"]}`))
	var jobs []v8Job
	for _, profile := range []string{"envoy-1.33", "envoy-1.39"} {
		for _, m := range methods {
			jobs = append(jobs, v8Job{Name: profile + "/" + m, Profile: profile, Config: string(tcpConfig(m, ""))})
		}
		jobs = append(jobs, v8Job{Name: profile + "/SRCIPSRCPORTHASH-c-down", Profile: profile, Config: disabledC},
			v8Job{Name: profile + "/LEASTCONNECTION-persistence", Profile: profile, Config: persistLC})
	}
	for i := range jobs {
		jobs[i].RootID, jobs[i].Repeat, jobs[i].PerRequest, jobs[i].FinalTick = "hashlb", v8TCPConns, true, true
	}
	lines := rig.run(t, "jobs.json",
		v8JobFile{Defaults: v8Job{Phases: phases}, Jobs: jobs})
	if t.Failed() {
		return
	}
	results := map[string][]string{} // job → upstream of each connection
	for _, job := range jobs {
		t.Run(job.Name, func(t *testing.T) {
			c, err := lbcore.ParseConfig([]byte(job.Config))
			if err != nil {
				t.Fatal(err)
			}
			got := checkV8Connections(t, c, lines[job.Name])
			results[job.Name] = got
			oracle := lbcore.NewBalancer(c, 0)
			switch {
			case c.LBMethod.IsHash():
				// The same tuple each time, the service lbcore ranks first (c, when
				// disabled, never: its tuples go to their next-ranked service).
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
				for i := len(conns); i < len(got); i++ { // the later cycles through the tuples
					if got[i] != got[i%len(conns)] {
						t.Fatalf("connection %d (%s → %s) went to %s, the same tuple before to %s", i, conns[i%len(conns)].Source,
							conns[i%len(conns)].Dest, got[i], got[i%len(conns)])
					}
				}
			default:
				// Persistence on client.ip: every connection of one client IP, on its
				// first service, however the least-connection choice would go.
				first := map[string]string{}
				for i, a := range got {
					ip, _, _ := strings.Cut(conns[i%len(conns)].Source, ":")
					if f, ok := first[ip]; ok && f != a {
						t.Fatalf("connection %d from %s went to %s, the client's first to %s", i, conns[i%len(conns)].Source, a, f)
					}
					first[ip] = a
				}
			}
		})
	}
	// The service out of rotation moved only its own tuples.
	for _, profile := range []string{"envoy-1.33", "envoy-1.39"} {
		all, down := results[profile+"/SRCIPSRCPORTHASH"], results[profile+"/SRCIPSRCPORTHASH-c-down"]
		if len(all) == 0 || len(down) == 0 {
			continue // reported above
		}
		moved := 0
		for i := range all {
			switch {
			case all[i] == "10.1.0.3:443":
				moved++
			case down[i] != all[i]:
				t.Errorf("%s: %s → %s moved from %s to %s although only c went out", profile, conns[i%len(conns)].Source,
					conns[i%len(conns)].Dest, all[i], down[i])
			}
		}
		if moved == 0 {
			t.Errorf("%s: no connection was on c", profile)
		}
	}
}

// checkV8Connections checks one TestV8TCP job's output: it loaded and
// started, nothing trapped, each connection went to one configured service,
// and after the last close (and a tick) every active count is 0. It returns
// each connection's upstream, in order.
func checkV8Connections(t *testing.T, c *lbcore.Config, lines []v8Line) []string {
	t.Helper()
	services := map[string]string{}
	for _, s := range c.Services {
		services[s.Address] = s.Name
	}
	var got []string
	var phase *v8Line
	for _, l := range lines {
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
	t.Logf("%d connections, %d ms", phase.Requests, phase.Ms)
	return got
}
