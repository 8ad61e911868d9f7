package envoy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

var (
	cliOnce sync.Once
	cliBin  string
	cliErr  error
)

// hashlbCLI builds cmd/hashlb once and returns its path.
func hashlbCLI(t testing.TB) string {
	t.Helper()
	cliOnce.Do(func() {
		root, err := envoyrun.RepoRoot()
		if err != nil {
			cliErr = err
			return
		}
		dir, err := os.MkdirTemp("", "hashlb-cli")
		if err != nil {
			cliErr = err
			return
		}
		cliBin = filepath.Join(dir, "hashlb")
		cmd := exec.Command("go", "build", "-trimpath", "-o", cliBin, "./cmd/hashlb")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			cliErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if cliErr != nil {
		t.Fatalf("building hashlb: %v", cliErr)
	}
	return cliBin
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
