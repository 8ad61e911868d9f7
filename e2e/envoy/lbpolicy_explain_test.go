package envoy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// hashlbCLI builds cmd/hashlb once and returns its path.
func hashlbCLI(t testing.TB) string {
	t.Helper()
	return built(t, envoyrun.BuildCommand, "./cmd/hashlb")
}

// TestLBPolicyExplain: for every :path of the request corpus, the backend
// a real Envoy reaches through the policy is the one "hashlb explain" names
// for the same bootstrap and EDS file (hosts with LB weights, names and a
// hashId in endpoint metadata): an operator's explanation is what Envoy
// does.
func TestLBPolicyExplain(t *testing.T) {
	cli := hashlbCLI(t)
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		eps := corpusEndpoints(t)
		cs := []policyCluster{
			{name: "urlhash", config: `{"lbMethod":"URLHASH","hashLength":40}`, eps: eps},
			{name: "pathtoken", config: `{"lbMethod":"TOKEN","token":"${request.path | prefix(6)}","backupLBMethod":"ROUNDROBIN"}`, eps: eps},
		}
		e := startPolicy(t, bin, cs)
		// The bootstrap Envoy runs, with its EDS files, for hashlb to read.
		dir := t.TempDir()
		boot := filepath.Join(dir, "envoy.yaml")
		if err := os.WriteFile(boot, policyYAML(t, dir, cs), 0o644); err != nil {
			t.Fatal(err)
		}
		reqs := corpus.AsEnvoyDecodes(corpus.Requests(corpusPerConfig))
		for _, c := range cs {
			seen := map[string]int{}
			for _, r := range reqs {
				w := toWire(r, []string{e.addr, e.addr, e.addr, e.addr})
				hs := [][2]string{{":method", "GET"}, {":path", w.target}, {":authority", w.host}}
				got, status := e.get(t, c.name, hs)
				if status != 200 {
					t.Fatalf("%s: %v: status %d", c.name, hs, status)
				}
				var path string
				for _, h := range w.seen("").Headers {
					if h[0] == ":path" {
						path = h[1]
					}
				}
				out, err := exec.Command(cli, "explain", boot, "-config", "cluster "+c.name+",", "-url", path, "-json").Output()
				if err != nil {
					t.Fatalf("hashlb explain -url %q: %v\n%s", path, err, out)
				}
				var rep struct {
					Chosen    *struct{ Name string } `json:"chosen"`
					DecidedBy string                 `json:"decidedBy"`
				}
				if err := json.Unmarshal(out, &rep); err != nil || rep.Chosen == nil {
					t.Fatalf("hashlb explain -url %q: %v\n%s", path, err, out)
				}
				if rep.DecidedBy == "ROUNDROBIN" {
					continue // the worker's turn, not the request's: no one answer
				}
				seen[got]++
				if got != rep.Chosen.Name {
					t.Errorf("%s: :path %q reached %s through Envoy %s; hashlb explain says %s", c.name, path, got, bin.Version, rep.Chosen.Name)
				}
			}
			if len(seen) < 3 {
				t.Errorf("%s: the corpus reached %v only: want a spread", c.name, seen)
			}
			t.Logf("%s: %v", c.name, seen)
		}
	})
}

// TestLBPolicyShippedExplain runs configs/envoy-lbpolicy.yaml and its
// endpoints file as shipped (loopback ports moved, the module at dist/ of
// the working directory) and, from Envoy's working directory as an operator
// would, "hashlb explain envoy-lbpolicy.yaml -url P" for every :path of the
// request corpus: it names the backend Envoy reached.
func TestLBPolicyShippedExplain(t *testing.T) {
	cli := hashlbCLI(t)
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		mod := buildPolicy(t, "")
		bs := envoyrun.StartBackends(t, 3)
		dir := t.TempDir()
		for _, d := range []string{"configs", "dist"} {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		ports := map[int]int{18081: bs[0].Port(), 18082: bs[1].Port(), 18083: bs[2].Port()}
		eds := envoyrun.Ports(t, envoyrun.ReadRepoFile(t, "configs/lbpolicy-endpoints.yaml"), ports)
		if err := os.WriteFile(filepath.Join(dir, "configs", "lbpolicy-endpoints.yaml"), eds, 0o644); err != nil {
			t.Fatal(err)
		}
		so := "lib" + envoyrun.LBPolicyName + ".so"
		if err := os.Symlink(filepath.Join(mod, so), filepath.Join(dir, "dist", so)); err != nil {
			t.Fatal(err)
		}
		yaml := envoyrun.Ports(t, envoyrun.ReadRepoFile(t, "configs/envoy-lbpolicy.yaml"), map[int]int{9901: 0, 10000: 0})
		if err := os.WriteFile(filepath.Join(dir, "envoy-lbpolicy.yaml"), yaml, 0o644); err != nil {
			t.Fatal(err)
		}
		// Run as the shipped file says: ENVOY_DYNAMIC_MODULES_SEARCH_PATH=dist.
		e := &policyEnvoy{Envoy: startEnvoy(t, bin, envoyrun.Options{Bootstrap: yaml, Dir: dir, Concurrency: 4,
			Env: []string{"ENVOY_DYNAMIC_MODULES_SEARCH_PATH=dist"}})}
		e.addr = e.MustListener(t, "main")
		e.waitHosts(t, "hashlb_hosts", 3, 0)

		check := exec.Command(cli, "check", "envoy-lbpolicy.yaml")
		check.Dir = dir
		if out, err := check.CombinedOutput(); err != nil {
			t.Fatalf("hashlb check envoy-lbpolicy.yaml: %v\n%s", err, out)
		}
		seen := map[string]int{}
		for _, r := range corpus.AsEnvoyDecodes(corpus.Requests(corpusPerConfig)) {
			w := toWire(r, []string{e.addr, e.addr, e.addr, e.addr})
			got, status := e.get(t, "", [][2]string{{":method", "GET"}, {":path", w.target}, {":authority", w.host}})
			if status != 200 {
				t.Fatalf("%s: status %d", w.target, status)
			}
			var path string
			for _, h := range w.seen("").Headers {
				if h[0] == ":path" {
					path = h[1]
				}
			}
			cmd := exec.Command(cli, "explain", "envoy-lbpolicy.yaml", "-url", path, "-json")
			cmd.Dir = dir
			out, err := cmd.Output()
			var rep struct {
				Chosen *struct{ Name string } `json:"chosen"`
			}
			if err != nil || json.Unmarshal(out, &rep) != nil || rep.Chosen == nil {
				t.Fatalf("hashlb explain -url %q: %v\n%s", path, err, out)
			}
			seen[got]++
			if got != rep.Chosen.Name {
				t.Errorf(":path %q reached %s through Envoy %s; hashlb explain says %s", path, got, bin.Version, rep.Chosen.Name)
			}
		}
		if len(seen) != 3 {
			t.Errorf("the corpus reached %v: want all three backends", seen)
		}
		t.Logf("%v", seen)
	})
}
