package envoy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/lbcore"
)

// rig is envoy.yaml (the builder's shippedHTTP, held to the file) started in
// front of three echo backends: the shipped listener, route, retry policy
// and override_host cluster, with the plugin configuration a test needs. The health,
// retry and least-connection tests use it.
type rig struct {
	e   *envoyrun.Envoy
	url string
	bs  []*envoyrun.Backend
	cfg *lbcore.Config
	// yaml is the bootstrap Envoy runs.
	yaml []byte
	// c makes a new connection per request: Envoy balances connections
	// over its workers, so requests reach all of them.
	c *http.Client
}

// startRig starts Envoy with envoy.yaml (shippedHTTP) whose hashlb
// configuration is rigConfig of plugin ("" keeps envoy.yaml's own, its
// addresses moved to the backends), after edit (nil: none) has changed the
// bootstrap. Backends'
// OnRequest hooks must be set by prepare, before Envoy (and its probes)
// start.
func startRig(t *testing.T, bin envoyrun.Binary, plugin string, prepare func(bs []*envoyrun.Backend), edit func(b *bootstrap)) *rig {
	t.Helper()
	bs := envoyrun.StartBackends(t, 3)
	if prepare != nil {
		prepare(bs)
	}
	config := rigConfig(plugin, bs)
	if plugin == "" {
		config = envoyrun.Ports(t, shippedConfig(t, "envoy.yaml"), map[int]int{18081: bs[0].Port(), 18082: bs[1].Port(), 18083: bs[2].Port()})
	}
	b := shippedHTTP(t, loopback[0], config, endpoints(bs))
	if edit != nil {
		edit(&b)
	}
	yaml := b.yaml(t)
	// Not validated first: Envoy refuses a bad bootstrap at start as
	// --mode validate would, and validating compiles the module once more
	// (TestBootstrapsStart validates envoy.yaml as shipped).
	dir := envoyrun.WorkDir(t)
	r := &rig{bs: bs, cfg: pluginConfigs(t, yaml)[0], yaml: yaml}
	r.e = envoyrun.Start(t, bin, envoyrun.Options{Bootstrap: yaml, Dir: dir})
	r.url = "http://" + r.e.MustListener(t, "hashlb_listener")
	r.c = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	t.Cleanup(r.c.CloseIdleConnections)
	return r
}

// get sends GET path and returns the status, the X-Backend that answered
// and the body.
func (r *rig) get(t testing.TB, path string) (int, string, string) {
	t.Helper()
	resp, err := r.c.Get(r.url + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Backend"), string(b)
}

// servedBy returns a function that sends GET path to base
// ("http://host:port") on a new connection each time (Envoy balances
// connections over its workers) and returns the X-Backend that answered;
// an error or a status other than 200 fails t.
func servedBy(t testing.TB, base string) func(path string) string {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	t.Cleanup(c.CloseIdleConnections)
	return func(path string) string {
		t.Helper()
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		return resp.Header.Get("X-Backend")
	}
}

// rank is lbcore's ranking of a GET of path (authority as Go's client
// sends it), with the services of down taken out.
func (r *rig) rank(path string, down ...string) []string {
	bal := lbcore.NewBalancer(r.cfg, 0)
	for _, d := range down {
		bal.SetDown(r.index(d), true)
	}
	req := lbcore.Request{Target: path, Authority: strings.TrimPrefix(r.url, "http://"), Method: "GET"}
	d := bal.Decide(&req, time.Unix(1767225600, 0))
	var names []string
	for i := range d.Len() {
		names = append(names, r.cfg.Services[d.At(i)].Name)
	}
	return names
}

func (r *rig) index(name string) int {
	for i, s := range r.cfg.Services {
		if s.Name == name {
			return i
		}
	}
	panic("no service " + name)
}

// pathsTo returns n paths lbcore ranks first on service name (with none down).
func (r *rig) pathsTo(name string, n int) []string {
	var out []string
	for i := 0; len(out) < n && i < 100000; i++ {
		p := fmt.Sprintf("/p/%d", i)
		if r.rank(p)[0] == name {
			out = append(out, p)
		}
	}
	return out
}

// dataRequests counts, per backend, the requests that were not health
// probes (path /healthz); install with prepare.
type dataRequests struct {
	n      [3]atomic.Int64
	probes [3]atomic.Int64
	// probe is the headers of the first probe each backend received.
	probe [3]chan http.Header
}

func newDataRequests() *dataRequests {
	d := &dataRequests{}
	for i := range d.probe {
		d.probe[i] = make(chan http.Header, 1)
	}
	return d
}

func (d *dataRequests) install(bs []*envoyrun.Backend) {
	for i, b := range bs {
		b.OnRequest = func(r *http.Request) {
			if r.URL.Path == "/healthz" {
				d.probes[i].Add(1)
				h := r.Header.Clone()
				h.Set("Host", r.Host)
				select {
				case d.probe[i] <- h:
				default:
				}
				return
			}
			d.n[i].Add(1)
		}
	}
}

// servicesJSON is hashlb's service list of the backends, each named as its
// backend.
// rigConfig is a plugin configuration of the rig: members (JSON object
// members: the method and what the test is about) with envoy.yaml's upstream
// header, three upstreams and bs as the services.
func rigConfig(members string, bs []*envoyrun.Backend) []byte {
	return []byte(`{"upstreamHeader": "` + upstreamHeader + `", "upstreamCount": 3,
  ` + members + `,
  "services": ` + servicesJSON(bs) + `}`)
}

func servicesJSON(bs []*envoyrun.Backend) string {
	var svcs []string
	for _, b := range bs {
		svcs = append(svcs, fmt.Sprintf(`{"name": %q, "address": %q}`, b.Name, b.Addr))
	}
	return "[" + strings.Join(svcs, ", ") + "]"
}
