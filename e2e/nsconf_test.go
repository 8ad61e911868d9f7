package e2e

// hashlb import-nsconf, end to end: every configuration it writes for the
// ns.conf corpus (cmd/hashlb/testdata/nsconf) loads in the real module under
// hostsim, and each request goes where hashlb explain says
// (lbcore.Balancer.Explain, the code behind it); importing the Citrix
// S1/S2/S3 example gives the Citrix failover order.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/lbcore"
)

// buildHashlbCLI builds cmd/hashlb into a directory removed at t's cleanup.
func buildHashlbCLI(t *testing.T) string { return buildCommand(t, "./cmd/hashlb") }

// importNSConf runs hashlb import-nsconf on testdata/nsconf/<name>/ns.conf
// and returns the configurations it wrote, by file name.
func importNSConf(t *testing.T, bin, name string) map[string][]byte {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command(bin, "import-nsconf", "ns.conf", "-o", out)
	cmd.Dir = filepath.Join(repoRoot(t), "cmd", "hashlb", "testdata", "nsconf", name)
	report, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 0 && code != 1 {
		t.Fatalf("hashlb import-nsconf %s: %v (exit %d)\n%s", name, err, code, report)
	}
	files, err := filepath.Glob(filepath.Join(out, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	configs := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		configs[filepath.Base(f)] = b
	}
	if len(configs) == 0 {
		t.Fatalf("hashlb import-nsconf %s wrote nothing\n%s", name, report)
	}
	return configs
}

// nsconfRequests are requests that carry every input the corpus's
// configurations read (paths with elements, hosts, IPv4 and IPv6 clients,
// destinations, tenant and user headers, cookies and queries, Call-IDs) and
// requests that lack them.
func nsconfRequests(n int) []corpusRequest {
	rng := rand.New(rand.NewPCG(12, 2026))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	out := make([]corpusRequest, 0, n)
	for i := 0; i < n; i++ {
		var r corpusRequest
		add := func(k, v string) { r.headers = append(r.headers, [2]string{k, v}) }
		add(":method", pick("GET", "POST", "INVITE"))
		add(":scheme", "http")
		if h := pick("shop.example.com", "API.Example.com:8443", fmt.Sprintf("t%d.example.net", rng.IntN(20)), ""); h != "" {
			add(":authority", h)
		}
		path := pick(fmt.Sprintf("/shop/item/%d", rng.IntN(500)), fmt.Sprintf("/tenant-%d/orders/%d", rng.IntN(30), rng.IntN(100)),
			"/", "/a//b", fmt.Sprintf("/only%d", rng.IntN(10)))
		if rng.IntN(2) == 0 {
			path += fmt.Sprintf("?account=acct-%d&user=u%d", rng.IntN(40), rng.IntN(40))
		}
		add(":path", path)
		if rng.IntN(2) == 0 {
			add("x-tenant", pick("Acme", "acme", "Globex", fmt.Sprintf("T%d", rng.IntN(25))))
		}
		if rng.IntN(3) == 0 {
			add("x-user", fmt.Sprintf("User%d", rng.IntN(60)))
		}
		if rng.IntN(2) == 0 {
			add("cookie", fmt.Sprintf("tenant=c%d; user=cu%d; JSESSIONID=S%d", rng.IntN(25), rng.IntN(60), rng.IntN(80)))
		}
		if rng.IntN(3) == 0 {
			add("call-id", fmt.Sprintf("%d@sip.example.com", rng.IntN(100)))
		}
		switch rng.IntN(6) {
		case 0:
		case 1:
			r.src = fmt.Sprintf("[2001:db8:%x::%x]:%d", rng.IntN(4), rng.IntN(4096), 1024+rng.IntN(60000))
		default:
			r.src = fmt.Sprintf("10.20.%d.%d:%d", rng.IntN(4), rng.IntN(256), 1024+rng.IntN(60000))
		}
		if rng.IntN(5) != 0 {
			r.dst = fmt.Sprintf("10.0.0.%d:80", 10+rng.IntN(80))
		}
		out = append(out, r)
	}
	return out
}

// TestNSConfImportedConfigsRoute: each configuration written for the corpus
// loads in hostsim (2 workers), and every request goes where Explain says:
// exactly when the request alone decides (a hash with its input), to a
// selectable service when the worker's state decides (round robin, least
// connection, a backup); with persistence, a key seen before goes where it
// went first.
func TestNSConfImportedConfigsRoute(t *testing.T) {
	bin := buildHashlbCLI(t)
	wasm := module(t)
	entries, err := os.ReadDir(filepath.Join(repoRoot(t), "cmd", "hashlb", "testdata", "nsconf"))
	if err != nil {
		t.Fatal(err)
	}
	reqs := nsconfRequests(240)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	total := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		for file, js := range importNSConf(t, bin, e.Name()) {
			t.Run(e.Name()+"/"+file, func(t *testing.T) {
				total++
				c, err := lbcore.ParseConfig(js)
				if err != nil {
					t.Fatalf("ParseConfig: %v\n%s", err, js)
				}
				oracle := lbcore.NewBalancer(c, 0)
				ctx := context.Background()
				// A COOKIEINSERT vserver becomes a session block, which needs the key.
				h, err := hostsim.New(ctx, wasm, hostsim.Config{Workers: 2, PluginConfig: js, LogLevel: hostsim.LogWarn,
					Env: map[string]string{lbcore.SessionKeyEnv: "nsconf-e2e-session-key-0123456789abcdef0123"}})
				if err != nil {
					t.Fatalf("hostsim.New: %v\n%s", err, js)
				}
				defer h.Close(ctx)
				table := map[string]string{} // persistence key → service, as the module's table holds it
				exact := 0
				for i, r := range reqs {
					got, err := runOn(h, i%2, r)
					if err != nil {
						t.Fatalf("request %d: %v", i, err)
					}
					ex := oracle.Explain(corpus.LBRequest(c, r.shared()), now)
					if ex.Decision.Len() == 0 {
						if got.status != 503 {
							t.Fatalf("request %d (%s): got %v, want a 503: nothing is selectable", i, briefHeaders(r.headers), got)
						}
						continue
					}
					if len(got.service) != 1 || len(got.upstream) != 1 {
						t.Fatalf("request %d (%s): service %q upstream %q, want one of each", i, briefHeaders(r.headers), got.service, got.upstream)
					}
					svc := serviceNamed(c, got.service[0])
					if svc == nil || svc.Address != got.upstream[0] || !oracle.Selectable(slices.IndexFunc(c.Services, func(s lbcore.Service) bool { return s.Name == svc.Name })) {
						t.Fatalf("request %d: went to %q at %q, not a selectable service of the configuration", i, got.service[0], got.upstream[0])
					}
					want, key := "", ""
					if p := ex.Persistence; p != nil && !p.Empty {
						key = string(p.Key)
						want = table[key]
					}
					if want == "" && !ex.WorkerState {
						want = c.Services[ex.Decision.At(0)].Name
					}
					if want != "" {
						exact++
						if got.service[0] != want {
							t.Fatalf("request %d (%s src %s dst %s): went to %s, explain says %s (method %s, key %q)",
								i, briefHeaders(r.headers), r.src, r.dst, got.service[0], want, ex.Decision.Method, ex.Key)
						}
					}
					if key != "" && table[key] == "" {
						table[key] = got.service[0]
					}
				}
				if c.LBMethod.IsHash() && exact < len(reqs)/4 {
					t.Errorf("only %d of %d requests were decided by the request alone: the corpus does not exercise %s", exact, len(reqs), c.LBMethod)
				}
				for w := 0; w < 2; w++ {
					if err := h.Err(w); err != nil {
						t.Fatalf("worker %d died: %v", w, err)
					}
				}
			})
		}
	}
	if total < 40 {
		t.Errorf("%d configurations imported from the corpus, want every vserver of it", total)
	}
}

func serviceNamed(c *lbcore.Config, name string) *lbcore.Service {
	for i := range c.Services {
		if c.Services[i].Name == name {
			return &c.Services[i]
		}
	}
	return nil
}

// TestNSConfCitrixFailover imports the Citrix S1/S2/S3 example and runs its
// steps in hostsim: for a key ranked S1 > S2 > S3, requests go to S1; S1 DOWN
// → S2; S1 and S2 DOWN → S3; S2 back → S2; S1 back → S1. The example binds
// no monitor, so the test adds a healthCheck to the imported
// configuration (and upstreamCount 3, to read the whole failover order from
// the upstream header) and fails the probes of the services it takes DOWN.
// Each step is also what Explain says with those services DOWN.
func TestNSConfCitrixFailover(t *testing.T) {
	js := importNSConf(t, buildHashlbCLI(t), "citrix-s1s2s3")["vs_hash.json"]
	if js == nil {
		t.Fatal("import-nsconf wrote no vs_hash.json")
	}
	var cfg map[string]any
	if err := json.Unmarshal(js, &cfg); err != nil {
		t.Fatal(err)
	}
	withHealth := configJSON(t, cfg, map[string]any{"upstreamCount": 3,
		"healthCheck": map[string]any{"interval": "1s", "timeout": "500ms", "unhealthyThreshold": 1, "healthyThreshold": 1, "cluster": "backends"}})
	c := newOracle(t, withHealth).cfg
	names := func(idx []int) []string {
		var out []string
		for _, i := range idx {
			out = append(out, c.Services[i].Name)
		}
		return out
	}
	// A URL the imported pool ranks S1 > S2 > S3 (H1 in the Citrix text).
	oracle := lbcore.NewBalancer(c, 0)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var url string
	for i := 0; url == ""; i++ {
		u := fmt.Sprintf("/h1/%d", i)
		ex := oracle.Explain(&lbcore.Request{Target: u}, now)
		var rank []int
		for _, rs := range ex.Ranking {
			rank = append(rank, rs.Index)
		}
		if slices.Equal(names(rank), []string{"S1", "S2", "S3"}) {
			url = u
		}
	}

	backends := newProbeAnswers()
	ctx := context.Background()
	h, err := hostsim.New(ctx, module(t), hostsim.Config{Workers: 2, PluginConfig: withHealth, HTTPCall: backends.handle, LogLevel: hostsim.LogWarn})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	addr := map[string]string{}
	for _, s := range c.Services {
		addr[s.Name] = s.Address
	}
	steps := []struct {
		name string
		down []string
		want []string // the Citrix example: the choice, then the failover order
	}{
		{"all up", nil, []string{"S1", "S2", "S3"}},
		{"S1 down", []string{"S1"}, []string{"S2", "S3"}},
		{"S1 and S2 down", []string{"S1", "S2"}, []string{"S3"}},
		{"only S2 back", []string{"S1"}, []string{"S2", "S3"}},
		{"only S1 back", []string{"S2"}, []string{"S1", "S3"}},
		{"both back", nil, []string{"S1", "S2", "S3"}},
	}
	for _, st := range steps {
		var down []string
		for _, n := range st.down {
			down = append(down, addr[n])
		}
		backends.only(down...)
		for i := 0; i < 3; i++ { // a probe round marks the change; a tick spreads it to every worker
			h.Advance(time.Second)
		}
		var wantAddrs []string
		for _, n := range st.want {
			wantAddrs = append(wantAddrs, addr[n])
		}
		for w := 0; w < 2; w++ {
			got, err := runOn(h, w, corpusRequest{headers: [][2]string{{":method", "GET"}, {":path", url}, {":authority", "h"}}, src: "192.0.2.50:4000"})
			if err != nil {
				t.Fatal(err)
			}
			if firstOf(got.service) != st.want[0] || strings.Join(got.upstream, ",") != strings.Join(wantAddrs, ",") {
				t.Errorf("%s, worker %d: %s went to %v, failover %v; want %s, failover %v", st.name, w, url, got.service, got.upstream, st.want[0], wantAddrs)
			}
		}
		// Explain agrees: the same services DOWN, the same order.
		b := lbcore.NewBalancer(c, 0)
		for i, s := range c.Services {
			b.SetDown(i, slices.Contains(st.down, s.Name))
		}
		d := b.Explain(&lbcore.Request{Target: url}, now).Decision
		var order []int
		for i := 0; i < d.Len(); i++ {
			order = append(order, d.At(i))
		}
		if !slices.Equal(names(order), st.want) {
			t.Errorf("%s: explain says %v, the Citrix example %v", st.name, names(order), st.want)
		}
	}
}
