package hostsim

import (
	"context"
	"strings"
	"testing"
)

func TestLoadRefusals(t *testing.T) {
	tests := []struct {
		name, module, profile, want string
	}{
		{"unknown ABI marker", "noabi", "", "Missing or unknown Proxy-Wasm ABI version"},
		{"Higress-only import", "missingimport", "", "Failed to load Wasm module due to a missing import: env.proxy_set_upstream_override_host"},
		{"Higress-only import 1.39", "missingimport", ProfileEnvoy139, "Failed to load Wasm module due to a missing import: env.proxy_set_upstream_override_host"},
		{"poll_oneoff in _initialize 1.33", "pollinit", ProfileEnvoy133, "restricted_callback: wasi_snapshot_preview1.poll_oneoff"},
		{"unknown profile", "basic", "envoy-9", `unknown profile "envoy-9"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(context.Background(), module(t, tc.module), Config{Profile: tc.profile})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New(%s) = %v, want an error containing %q", tc.module, err, tc.want)
			}
		})
	}
}

func TestPollOneoffDuringInitializeAllowedIn139(t *testing.T) {
	h := newHost(t, "pollinit", Config{Profile: ProfileEnvoy139})
	if got := h.LogsAt(LogInfo); len(got) == 0 || got[0] != "poll_oneoff 0 nevents 0" {
		t.Fatalf("info logs = %q, want poll_oneoff 0 nevents 0 first", got)
	}
}

func TestDisallowedCallDuringAllocationTraps(t *testing.T) {
	for _, prof := range Profiles() {
		t.Run(prof, func(t *testing.T) {
			h := newHost(t, "allocbad", Config{Profile: prof})
			s := h.Stream(0)
			res := s.RequestHeaders([][2]string{{":path", "/"}}, nil)
			if res.Err == nil || !strings.Contains(res.Err.Error(), "restricted_callback: wasi_snapshot_preview1.sched_yield") {
				t.Fatalf("RequestHeaders err = %v, want restricted_callback sched_yield", res.Err)
			}
			if res.LocalReply == nil || res.LocalReply.Status != 503 {
				t.Fatalf("RequestHeaders local reply = %+v, want fail-closed 503", res.LocalReply)
			}
			if h.Err(0) == nil {
				t.Fatalf("Err(0) = nil, want the VM dead")
			}
			again := h.Stream(0).RequestHeaders([][2]string{{":path", "/"}}, nil)
			if again.LocalReply == nil || again.LocalReply.Status != 503 {
				t.Fatalf("second request on dead VM = %+v, want 503", again)
			}
		})
	}
}

func TestFailOpenPassesThrough(t *testing.T) {
	h := newHost(t, "allocbad", Config{FailOpen: true})
	h.Stream(0).RequestHeaders(nil, nil)
	in := [][2]string{{":path", "/x"}}
	res := h.Stream(0).RequestHeaders(in, nil)
	if res.Err == nil || res.LocalReply != nil || res.Action != ActionContinue {
		t.Fatalf("fail-open result = %+v, want pass-through with Err", res)
	}
	if p, _ := res.Header(":path"); p != "/x" {
		t.Fatalf("fail-open :path = %q, want /x", p)
	}
}

// TestProcExitLogsAndReturns pins Envoy's proc_exit: it logs and returns, and
// Go's os.Exit then simply returns too, so the request goes on and the VM
// lives. hostsim reports the call through Exited.
func TestProcExitLogsAndReturns(t *testing.T) {
	h := newHost(t, "procexit", Config{})
	res := h.Stream(0).RequestHeaders([][2]string{{":path", "/"}}, nil)
	if res.Err != nil || res.Action != ActionContinue {
		t.Fatalf("RequestHeaders after os.Exit = %+v, want Continue on a live VM", res)
	}
	if got := h.LogsAt(LogError); len(got) != 1 || got[0] != "wasi_unstable proc_exit" {
		t.Fatalf("error logs = %q, want [wasi_unstable proc_exit]", got)
	}
	if code, ok := h.Exited(0); !ok || code != 3 {
		t.Fatalf("Exited(0) = %d, %v, want 3, true", code, ok)
	}
}
