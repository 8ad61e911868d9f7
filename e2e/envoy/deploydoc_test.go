package envoy

// docs/deploy.md as a user reads it, in real Envoy: e2e/deploy_doc_test.go
// checks that the page's files and commands exist; this runs its Envoy
// commands and holds Envoy's answers to what the page says about them.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/lateness"
	"github.com/hashlb/hashlb/lbcore"
)

// docRun is one `envoy -c FILE` of docs/deploy.md and the curl lines that
// follow it in its block.
type docRun struct {
	file  string
	curls []string
}

// deployDoc reads docs/deploy.md's sh blocks: the Envoy runs, and the
// arguments of every hashlb-proxy -backends-only command (the demo backends
// the runs need, wherever the page shows them).
func deployDoc(t testing.TB) (runs []docRun, backends [][]string) {
	t.Helper()
	doc := string(envoyrun.ReadRepoFile(t, "docs/deploy.md"))
	inSh := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			inSh = !inSh && strings.TrimPrefix(line, "```") == "sh"
			if inSh {
				runs = append(runs, docRun{}) // a block's curl lines follow its envoy
			}
			continue
		}
		if !inSh {
			continue
		}
		if i := strings.Index(line, "#"); i >= 0 && (i == 0 || line[i-1] == ' ') {
			line = line[:i]
		}
		line = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), "&"))
		if line == "" {
			continue
		}
		args := envoyrun.ShellWords(line)
		cur := &runs[len(runs)-1]
		switch {
		case args[0] == "envoy":
			i := slices.Index(args, "-c")
			if i < 0 || i+1 >= len(args) {
				t.Fatalf("docs/deploy.md: %q: envoy without -c FILE", line)
			}
			if cur.file != "" {
				runs = append(runs, docRun{})
				cur = &runs[len(runs)-1]
			}
			cur.file = args[i+1]
		case args[0] == "curl" && cur.file != "":
			cur.curls = append(cur.curls, line)
		case len(args) > 3 && args[0] == "go" && args[2] == "./hostsim/cmd/hashlb-proxy" && slices.Contains(args, "-backends-only"):
			backends = append(backends, args[3:])
		}
	}
	runs = slices.DeleteFunc(runs, func(r docRun) bool { return r.file == "" })
	return runs, backends
}

// docClaim finds what docs/deploy.md says (a regexp's first group) and
// fails the test when the page no longer says it.
func docClaim(t testing.TB, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(string(envoyrun.ReadRepoFile(t, "docs/deploy.md")))
	if m == nil {
		t.Fatalf("docs/deploy.md no longer says %s: update TestDeployDocEnvoy with the page", re)
	}
	return m[1]
}

// TestDeployDocEnvoy runs every `envoy -c FILE` of docs/deploy.md's sh
// blocks as the page says, in each Envoy: the demo backends of the
// hashlb-proxy -backends-only command whose configuration has the file's
// services, then Envoy with the file, every port moved to a free one. It
// asserts what the page claims:
//   - envoy.yaml: the block's curl lines answer 200 with "backend NAME (ADDR)"
//     (the page's example form) from the service lbcore ranks first; /stats
//     then lists wasmcustom.hashlb.service.NAME.requests (within the page's
//     "up to one second" lag, with slack), and /stats/prometheus lists
//     hashlb_service_NAME_requests and hashlb_decision_hash without the
//     namespace and without an envoy_ prefix;
//   - configs/envoy-tcp.yaml: a connection to its listener is answered by one
//     line, "backend NAME", from the service lbcore picks for the
//     connection's source address and port.
//
// A new `envoy -c` on the page fails the test until it is taught here.
func TestDeployDocEnvoy(t *testing.T) {
	runs, backends := deployDoc(t)
	var files []string
	for _, r := range runs {
		files = append(files, r.file)
	}
	for _, want := range []string{"envoy.yaml", "configs/envoy-tcp.yaml"} {
		if !slices.Contains(files, want) {
			t.Fatalf("docs/deploy.md runs %v, no longer envoy -c %s: update TestDeployDocEnvoy", files, want)
		}
	}
	httpBody := docClaim(t, "Each HTTP backend answers with its name and address \\(`(backend b1 \\(127\\.0\\.0\\.1:18081\\))`\\)")
	tcpBody := docClaim(t, "each TCP\\s+backend with one line \\(`(backend b1)`\\)")
	docClaim(t, "(`wasmcustom\\.hashlb\\.service\\.b1\\.requests: 42`)")
	docClaim(t, "(`hashlb_service_b1_requests`, `hashlb_decision_hash`)")
	docClaim(t, "(\\*\\*lags by up to one second\\*\\*)")
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		for _, r := range runs {
			t.Run(strings.ReplaceAll(r.file, "/", "_"), func(t *testing.T) {
				switch r.file {
				case "envoy.yaml":
					e, cfg := runDocFile(t, bin, r.file, backends)
					deployDocHTTP(t, e, cfg, r, httpBody)
				case "configs/envoy-tcp.yaml":
					e, cfg := runDocFile(t, bin, r.file, backends)
					deployDocTCP(t, e, cfg, tcpBody)
				default:
					t.Errorf("docs/deploy.md runs envoy -c %s: teach TestDeployDocEnvoy what the page claims for it", r.file)
				}
			})
		}
	})
}

var yamlPort = regexp.MustCompile(`port_value: *([0-9]+)\b`)

// runDocFile starts what a user starts for file: the demo backends of the
// page's -backends-only command whose configuration (default
// configs/demo.json) has file's services, and Envoy with file; service ports
// become free ones, the listener's and admin's 0. It returns Envoy and the
// plugin configuration as Envoy received it.
func runDocFile(t *testing.T, bin envoyrun.Binary, file string, backends [][]string) (*envoyrun.Envoy, *lbcore.Config) {
	t.Helper()
	raw := envoyrun.ReadRepoFile(t, file)
	cfg := pluginConfigs(t, raw)[0]
	var args []string
	config := ""
	for _, b := range backends {
		c := "configs/demo.json"
		var rest []string
		for i := 0; i < len(b); i++ {
			switch {
			case b[i] == "-config" && i+1 < len(b):
				c = b[i+1]
				i++
			case b[i] != "-backends-only":
				rest = append(rest, b[i])
			}
		}
		if sameServices(pluginConfigs(t, envoyrun.ReadRepoFile(t, c))[0], cfg) {
			config, args = c, rest
		}
	}
	if config == "" {
		t.Fatalf("docs/deploy.md shows no hashlb-proxy -backends-only for %s's services", file)
	}
	var ports []int
	for _, s := range cfg.Services {
		_, p, _ := net.SplitHostPort(s.Address)
		n, _ := strconv.Atoi(p)
		ports = append(ports, n)
	}
	sub := startDemoBackendsFree(t, config, ports, args...)
	for _, m := range yamlPort.FindAllSubmatch(raw, -1) {
		n, _ := strconv.Atoi(string(m[1]))
		if _, ok := sub[n]; !ok {
			sub[n] = 0 // a listener or the admin
		}
	}
	yaml := envoyrun.Ports(t, raw, sub)
	dir := envoyrun.WorkDir(t)
	return envoyrun.Start(t, bin, envoyrun.Options{Bootstrap: yaml, Dir: dir}), pluginConfigs(t, yaml)[0]
}

func sameServices(a, b *lbcore.Config) bool {
	if len(a.Services) != len(b.Services) {
		return false
	}
	for i := range a.Services {
		if a.Services[i].Address != b.Services[i].Address || a.Services[i].Name != b.Services[i].Name {
			return false
		}
	}
	return true
}

// onlyListener is the address of the bootstrap's one listener.
func onlyListener(t *testing.T, e *envoyrun.Envoy) string {
	t.Helper()
	body, _, err := e.Get("/listeners?format=json")
	if err != nil {
		t.Fatal(err)
	}
	var ls struct {
		ListenerStatuses []struct {
			Name string `json:"name"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal([]byte(body), &ls); err != nil || len(ls.ListenerStatuses) != 1 {
		t.Fatalf("/listeners: want one listener: %v %s", err, body)
	}
	return e.MustListener(t, ls.ListenerStatuses[0].Name)
}

// address is the service's ip:port.
func address(cfg *lbcore.Config, name string) string {
	for _, s := range cfg.Services {
		if s.Name == name {
			return s.Address
		}
	}
	return ""
}

func deployDocHTTP(t *testing.T, e *envoyrun.Envoy, cfg *lbcore.Config, r docRun, example string) {
	listener := onlyListener(t, e)
	if len(r.curls) == 0 {
		t.Fatal("docs/deploy.md: no curl line after envoy -c envoy.yaml")
	}
	sent := map[string]int64{}
	var answered time.Time
	for _, line := range r.curls {
		c := envoyrun.ReadmeCurl{Line: line}
		for _, a := range envoyrun.ShellWords(line)[1:] {
			switch {
			case strings.HasPrefix(a, "http://"):
				c.URL = a
			case a == "-v" || a == "-s" || a == "-i" || a == "-si":
			default:
				t.Fatalf("docs/deploy.md: %q: argument %q this test does not know", line, a)
			}
		}
		name := oracle(cfg, readmeRequest(t, c))[0]
		a := c.Send(t, listener)
		answered = time.Now()
		want := strings.NewReplacer("b1", name, "127.0.0.1:18081", address(cfg, name)).Replace(example) + "\n"
		if a.Status != 200 || a.Body != want {
			t.Errorf("%s: %d %q, want 200 %q (the page's form, from the service lbcore ranks first)", line, a.Status, a.Body, want)
		}
		sent[name]++
	}
	// /stats: the page's `curl -s 127.0.0.1:9901/stats | grep hashlb`.
	// The page's lag (up to one second) is a quiet machine's: the test
	// gives it 3 s, widened by how late this process's timers fire
	// meanwhile, as Envoy's flush and the workers' ticks are as late.
	var stats string
	meter := lateness.Start()
	defer meter.Stop()
	for {
		body, _, err := e.Get("/stats")
		if err != nil {
			t.Fatal(err)
		}
		stats = body
		all := true
		for name, n := range sent {
			all = all && strings.Contains("\n"+stats, fmt.Sprintf("\nwasmcustom.hashlb.service.%s.requests: %d\n", name, n))
		}
		if all {
			t.Logf("/stats counted the requests %v after the last answer", time.Since(answered).Round(10*time.Millisecond))
			break
		}
		if bound := lateness.Widen(3*time.Second, meter.Late(), 2); time.Since(answered) > bound {
			var lines []string
			for _, l := range strings.Split(stats, "\n") {
				if strings.Contains(l, "hashlb") {
					lines = append(lines, l)
				}
			}
			t.Fatalf("/stats: no wasmcustom.hashlb.service.NAME.requests with the counts %v %v after the answers (the page says the lag is up to one second) %s:\n%s",
				sent, bound, lateness.Note(meter.Late(), "the bound is 3 s widened by twice that"), strings.Join(lines, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	prom, _, err := e.Get("/stats/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for name, n := range sent {
		total += n
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^hashlb_service_%s_requests(\{\})? %d$`, name, n)).MatchString(prom) {
			t.Errorf("/stats/prometheus: no hashlb_service_%s_requests %d", name, n)
		}
	}
	if !regexp.MustCompile(fmt.Sprintf(`(?m)^hashlb_decision_hash(\{\})? %d$`, total)).MatchString(prom) {
		t.Errorf("/stats/prometheus: no hashlb_decision_hash %d", total)
	}
	if regexp.MustCompile(`(?m)^(envoy_hashlb_|wasmcustom)`).MatchString(prom) {
		t.Errorf("/stats/prometheus: hashlb's metrics carry a prefix the page says Envoy strips")
	}
}

func deployDocTCP(t *testing.T, e *envoyrun.Envoy, cfg *lbcore.Config, example string) {
	listener := onlyListener(t, e)
	for range 3 {
		c, err := net.DialTimeout("tcp", listener, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		src, dst := c.LocalAddr().String(), c.RemoteAddr().String()
		b, err := io.ReadAll(c)
		c.Close()
		name := oracle(cfg, lbcore.Request{Source: src, Dest: dst})[0]
		want := strings.Replace(example, "b1", name, 1) + "\n"
		if err != nil || string(b) != want {
			t.Errorf("connection from %s to %s: %q (%v), want %q (the page's form, from the service lbcore picks)", src, dst, b, err, want)
		}
	}
}
