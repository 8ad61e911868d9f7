package envoy

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/lbcore"
)

// bootstrapCase is one shipped Envoy bootstrap and how to run it: the
// substitutions it needs (ports, the ECDS file, etcd) and the request that
// must be answered through hashlb.
type bootstrapCase struct {
	file string
	run  func(t *testing.T, bin envoyrun.Binary, file []byte) // nil: another test starts it
}

// bootstrapCases covers every Envoy bootstrap the repository ships;
// TestBootstrapsAreAllCovered fails when a new one has no case here.
var bootstrapCases = []bootstrapCase{
	// TestEnvoyYAMLAnswersAsTheReadme (demo_envoy_test.go) validates and starts
	// envoy.yaml as shipped and sends the README's requests.
	{"envoy.yaml", nil},
	{"configs/envoy-fleet.yaml", bootstrapFleet},
	{"configs/envoy-original-dst.yaml", bootstrapHTTP},
	{"configs/envoy-ecds.yaml", bootstrapECDS},
	{"configs/envoy-tcp.yaml", bootstrapTCP},
	// TestLBPolicyShippedBootstrap (lbpolicy_bootstrap_test.go) starts it in
	// Envoy 1.38, 1.39 and 1.40, which alone can load the policy.
	{"configs/envoy-lbpolicy.yaml", nil},
	// Its policy configuration runs in three Envoys over a three-member etcd
	// (TestLBPolicyFleet, lbpolicy_fleet_test.go, Envoy 1.38 to 1.40); the
	// rest of it is configs/envoy-lbpolicy.yaml's (e2e's
	// TestLBPolicyFleetBootstrapShape), which TestLBPolicyShippedBootstrap
	// starts.
	{"configs/envoy-lbpolicy-fleet.yaml", nil},
}

// TestBootstrapsStart starts each shipped bootstrap as written, with only
// its loopback ports (and the ECDS file path, etcd's port) moved, in both
// Envoy versions: `envoy --mode validate` accepts it, and a real start
// answers through hashlb as lbcore says: an HTTP request reaches the echo
// backend lbcore ranks first, carrying the x-hashlb-service header hashlb
// wrote; a TCP connection reaches the backend lbcore picks for its source
// address, and data goes both ways.
func TestBootstrapsStart(t *testing.T) {
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		for _, c := range bootstrapCases {
			if c.run == nil {
				continue
			}
			t.Run(strings.ReplaceAll(c.file, "/", "_"), func(t *testing.T) {
				t.Parallel()
				c.run(t, bin, envoyrun.ReadRepoFile(t, c.file))
			})
		}
	})
}

// TestBootstrapsAreAllCovered: every YAML file of the repository root,
// configs/ and configs/istio/ (and two levels of its directories, such as
// configs/istio/trafficextension/tcp/) that is an Envoy bootstrap (a
// top-level static_resources) has a case in bootstrapCases, and every case
// is such a file. Istio's files are custom resources, not bootstraps.
func TestBootstrapsAreAllCovered(t *testing.T) {
	root, err := envoyrun.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, pat := range []string{"*.yaml", "configs/*.yaml", "configs/istio/*.yaml", "configs/istio/*/*.yaml", "configs/istio/*/*/*.yaml"} {
		files, _ := filepath.Glob(filepath.Join(root, pat))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if bootstrapRE.Match(b) {
				rel, _ := filepath.Rel(root, f)
				found = append(found, rel)
			}
		}
	}
	var cased []string
	for _, c := range bootstrapCases {
		cased = append(cased, c.file)
	}
	slices.Sort(found)
	slices.Sort(cased)
	if !slices.Equal(found, cased) {
		t.Errorf("Envoy bootstraps in the repository: %v; with a case in bootstrapCases: %v", found, cased)
	}
}

var bootstrapRE = regexp.MustCompile(`(?m)^static_resources:`)

// bootstrapHTTPPorts moves the ports every HTTP bootstrap uses: the admin
// and listener to ones the kernel picks, the three demo backends to bs.
func bootstrapHTTPPorts(bs []*envoyrun.Backend) map[int]int {
	return map[int]int{9901: 0, 10000: 0, 18081: bs[0].Port(), 18082: bs[1].Port(), 18083: bs[2].Port()}
}

// bootstrapHTTP runs an HTTP bootstrap with its plugin configuration inline
// (configs/envoy-original-dst.yaml; envoy.yaml would run the same).
func bootstrapHTTP(t *testing.T, bin envoyrun.Binary, file []byte) {
	bs := envoyrun.StartBackends(t, 3)
	yaml := envoyrun.Ports(t, file, bootstrapHTTPPorts(bs))
	e := bootstrapStart(t, bin, envoyrun.WorkDir(t), yaml)
	bootstrapAsk(t, e, pluginConfigs(t, yaml)[0], "", 8)
}

// bootstrapFleet runs configs/envoy-fleet.yaml against a real etcd: plain
// requests as envoy.yaml's, and a request with a client id is served and
// leaves its key in etcd.
func bootstrapFleet(t *testing.T, bin envoyrun.Binary, file []byte) {
	etcd := startFleetEtcd(t)
	bs := envoyrun.StartBackends(t, 3)
	ports := bootstrapHTTPPorts(bs)
	ports[2379] = fleetPort(etcd.client)
	yaml := envoyrun.Ports(t, file, ports)
	e := bootstrapStart(t, bin, envoyrun.WorkDir(t), yaml)
	cfg := pluginConfigs(t, yaml)[0]
	bootstrapAsk(t, e, cfg, "", 4)
	bootstrapAsk(t, e, cfg, "alice", 1)
	keys, err := etcd.keys("/hashlb/")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Errorf("etcd holds %v under /hashlb/ after one client id, want one key", keys)
	}
}

// bootstrapECDS runs configs/envoy-ecds.yaml: the Service's DNS name
// becomes 127.0.0.1 on one backend's port. `envoy --mode validate` takes it
// with the ECDS file the repository ships beside it
// (configs/ecds/demo_hashlb.json); the real start has that file replaced
// as hashlb-controller -ecds-dir configs/ecds replaces it, naming the one
// backend.
func bootstrapECDS(t *testing.T, bin envoyrun.Binary, file []byte) {
	b := envoyrun.StartBackend(t, "pod-a")
	yaml := envoyrun.Ports(t, file, map[int]int{9901: 0, 10000: 0, 8080: b.Port()})
	yaml = envoyrun.Replace(t, yaml, "address: hashlb-backends.demo.svc.cluster.local", "address: 127.0.0.1")
	dir := envoyrun.WorkDir(t)
	path := filepath.Join(dir, "configs", "ecds", "demo_hashlb.json")
	writeAtomic(t, path, envoyrun.ReadRepoFile(t, "configs/ecds/demo_hashlb.json"))
	if err := envoyrun.Validate(bin, dir, yaml); err != nil {
		t.Fatal(err)
	}
	// envoy.yaml's plugin configuration with the Service's one endpoint,
	// as the controller writes services (name, address, hashId).
	raw, err := json.Marshal(map[string]any{
		"lbMethod":       "URLHASH",
		"upstreamHeader": "x-envoy-original-dst-host",
		"upstreamCount":  1,
		"persistence":    map[string]any{"keys": []string{"${request.header.x-client-id}"}},
		"services":       []any{map[string]any{"name": "pod-a", "address": b.Addr, "hashId": "pod-a"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, path, ecdsFile(t, "hashlb", "", raw))
	e := envoyrun.Start(t, bin, envoyrun.Options{Bootstrap: yaml, Dir: dir})
	c, err := lbcore.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	bootstrapAsk(t, e, c, "", 3)
}

// bootstrapTCP runs configs/envoy-tcp.yaml in front of three TCP backends:
// each connection reaches the backend lbcore picks for its source address
// (SRCIPSRCPORTHASH) and is echoed.
func bootstrapTCP(t *testing.T, bin envoyrun.Binary, file []byte) {
	var bs []*envoyrun.TCPBackend
	for i := range 3 {
		bs = append(bs, envoyrun.StartTCPBackend(t, fmt.Sprintf("b%d", i+1)))
	}
	yaml := envoyrun.Ports(t, file, map[int]int{9901: 0, 10001: 0,
		19081: bs[0].Port(), 19082: bs[1].Port(), 19083: bs[2].Port()})
	e := bootstrapStart(t, bin, envoyrun.WorkDir(t), yaml)
	cfg := pluginConfigs(t, yaml)[0]
	addr := e.MustListener(t, "hashlb_tcp")
	seen := map[string]bool{}
	for i := range 12 {
		got, src, err := tcpEcho(addr, fmt.Sprintf("ping %d\n", i))
		if err != nil {
			t.Fatalf("connection %d through %s: %v", i, addr, err)
		}
		if want := oracle(cfg, lbcore.Request{Source: src, Dest: addr})[0]; got != want {
			t.Errorf("connection %d from %s reached %s, lbcore says %s", i, src, got, want)
		}
		seen[got] = true
	}
	if len(seen) < 2 {
		t.Errorf("12 connections from distinct source ports all reached %v: the hash is not steering", seen)
	}
}

// bootstrapStart validates yaml with envoy --mode validate, as a user of a
// shipped file would, and starts it. Other tests start their bootstraps
// without it: validating compiles the module as starting does, and Envoy
// refuses a bad bootstrap at start as validation would.
func bootstrapStart(t *testing.T, bin envoyrun.Binary, dir string, yaml []byte) *envoyrun.Envoy {
	t.Helper()
	if err := envoyrun.Validate(bin, dir, yaml); err != nil {
		t.Fatal(err)
	}
	return envoyrun.Start(t, bin, envoyrun.Options{Bootstrap: yaml, Dir: dir})
}

// bootstrapAsk sends n GETs of distinct paths (with x-client-id id when id
// is not "") to hashlb_listener: each must reach, with status 200, the
// backend lbcore ranks first, carrying hashlb's x-hashlb-service header
// naming it. Without a client id lbcore is the whole oracle; with one the
// first placement is URLHASH's too (no entry exists yet).
func bootstrapAsk(t *testing.T, e *envoyrun.Envoy, cfg *lbcore.Config, id string, n int) {
	t.Helper()
	url := "http://" + e.MustListener(t, "hashlb_listener")
	for i := range n {
		path := fmt.Sprintf("/boot/%d/%s", i, id)
		want := oracle(cfg, lbcore.Request{Target: path, Authority: "x", Method: "GET"})[0]
		req, _ := http.NewRequest("GET", url+path, nil)
		req.Host = "x"
		if id != "" {
			req.Header.Set("x-client-id", id)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var echo envoyrun.Echo
		if resp.StatusCode != 200 || json.Unmarshal(body, &echo) != nil {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		if echo.Backend != want {
			t.Errorf("GET %s reached %s, lbcore says %s", path, echo.Backend, want)
		}
		if got := echo.Header["X-Hashlb-Service"]; len(got) != 1 || got[0] != want {
			t.Errorf("GET %s: the backend received x-hashlb-service %q, want [%s]", path, got, want)
		}
	}
}

// fleetPort is the port of a host:port.
func fleetPort(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	var n int
	fmt.Sscan(p, &n)
	return n
}
