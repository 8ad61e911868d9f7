package e2e

// The same request corpus through the compiled module under every host we
// have: hostsim with 1 and 4 workers under both import profiles, and the
// SDK's own wasm runner (proxytest.NewWasmVMContext), a host we did not
// write. lbcore is the oracle: a hash decision must be exactly lbcore's, and
// the same on every host; a decision that depends on per-worker state or a
// random seed (round robin, least connection, backups) must name configured,
// enabled services.

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// corpusServices is the pool every corpus config balances over: weights,
// an IPv6 address, a hashId and a disabled service.
const corpusServices = `[
    {"name": "s1", "address": "10.0.0.11:8080"},
    {"name": "s2", "address": "10.0.0.12:8080", "weight": 2},
    {"name": "s3", "address": "[fd00::13]:8080"},
    {"name": "s4", "address": "10.0.0.14:8080", "hashId": "pool-4", "weight": 3},
    {"name": "s5", "address": "10.0.0.15:8080", "enabled": false},
    {"name": "s6", "address": "10.0.0.16:9090"}
  ]`

// corpusConfigs has one configuration per lbMethod, each with options that
// change its key (hashLength, masks, trusted hops, upstreamCount), plus
// persistence over shared data and a pool with nothing enabled.
var corpusConfigs = []struct {
	name, config string
	persist      bool // decisions may come from the persistence table
	whole        bool // config has its own services
}{
	{name: "URLHASH", config: `{"lbMethod": "URLHASH", "hashLength": 40, "upstreamCount": 2`},
	{name: "DOMAINHASH", config: `{"lbMethod": "DOMAINHASH", "hashLength": 12, "backupLBMethod": "ROUNDROBIN"`},
	{name: "DESTINATIONIPHASH", config: `{"lbMethod": "DESTINATIONIPHASH", "netmask": "255.255.0.0", "v6NetmaskLen": 48`},
	{name: "SOURCEIPHASH", config: `{"lbMethod": "SOURCEIPHASH", "netmask": "255.255.255.0", "v6NetmaskLen": 64, "trustedForwardedHops": 1, "upstreamCount": 3`},
	{name: "SRCIPDESTIPHASH", config: `{"lbMethod": "SRCIPDESTIPHASH", "netmask": "255.255.255.0", "backupLBMethod": "ROUNDROBIN"`},
	{name: "SRCIPSRCPORTHASH", config: `{"lbMethod": "SRCIPSRCPORTHASH", "v6NetmaskLen": 64, "upstreamCount": 2`},
	{name: "CALLIDHASH", config: `{"lbMethod": "CALLIDHASH", "backupLBMethod": "ROUNDROBIN"`},
	{name: "TOKEN", config: `{"lbMethod": "TOKEN", "token": "${request.header.x-tenant|lower||request.cookie.tenant||request.header.authorization|jwt(\"sub\")}", "upstreamCount": 2`},
	{name: "LEASTCONNECTION", config: `{"lbMethod": "LEASTCONNECTION", "upstreamCount": 2`},
	{name: "ROUNDROBIN", config: `{"lbMethod": "ROUNDROBIN"`},
	{name: "SOURCEIPHASH+persistence", persist: true, config: `{"lbMethod": "SOURCEIPHASH", "persistence": {"keys": ["${client.ip}", "${request.header.x-client-id}"]}`},
	{name: "all-disabled", whole: true, config: `{"lbMethod": "URLHASH", "services": [
    {"name": "d1", "address": "10.0.0.21:8080", "enabled": false},
    {"name": "d2", "address": "10.0.0.22:8080", "enabled": false}]}`},
}

// corpusConfig returns the JSON of corpusConfigs[i]: every config but the
// last is completed with corpusServices and the debug header.
func corpusConfig(i int) []byte {
	c := corpusConfigs[i].config
	if !corpusConfigs[i].whole {
		c += `, "debugHeader": true, "services": ` + corpusServices + "}"
	}
	return []byte(c)
}

// corpusRequest is one request of the corpus: headers as Envoy hands them to
// a filter (lower-case names) and the connection's addresses ("" when the
// host has no such property).
type corpusRequest struct {
	headers  [][2]string
	src, dst string
}

// corpus returns n requests that cover every method's input, their absence
// and malformed forms, and client copies of the headers hashlb sets.
func corpus(n int) []corpusRequest {
	rng := rand.New(rand.NewPCG(3, 33))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	pct := func(p int) bool { return rng.IntN(100) < p }
	jwt := func(sub string) string {
		enc := base64.RawURLEncoding.EncodeToString
		return "Bearer " + enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(`{"sub":"`+sub+`"}`)) + ".sig"
	}
	v4 := func() string { return fmt.Sprintf("10.%d.%d.%d", rng.IntN(3), rng.IntN(4), rng.IntN(256)) }
	v6 := func() string { return fmt.Sprintf("2001:db8:%x:%x::%x", rng.IntN(3), rng.IntN(3), rng.IntN(65536)) }
	addr := func() string {
		switch rng.IntN(10) {
		case 0:
			return "" // no such property
		case 1:
			return "[" + v6() + "]:" + fmt.Sprint(rng.IntN(65536))
		case 2:
			return "[::ffff:" + v4() + "]:" + fmt.Sprint(1+rng.IntN(65535)) // v4-mapped: one client, one key
		case 3:
			return v4() + ":0" // no port
		case 4:
			return "not-an-address"
		default:
			return v4() + ":" + fmt.Sprint(1024+rng.IntN(64000))
		}
	}
	out := make([]corpusRequest, 0, n)
	for i := 0; i < n; i++ {
		var r corpusRequest
		add := func(k, v string) { r.headers = append(r.headers, [2]string{k, v}) }
		add(":method", pick("GET", "GET", "POST", "INVITE", "PUT"))
		add(":scheme", "http")
		host := pick("example.com", "Example.COM", "api.example.com:8443", "example.com.", "shop.example.org",
			"[2001:db8::1]:443", "10.9.9.9:80", "a-very-long-subdomain.example.net", "")
		if host != "" {
			add(":authority", host)
		}
		switch rng.IntN(12) {
		case 0: // no :path at all: URLHASH has no input
		case 1:
			add(":path", "http://"+pick("Other.example.com", "user@x.example.com:81", "[2001:db8::2]:8080")+"/abs/"+fmt.Sprint(rng.IntN(20))+"?q="+fmt.Sprint(rng.IntN(5)))
		case 2:
			add(":path", "/"+strings.Repeat("long-segment/", 3+rng.IntN(6))+fmt.Sprint(rng.IntN(7))) // beyond hashLength
		default:
			p := "/" + pick("a", "b", "api/v1/users", "static/img", "cart") + "/" + fmt.Sprint(rng.IntN(40))
			if pct(40) {
				p += "?id=" + fmt.Sprint(rng.IntN(9)) + "&x=" + pick("1", "2")
			}
			add(":path", p)
		}
		if pct(70) {
			xff := v4()
			if pct(30) {
				xff = v6() + ", " + xff
			}
			if pct(10) {
				xff = "unknown"
			}
			add("x-forwarded-for", xff)
		}
		switch rng.IntN(4) {
		case 0:
			add("call-id", fmt.Sprintf("%d-%x@sip.example.com", rng.IntN(30), rng.IntN(4)))
		case 1:
			add("i", fmt.Sprintf("compact-%d@pbx", rng.IntN(30)))
		case 2:
			add("call-id", "")
		}
		switch rng.IntN(5) {
		case 0:
			add("x-tenant", pick("Acme", "acme", "Globex", "Initech", "umbrella"))
		case 1:
			add("cookie", "a=1; tenant="+pick("t1", "t2", "t3")+"; b=2")
		case 2:
			add("authorization", jwt(pick("alice", "bob", "carol", "dave")))
		case 3:
			add("authorization", "Bearer not-a-jwt")
		}
		if pct(50) {
			add("x-client-id", fmt.Sprint("client-", rng.IntN(25)))
		}
		if pct(30) { // forged: a client must never choose the upstream
			add("x-envoy-original-dst-host", pick("6.6.6.6:666", "10.0.0.11:8080", "evil.example.com:80"))
			if pct(50) {
				add("x-envoy-original-dst-host", "7.7.7.7:777")
			}
			add("x-hashlb-service", "evil")
		}
		add("user-agent", "corpus/1")
		add("x-padding", strings.Repeat("p", rng.IntN(300)))
		r.src, r.dst = addr(), addr()
		out = append(out, r)
	}
	return out
}

// hostDecision is what one request left behind on a host.
type hostDecision struct {
	upstream []string // every value of x-envoy-original-dst-host after the filter
	service  []string // every value of x-hashlb-service
	status   int      // local reply status, 0 when the request went upstream
	body     string   // local reply body
	debug    string   // x-hashlb-decision on the response
}

func headerValues(headers [][2]string, name string) []string {
	var out []string
	for _, kv := range headers {
		if strings.EqualFold(kv[0], name) {
			out = append(out, kv[1])
		}
	}
	return out
}

func firstOf(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return xs[0]
}

// runOn runs request r as one whole stream on worker w of h and returns
// what the module decided.
func runOn(h *hostsim.Host, w int, r corpusRequest) (hostDecision, error) {
	var d hostDecision
	s := h.Stream(w)
	props := map[string][]byte{}
	if r.src != "" {
		props["source.address"] = hostsim.PropString(r.src)
	}
	if r.dst != "" {
		props["destination.address"] = hostsim.PropString(r.dst)
	}
	res := s.RequestHeaders(r.headers, props)
	if res.Err != nil {
		return d, fmt.Errorf("VM error: %w", res.Err)
	}
	if l := res.LocalReply; l != nil {
		d.status, d.body = l.Status, string(l.Body)
		d.debug, _ = l.Header("x-hashlb-decision")
	} else {
		d.upstream = headerValues(res.Headers, "x-envoy-original-dst-host")
		d.service = headerValues(res.Headers, "x-hashlb-service")
		resp := s.ResponseHeaders([][2]string{{":status", "200"}})
		if resp.Err != nil {
			return d, fmt.Errorf("response headers: %w", resp.Err)
		}
		d.debug, _ = resp.Header("x-hashlb-decision")
	}
	return d, s.Finish()
}

// runHostsim runs the corpus through hostsim, requests spread round robin
// over the workers, each a whole stream.
func runHostsim(wasm, config []byte, workers int, profile string, reqs []corpusRequest) ([]hostDecision, error) {
	ctx := context.Background()
	h, err := hostsim.New(ctx, wasm, hostsim.Config{Workers: workers, Profile: profile, PluginConfig: config, LogLevel: hostsim.LogWarn})
	if err != nil {
		return nil, fmt.Errorf("hostsim.New: %w", err)
	}
	defer h.Close(ctx)
	out := make([]hostDecision, len(reqs))
	for i, r := range reqs {
		if out[i], err = runOn(h, i%workers, r); err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
	}
	for w := 0; w < workers; w++ {
		if err := h.Err(w); err != nil {
			return nil, fmt.Errorf("worker %d died: %w", w, err)
		}
	}
	return out, nil
}

// runProxytest runs the corpus through the SDK's wasm runner on vm, with a
// new emulator (and so a new plugin context) for config, as Envoy reuses a
// VM when only the plugin configuration changes. The emulator is global, so
// this holds it only for the duration of the call. It refuses an empty
// property and cannot remove one, so an absent address is given as "-",
// which the module reads as no address, as it does an absent one.
func runProxytest(vm proxytest.WasmVMContext, config []byte, reqs []corpusRequest) ([]hostDecision, error) {
	h, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().WithVMContext(vm).WithPluginConfiguration(config))
	defer reset()
	if st := h.StartVM(); st != types.OnVMStartStatusOK {
		return nil, fmt.Errorf("StartVM = %v", st)
	}
	if st := h.StartPlugin(); st != types.OnPluginStartStatusOK {
		return nil, fmt.Errorf("StartPlugin = %v", st)
	}
	out := make([]hostDecision, len(reqs))
	for i, r := range reqs {
		for _, p := range []struct {
			path []string
			val  string
		}{{[]string{"source", "address"}, r.src}, {[]string{"destination", "address"}, r.dst}} {
			if p.val == "" {
				p.val = "-"
			}
			if err := h.SetProperty(p.path, []byte(p.val)); err != nil {
				return nil, err
			}
		}
		id := h.InitializeHttpContext()
		h.CallOnRequestHeaders(id, withoutSteering(r.headers), true)
		d := &out[i]
		if l := h.GetSentLocalResponse(id); l != nil {
			d.status, d.body = int(l.StatusCode), string(l.Data)
		} else {
			hs := h.GetCurrentRequestHeaders(id)
			d.upstream = headerValues(hs, "x-envoy-original-dst-host")
			d.service = headerValues(hs, "x-hashlb-service")
			h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
			d.debug = firstOf(headerValues(h.GetCurrentResponseHeaders(id), "x-hashlb-decision"))
		}
		h.CompleteHttpContext(id)
	}
	return out, nil
}

// briefHeaders formats headers for a failure message, long values clipped.
func briefHeaders(headers [][2]string) string {
	var b strings.Builder
	for _, kv := range headers {
		v := kv[1]
		if len(v) > 48 {
			v = v[:45] + "..."
		}
		fmt.Fprintf(&b, "%s: %q; ", kv[0], v)
	}
	return b.String()
}

// oracleDecision is lbcore's decision for r, built from the request as the filter
// sees it: pseudo-headers split out, client copies of hashlb's headers gone.
func oracleDecision(b *lbcore.Balancer, r corpusRequest) lbcore.Decision {
	c := b.Config()
	req := lbcore.Request{Source: r.src, Dest: r.dst}
	for _, kv := range r.headers {
		switch {
		case strings.EqualFold(kv[0], c.UpstreamHeader), c.ServiceHeader != "" && strings.EqualFold(kv[0], c.ServiceHeader):
		case kv[0] == ":path":
			req.Target = kv[1]
		case kv[0] == ":authority":
			req.Authority = kv[1]
		case kv[0] == ":method":
			req.Method = kv[1]
		default:
			req.Headers = append(req.Headers, kv)
		}
	}
	return b.Decide(&req, time.Unix(1767225600, 0))
}

// checkDecision compares what a host did with lbcore's decision want.
func checkDecision(c *lbcore.Config, want lbcore.Decision, persist bool, got hostDecision) error {
	if want.Reason == lbcore.ReasonNoService {
		if got.status != 503 || got.body != "no healthy service" || len(got.upstream) != 0 {
			return fmt.Errorf("got status %d body %q upstream %q, want a local 503 %q", got.status, got.body, got.upstream, "no healthy service")
		}
		return nil
	}
	if got.status != 0 {
		return fmt.Errorf("got a local %d %q, want a routed request", got.status, got.body)
	}
	if len(got.upstream) != 1 || len(got.service) != 1 {
		return fmt.Errorf("upstream header %q, service header %q: want exactly one of each", got.upstream, got.service)
	}
	reason := strings.TrimPrefix(got.debug[strings.LastIndex(got.debug, ";")+1:], " reason=")
	if reason != want.Reason.String() && !(persist && reason == lbcore.ReasonPersistence.String()) {
		return fmt.Errorf("reason %q (debug header %q), lbcore's %q", reason, got.debug, want.Reason)
	}
	if want.Reason == lbcore.ReasonHash {
		addrs := make([]string, want.Len())
		for i := range addrs {
			addrs[i] = c.Services[want.At(i)].Address
		}
		wantUp, wantSvc := strings.Join(addrs, ","), c.Services[want.At(0)].Name
		if got.upstream[0] != wantUp || got.service[0] != wantSvc {
			return fmt.Errorf("routed to %q (%s), lbcore's %q (%s)", got.upstream[0], got.service[0], wantUp, wantSvc)
		}
		return nil
	}
	// Round robin, least connection, backup: any enabled services, distinct,
	// as many as upstreamCount allows, the service header naming the first.
	enabled := map[string]string{}
	for _, s := range c.Services {
		if s.Enabled {
			enabled[s.Address] = s.Name
		}
	}
	addrs := strings.Split(got.upstream[0], ",")
	if len(addrs) != min(c.UpstreamCount, len(enabled)) {
		return fmt.Errorf("upstream %q names %d services, want %d", got.upstream[0], len(addrs), min(c.UpstreamCount, len(enabled)))
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if _, ok := enabled[a]; !ok || seen[a] {
			return fmt.Errorf("upstream %q: %q is not a distinct enabled service", got.upstream[0], a)
		}
		seen[a] = true
	}
	if got.service[0] != enabled[addrs[0]] {
		return fmt.Errorf("service header %q, want %q for %s", got.service[0], enabled[addrs[0]], addrs[0])
	}
	return nil
}

func TestCorpusSameDecisionsOnEveryHost(t *testing.T) {
	wasm := module(t)
	reqs := asEnvoyDecodes(corpus(300))
	vm, err := proxytest.NewWasmVMContext(wasm)
	if err != nil {
		t.Fatalf("NewWasmVMContext: %v", err)
	}
	t.Cleanup(func() { vm.Close() })
	// Compile once into hostsim's cache before four hosts start at once.
	if _, err := runHostsim(wasm, corpusConfig(0), 1, hostsim.ProfileEnvoy133, nil); err != nil {
		t.Fatal(err)
	}
	type hostRun struct {
		name string
		run  func(config []byte) ([]hostDecision, error)
	}
	var hosts []hostRun
	for _, prof := range hostsim.Profiles() {
		for _, workers := range []int{1, 4} {
			hosts = append(hosts, hostRun{fmt.Sprintf("hostsim/%s/workers=%d", prof, workers), func(config []byte) ([]hostDecision, error) {
				return runHostsim(wasm, config, workers, prof, reqs)
			}})
		}
	}
	// The SDK's emulator is global: proxytest runs on this goroutine, the
	// hostsim runs beside it.
	hosts = append(hosts, hostRun{"proxytest", func(config []byte) ([]hostDecision, error) {
		return runProxytest(vm, config, reqs)
	}})

	for ci, cc := range corpusConfigs {
		t.Run(cc.name, func(t *testing.T) {
			config := corpusConfig(ci)
			c, err := lbcore.ParseConfig(config)
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			b := lbcore.NewBalancer(c, 0)
			want := make([]lbcore.Decision, len(reqs))
			reasons := map[string]int{}
			for i, r := range reqs {
				want[i] = oracleDecision(b, r)
				reasons[want[i].Reason.String()]++
			}
			t.Logf("lbcore reasons over %d requests: %v", len(reqs), reasons)
			if c.LBMethod.IsHash() && !cc.whole && (reasons["hash"] == 0 || reasons["backup"] == 0) {
				t.Fatalf("corpus does not exercise both %s and its fallback: %v", c.LBMethod, reasons)
			}

			got := make([][]hostDecision, len(hosts))
			errs := make([]error, len(hosts))
			var wg sync.WaitGroup
			for hi := range hosts[:len(hosts)-1] {
				wg.Go(func() { got[hi], errs[hi] = hosts[hi].run(config) })
			}
			last := len(hosts) - 1
			got[last], errs[last] = hosts[last].run(config)
			wg.Wait()

			for hi, host := range hosts {
				if errs[hi] != nil {
					t.Errorf("%s: %v", host.name, errs[hi])
					continue
				}
				bad := 0
				for i := range reqs {
					err := checkDecision(c, want[i], cc.persist, got[hi][i])
					// Beyond lbcore: every host agrees on hash decisions.
					if ref := got[0]; err == nil && ref != nil && want[i].Reason == lbcore.ReasonHash &&
						(firstOf(got[hi][i].upstream) != firstOf(ref[i].upstream) || firstOf(got[hi][i].service) != firstOf(ref[i].service)) {
						err = fmt.Errorf("%q/%q, %s: %q/%q", got[hi][i].upstream, got[hi][i].service, hosts[0].name, ref[i].upstream, ref[i].service)
					}
					if err != nil {
						if bad++; bad <= 5 {
							t.Errorf("%s: request %d %s src=%q dst=%q: %v", host.name, i, briefHeaders(reqs[i].headers), reqs[i].src, reqs[i].dst, err)
						}
					}
				}
				if bad > 0 {
					t.Errorf("%s: %d of %d requests differ", host.name, bad, len(reqs))
				}
			}
		})
	}
}

// asEnvoyDecodes gives each request as Envoy's HTTP/1 codec hands it to a
// filter: an absolute-form target is split into :authority (its host and
// port, without user info) and :path (its path and query), which is why
// DOMAINHASH reads :authority only (RATIONALE.md). A target Envoy would
// refuse (an absolute form without a host) is left as it is.
func asEnvoyDecodes(reqs []corpusRequest) []corpusRequest {
	for i, r := range reqs {
		var target string
		for _, kv := range r.headers {
			if kv[0] == ":path" {
				target = kv[1]
			}
		}
		u, err := url.Parse(target)
		if !strings.Contains(target, "://") || err != nil || u.Host == "" {
			continue
		}
		path := u.EscapedPath()
		if path == "" {
			path = "/"
		}
		if u.RawQuery != "" {
			path += "?" + u.RawQuery
		}
		hs := [][2]string{{":authority", u.Host}}
		for _, kv := range r.headers {
			switch kv[0] {
			case ":authority":
			case ":path":
				hs = append(hs, [2]string{":path", path})
			default:
				hs = append(hs, kv)
			}
		}
		reqs[i].headers = hs
	}
	return reqs
}

// withoutSteering drops the client's copies of hashlb's two headers. The SDK
// emulator's replace changes only the first copy, where Envoy's (setCopy)
// removes every copy and adds one (docs/envoy-host.md), so under the
// emulator the copies would outlive the replace; that the module leaves none
// is checked under hostsim and V8 (TestHostCallsPerRequest, TestV8).
func withoutSteering(headers [][2]string) [][2]string {
	var out [][2]string
	for _, kv := range headers {
		if !strings.EqualFold(kv[0], "x-envoy-original-dst-host") && !strings.EqualFold(kv[0], "x-hashlb-service") {
			out = append(out, kv)
		}
	}
	return out
}
