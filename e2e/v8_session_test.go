package e2e

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/hashlb/hashlb/internal/hostile"
)

// TestV8Session: session cookies in V8 under both profiles, through
// hashlbv8.mjs's cookie jar: 200 clients (x-v8-client) of a round-robin
// configuration send 10 requests each; the first gets a Set-Cookie, each
// later one carries it and is served by the same service with nothing set
// (the script reports "moved" otherwise), and the VM never traps.
func TestV8Session(t *testing.T) {
	rig := newV8Rig(t, "")
	const clients, rounds = 200, 10
	var reqs []hostile.Request
	for c := range clients {
		reqs = append(reqs, hostile.Request{Class: "session", Source: "10.1.0.1:5000", Dest: "10.0.0.100:80",
			Headers: [][2]string{{":method", "GET"}, {":path", fmt.Sprintf("/c/%d", c)}, {":authority", "shop.example"},
				{"x-v8-client", fmt.Sprint(c)}, {"cookie", "theme=dark"}}})
	}
	phases, err := json.Marshal([]v8Phase{{Name: "clients", Requests: reqs}})
	if err != nil {
		t.Fatal(err)
	}
	config := `{"lbMethod": "ROUNDROBIN", "session": {"type": "cookie", "idleTimeout": "10m"},
	  "services": [{"name": "a", "address": "10.0.0.1:80"}, {"name": "b", "address": "10.0.0.2:80"},
	    {"name": "c", "address": "10.0.0.3:80"}, {"name": "d", "address": "10.0.0.4:80"}]}`
	var jobs []v8Job
	for _, profile := range []string{"envoy-1.33", "envoy-1.39"} {
		jobs = append(jobs, v8Job{Name: profile, Profile: profile, Config: config, RootID: "hashlb", Repeat: clients * rounds,
			BudgetMs: int(v8PhaseBudget().Milliseconds()), Env: v8Env, SessionCookie: "hashlb-session"})
	}
	results := rig.run(t, "jobs.json", v8JobFile{Defaults: v8Job{Phases: phases}, Jobs: jobs})
	for _, j := range jobs {
		got := map[string]int{}
		for _, l := range results[j.Name] {
			switch l.Type {
			case "trap":
				t.Errorf("%s: trap in %s: %s", j.Name, l.Callback, l.Error)
			case "class":
				for _, o := range l.Outcomes {
					got[o.Session] += o.Count
					if o.Local != nil || len(o.Service) != 1 {
						t.Errorf("%s: outcome %+v: want one service", j.Name, o)
					}
				}
			}
		}
		want := map[string]int{"issued": clients, "kept": clients * (rounds - 1)}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: sessions %v, want %v (no client moved, no valid session re-issued)", j.Name, got, want)
		}
		t.Logf("%s: %v", j.Name, got)
	}
}
