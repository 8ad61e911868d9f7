package envoy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/lbpolicy"
	"github.com/hashlb/hashlb/lbcore"
)

// TestLBPolicyShippedBootstrap starts configs/envoy-lbpolicy.yaml as
// shipped, with only its loopback ports moved, the module at dist/ of the
// working directory and Envoy started as the file's comment says
// (ENVOY_DYNAMIC_MODULES_SEARCH_PATH=dist), in every Envoy that loads the
// policy (1.38, 1.39, 1.40): `envoy --mode validate` accepts it; each request reaches the demo backend
// lbcore ranks first over the endpoints file's three hosts (names and the
// weight from it); renaming a new endpoints file onto the old one, as its
// comment says, takes a host out and moves only its keys.
func TestLBPolicyShippedBootstrap(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		mod := buildPolicy(t, "")
		bs := envoyrun.StartBackends(t, 3)
		dir := t.TempDir()
		ports := map[int]int{18081: bs[0].Port(), 18082: bs[1].Port(), 18083: bs[2].Port()}
		eds := envoyrun.Ports(t, envoyrun.ReadRepoFile(t, "configs/lbpolicy-endpoints.yaml"), ports)
		if err := os.MkdirAll(filepath.Join(dir, "configs"), 0o755); err != nil {
			t.Fatal(err)
		}
		edsPath := filepath.Join(dir, "configs", "lbpolicy-endpoints.yaml")
		if err := os.WriteFile(edsPath, eds, 0o644); err != nil {
			t.Fatal(err)
		}
		// --mode validate loads the module too: lib<name>.so in the search
		// path the file's comment gives, dist/ under the working directory.
		const run = "ENVOY_DYNAMIC_MODULES_SEARCH_PATH=dist envoy -c configs/envoy-lbpolicy.yaml"
		env := []string{strings.Fields(run)[0]}
		so := "lib" + envoyrun.LBPolicyName + ".so"
		if err := os.MkdirAll(filepath.Join(dir, "dist"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(mod, so), filepath.Join(dir, "dist", so)); err != nil {
			t.Fatal(err)
		}
		shipped := envoyrun.ReadRepoFile(t, "configs/envoy-lbpolicy.yaml")
		if !strings.Contains(string(shipped), "#   "+run) {
			t.Fatalf("configs/envoy-lbpolicy.yaml no longer says how to start it (%q)", run)
		}
		yaml := envoyrun.Ports(t, shipped, map[int]int{9901: 0, 10000: 0})
		if err := envoyrun.ValidateEnv(bin, dir, yaml, env); err != nil {
			t.Fatal(err)
		}
		e := &policyEnvoy{Envoy: startEnvoy(t, bin, envoyrun.Options{Bootstrap: yaml, Dir: dir, Concurrency: 4, Env: env})}
		e.addr = e.MustListener(t, "main")
		e.waitHosts(t, "hashlb_hosts", 3, 0)

		// The shipped policy configuration and the endpoints as services.
		pol := between(t, string(yaml), "value: |\n", "\n")
		p, err := lbpolicy.ParseConfig([]byte(pol))
		if err != nil {
			t.Fatal(err)
		}
		svcs := []lbcore.Service{
			{Name: "b1", HashID: "b1", Address: bs[0].Addr, Enabled: true},
			{Name: "b2", HashID: "b2", Address: bs[1].Addr, Enabled: true},
			{Name: "b3", HashID: "b3", Address: bs[2].Addr, Weight: 2, Enabled: true},
		}
		oracle := func(svcs []lbcore.Service) func(string) string {
			c, err := p.Config.WithServices(svcs)
			if err != nil {
				t.Fatal(err)
			}
			b := lbcore.NewBalancer(c, 0)
			return func(path string) string {
				r := lbcore.Request{Target: path, Authority: "example.com", Method: "GET"}
				d := b.Decide(&r, corpus.Now)
				return c.Services[d.At(0)].Name
			}
		}
		want := oracle(append([]lbcore.Service(nil), svcs...))
		before := map[string]string{}
		for i := range 60 {
			path := fmt.Sprintf("/cart/%d", i)
			got, st := e.get(t, "", [][2]string{{":path", path}})
			if st != 200 || got != want(path) {
				t.Fatalf("%s: %d from %s, lbcore's choice is %s", path, st, got, want(path))
			}
			before[path] = got
		}

		// Take b2 out: a new file renamed onto the old one.
		mark := len(e.Log())
		cut := string(eds)
		i := strings.Index(cut, fmt.Sprintf("port_value: %d", bs[1].Port()))
		start := strings.LastIndex(cut[:i], "    - endpoint:")
		end := strings.Index(cut[i:], "    - endpoint:") + i
		cut = cut[:start] + cut[end:]
		if err := os.WriteFile(edsPath+".new", []byte(cut), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(edsPath+".new", edsPath); err != nil {
			t.Fatal(err)
		}
		e.waitHosts(t, "hashlb_hosts", 2, mark)
		want = oracle([]lbcore.Service{svcs[0], svcs[2]})
		for path, was := range before {
			got, st := e.get(t, "", [][2]string{{":path", path}})
			if st != 200 || got != want(path) {
				t.Fatalf("%s after b2 left: %d from %s, lbcore's choice is %s", path, st, got, want(path))
			}
			if was != "b2" && got != was {
				t.Fatalf("%s moved from %s to %s; only b2's keys may move", path, was, got)
			}
		}
	})
}

// between is the text of s after the first from, up to the next to.
func between(t testing.TB, s, from, to string) string {
	t.Helper()
	i := strings.Index(s, from)
	if i < 0 {
		t.Fatalf("no %q", from)
	}
	s = s[i+len(from):]
	if j := strings.Index(s, to); j >= 0 {
		s = s[:j]
	}
	return strings.TrimSpace(s)
}
