package e2e

// hashlb-proxy refuses a configuration before anything listens: the module
// checks it first (its own errors, as Envoy would log them), then the demo
// checks what it must host (the filter kind against -tcp, an etcd for a
// fleet cluster, loopback backends). -backends-only starts the demo backends
// alone, for a real Envoy in front.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/fleettest"
)

func TestProxyRefusesBeforeListening(t *testing.T) {
	bin := buildProxy(t)
	wasmFile := tempFile(t, "hashlb.wasm", module(t))
	a, b := fleettest.FreeAddr(t), fleettest.FreeAddr(t)
	tests := []struct {
		name   string
		config string
		args   []string
		want   []string // parts of stderr
	}{
		{name: "duplicate address", config: fmt.Sprintf(`{"services": [{"name": "b1", "address": %q}, {"name": "b2", "address": %q}]}`, a, a),
			want: []string{"the module refused the configuration", fmt.Sprintf(`services[1].address: %q is already used by services[0]`, a)}},
		{name: "misspelt field", config: fmt.Sprintf(`{"services": [{"name": "b1", "adress": %q}]}`, a),
			want: []string{"services[0].adress: unknown field"}},
		{name: "syntax error", config: fmt.Sprintf("{\n  \"services\": [{\"name\": \"b1\", \"address\": %q}],\n}", a),
			want: []string{"line 3, column 1"}},
		{name: "network configuration over HTTP", config: fmt.Sprintf(`{"filterType": "network", "lbMethod": "SOURCEIPHASH", "services": [{"name": "b1", "address": %q}]}`, a),
			want: []string{"filterType network is a network filter's configuration: serve it with -tcp ADDR"}},
		{name: "HTTP configuration over TCP", config: fmt.Sprintf(`{"services": [{"name": "b1", "address": %q}]}`, a), args: []string{"-tcp", b},
			want: []string{`an HTTP filter's configuration (filterType "http"): -tcp serves a network filter`}},
		{name: "fleet without etcd", config: fmt.Sprintf(`{"persistence": {"keys": ["${client.ip}"], "fleet": {"cluster": "etcd"}}, "services": [{"name": "b1", "address": %q}]}`, a),
			args: []string{"-fleet", "2"},
			want: []string{`persistence.fleet.cluster "etcd" reaches no etcd: add -etcd (an etcd server in process) or -cluster etcd=HOST:PORT`}},
		{name: "backend off loopback", config: `{"services": [{"name": "b1", "address": "192.0.2.1:80"}]}`,
			want: []string{"demo backend b1: 192.0.2.1:80 is not a loopback address; the demo backends bind loopback only"}},
		{name: "backends-only, bad configuration", config: fmt.Sprintf(`{"services": [{"name": "b1", "address": %q, "weight": 101}]}`, a),
			args: []string{"-backends-only"}, want: []string{"services[0].weight: 101 is out of range [0, 100]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfgFile := tempFile(t, "config.json", []byte(tt.config))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append([]string{"-wasm", wasmFile, "-config", cfgFile, "-listen", b}, tt.args...)...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("hashlb-proxy %v exited 0, want a refusal:\n%s", tt.args, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("hashlb-proxy %v printed\n%s\nwant it to say %q", tt.args, out, w)
				}
			}
			if strings.Contains(string(out), "demo backend b1 on") || strings.Contains(string(out), "hashlb-proxy: ") && strings.Contains(string(out), " on http://") {
				t.Errorf("hashlb-proxy %v listened before refusing:\n%s", tt.args, out)
			}
		})
	}
}

// TestProxyBackendsOnly: -backends-only starts one demo backend per service
// (HTTP, or TCP for a network configuration) and no proxy.
func TestProxyBackendsOnly(t *testing.T) {
	bin := buildProxy(t)
	wasmFile := tempFile(t, "hashlb.wasm", module(t))
	for _, kind := range []string{"http", "network"} {
		t.Run(kind, func(t *testing.T) {
			a1, a2 := fleettest.FreeAddr(t), fleettest.FreeAddr(t)
			cfg := fmt.Sprintf(`{"filterType": %q, "lbMethod": "SOURCEIPHASH", "services": [{"name": "b1", "address": %q}, {"name": "b2", "address": %q}]}`, kind, a1, a2)
			cfgFile := tempFile(t, "config.json", []byte(cfg))
			cmd := exec.Command(bin, "-wasm", wasmFile, "-config", cfgFile, "-backends-only")
			cmd.Stderr = os.Stderr
			ready := startWatched(t, cmd, func(line string) bool { return strings.Contains(line, "demo backends of") })
			select {
			case line, ok := <-ready:
				if !ok {
					t.Fatal("hashlb-proxy -backends-only exited before its backends were up")
				}
				if !strings.Contains(line, "no proxy") {
					t.Errorf("hashlb-proxy -backends-only printed %q, want it to say there is no proxy", line)
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("hashlb-proxy -backends-only: no backends within 2 minutes")
			}
			for i, addr := range []string{a1, a2} {
				name := fmt.Sprintf("b%d", i+1)
				var got string
				if kind == "http" {
					resp, err := http.Get("http://" + addr + "/x")
					if err != nil {
						t.Fatalf("GET %s: %v", addr, err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					got = string(b)
				} else {
					c, err := net.DialTimeout("tcp", addr, 5*time.Second)
					if err != nil {
						t.Fatalf("dial %s: %v", addr, err)
					}
					b, _ := io.ReadAll(c)
					c.Close()
					got = string(b)
				}
				if !strings.HasPrefix(got, "backend "+name) {
					t.Errorf("backend on %s answered %q, want backend %s", addr, got, name)
				}
			}
		})
	}
}
