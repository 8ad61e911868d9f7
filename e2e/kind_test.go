package e2e

// A plugin Envoy runs as the other filter kind than its filterType names
// (configs/tcp.json in envoy.filters.http.wasm, configs/demo.json in
// envoy.filters.network.wasm) answers every request with a 503, or closes
// every connection, and logs why once per worker: never a trap. Under
// hostsim and in V8 with Envoy's host.

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/internal/hostile"
)

const (
	wrongKindHTTPLog = "filterType network, but Envoy runs this plugin as an HTTP filter (envoy.filters.http.wasm)"
	wrongKindTCPLog  = "filterType http, but Envoy runs this plugin as a network filter (envoy.filters.network.wasm)"
)

func TestWrongFilterKind(t *testing.T) {
	const workers, perWorker = 2, 3
	tests := []struct {
		name, config string
		network      bool // Envoy runs it as a network filter
		log          string
	}{
		{name: "network configuration in an HTTP filter", config: "configs/tcp.json", log: wrongKindHTTPLog},
		{name: "HTTP configuration in a network filter", config: "configs/demo.json", network: true, log: wrongKindTCPLog},
		{name: "network configuration in a network filter", config: "configs/tcp.json", network: true},
		{name: "HTTP configuration in an HTTP filter", config: "configs/demo.json"},
	}
	for _, profile := range []string{hostsim.ProfileEnvoy133, hostsim.ProfileEnvoy139} {
		for _, tt := range tests {
			t.Run(profile+"/"+tt.name, func(t *testing.T) {
				h, err := hostsim.New(context.Background(), module(t), hostsim.Config{
					Workers: workers, Profile: profile, PluginConfig: readRepoFile(t, tt.config), LogLevel: hostsim.LogInfo,
				})
				if err != nil {
					t.Fatal(err)
				}
				defer h.Close(context.Background())
				for w := range workers {
					for i := range perWorker {
						if tt.network {
							c := h.Conn(w)
							r := c.NewConnection(map[string][]byte{
								"source.address":      hostsim.PropString("192.0.2.7:4000" + string(rune('0'+i))),
								"destination.address": hostsim.PropString("198.51.100.1:5432"),
							})
							switch {
							case r.Err != nil:
								t.Fatalf("worker %d, connection %d: %v", w, i, r.Err)
							case tt.log != "" && (r.Routed() || !r.Closed):
								t.Fatalf("worker %d, connection %d: %+v, want it closed and held", w, i, r)
							case tt.log == "" && !r.Routed():
								t.Fatalf("worker %d, connection %d: %+v, want it routed", w, i, r)
							}
							if err := c.Close(hostsim.PeerRemote); err != nil {
								t.Fatal(err)
							}
							continue
						}
						s := h.Stream(w)
						r := s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/x"}, {":authority", "example.com"}},
							map[string][]byte{"source.address": hostsim.PropString("192.0.2.7:40000")})
						switch {
						case r.Err != nil:
							t.Fatalf("worker %d, request %d: %v", w, i, r.Err)
						case tt.log != "" && (r.LocalReply == nil || r.LocalReply.Status != 503):
							t.Fatalf("worker %d, request %d: %+v, want a local 503", w, i, r)
						case tt.log == "" && r.LocalReply != nil:
							t.Fatalf("worker %d, request %d: local reply %d, want it routed", w, i, r.LocalReply.Status)
						}
						if err := s.Finish(); err != nil {
							t.Fatal(err)
						}
					}
					if err := h.Err(w); err != nil {
						t.Fatalf("worker %d died: %v", w, err)
					}
				}
				var logged []string
				for _, e := range h.Logs() {
					if e.Level == hostsim.LogError {
						logged = append(logged, e.Message)
					}
				}
				want := 0
				if tt.log != "" {
					want = workers
				}
				n := 0
				for _, m := range logged {
					if strings.Contains(m, tt.log) && tt.log != "" {
						n++
					}
				}
				if len(logged) != want || n != want {
					t.Errorf("error logs %q, want %d lines saying %q (one per worker)", logged, want, tt.log)
				}
			})
		}
	}
}

// TestV8WrongFilterKind: the same in Node's V8 with Envoy's host
// (e2e/v8/hashlbv8.mjs), both profiles.
func TestV8WrongFilterKind(t *testing.T) {
	rig := newV8Rig(t, "")
	reqs := []hostile.Request{{Class: "plain", Headers: [][2]string{{":method", "GET"}, {":path", "/x"}, {":authority", "example.com"}},
		Source: "192.0.2.7:40000", Dest: "198.51.100.1:5432"}}
	phases, err := json.Marshal([]v8Phase{{Name: "wrong-kind", Requests: reqs}})
	if err != nil {
		t.Fatal(err)
	}
	var jobs []v8Job
	for _, profile := range []string{"envoy-1.33", "envoy-1.39"} {
		jobs = append(jobs,
			v8Job{Name: profile + "/tcp.json-as-http", Profile: profile, Config: string(readRepoFile(t, "configs/tcp.json")), Filter: "http"},
			v8Job{Name: profile + "/demo.json-as-network", Profile: profile, Config: string(readRepoFile(t, "configs/demo.json")), Filter: "network"})
	}
	for i := range jobs {
		jobs[i].RootID, jobs[i].Repeat, jobs[i].PerRequest = "hashlb", 1000, true
	}
	lines := rig.run(t, "jobs.json",
		v8JobFile{Defaults: v8Job{Phases: phases}, Jobs: jobs})
	for _, job := range jobs {
		t.Run(job.Name, func(t *testing.T) {
			http := job.Filter == "http"
			var requests int
			var errorLogs []string
			for _, l := range lines[job.Name] {
				switch {
				case l.Type == "trap":
					t.Fatalf("trapped in %s: %s", l.Callback, l.Error)
				case l.Type == "phase":
					requests, errorLogs = l.Requests, l.ErrorLogs
				case l.Outcome != nil:
					o := l.Outcome
					if http && (o.Local == nil || o.Local.Status != 503 || len(o.Upstream) > 0) {
						t.Fatalf("request %d: %s, want a local 503 and no upstream", l.Request, v8Show(o))
					}
					if !http && (o.Closed == 0 || len(o.Upstream) > 0) {
						t.Fatalf("connection %d: %s, want it closed with no filter state", l.Request, v8Show(o))
					}
				}
			}
			if requests != job.Repeat {
				t.Errorf("ran %d requests, want %d", requests, job.Repeat)
			}
			want := wrongKindTCPLog
			if http {
				want = wrongKindHTTPLog
			}
			if len(errorLogs) != 1 || !strings.Contains(errorLogs[0], want) {
				t.Errorf("error logs %q, want one saying %q", errorLogs, want)
			}
		})
	}
}
