package corpus

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// Services is the pool every corpus config balances over: weights, an IPv6
// address, a hashId and a disabled service.
const Services = `[
    {"name": "s1", "address": "10.0.0.11:8080"},
    {"name": "s2", "address": "10.0.0.12:8080", "weight": 2},
    {"name": "s3", "address": "[fd00::13]:8080"},
    {"name": "s4", "address": "10.0.0.14:8080", "hashId": "pool-4", "weight": 3},
    {"name": "s5", "address": "10.0.0.15:8080", "enabled": false},
    {"name": "s6", "address": "10.0.0.16:9090"}
  ]`

// Config is one configuration of the corpus.
type Config struct {
	Name string
	// JSON is the configuration without its closing brace unless Whole:
	// Complete adds the services.
	JSON    string
	Persist bool // decisions may come from the persistence table
	Whole   bool // JSON is the whole configuration, with its own services
}

// Configs has one configuration per lbMethod, each with options that change
// its key (hashLength, masks, trusted hops, upstreamCount), plus persistence
// over shared data and a pool with nothing enabled.
var Configs = []Config{
	{Name: "URLHASH", JSON: `{"lbMethod": "URLHASH", "hashLength": 40, "upstreamCount": 2`},
	{Name: "DOMAINHASH", JSON: `{"lbMethod": "DOMAINHASH", "hashLength": 12, "backupLBMethod": "ROUNDROBIN"`},
	{Name: "DESTINATIONIPHASH", JSON: `{"lbMethod": "DESTINATIONIPHASH", "netmask": "255.255.0.0", "v6NetmaskLen": 48`},
	{Name: "SOURCEIPHASH", JSON: `{"lbMethod": "SOURCEIPHASH", "netmask": "255.255.255.0", "v6NetmaskLen": 64, "trustedForwardedHops": 1, "upstreamCount": 3`},
	{Name: "SRCIPDESTIPHASH", JSON: `{"lbMethod": "SRCIPDESTIPHASH", "netmask": "255.255.255.0", "backupLBMethod": "ROUNDROBIN"`},
	{Name: "SRCIPSRCPORTHASH", JSON: `{"lbMethod": "SRCIPSRCPORTHASH", "v6NetmaskLen": 64, "upstreamCount": 2`},
	{Name: "CALLIDHASH", JSON: `{"lbMethod": "CALLIDHASH", "backupLBMethod": "ROUNDROBIN"`},
	{Name: "TOKEN", JSON: `{"lbMethod": "TOKEN", "token": "${request.header.x-tenant|lower||request.cookie.tenant||request.header.authorization|jwt(\"sub\")}", "upstreamCount": 2`},
	{Name: "LEASTCONNECTION", JSON: `{"lbMethod": "LEASTCONNECTION", "upstreamCount": 2`},
	{Name: "ROUNDROBIN", JSON: `{"lbMethod": "ROUNDROBIN"`},
	{Name: "SOURCEIPHASH+persistence", Persist: true, JSON: `{"lbMethod": "SOURCEIPHASH", "persistence": {"keys": ["${client.ip}", "${request.header.x-client-id}"]}`},
	{Name: "all-disabled", Whole: true, JSON: `{"lbMethod": "URLHASH", "services": [
    {"name": "d1", "address": "10.0.0.21:8080", "enabled": false},
    {"name": "d2", "address": "10.0.0.22:8080", "enabled": false}]}`},
}

// Complete returns the configuration's JSON: a config that is not Whole is
// completed with services (Services, or another pool of the same names) and
// the debug header.
func (c Config) Complete(services string) []byte {
	if c.Whole {
		return []byte(c.JSON)
	}
	return []byte(c.JSON + `, "debugHeader": true, "services": ` + services + "}")
}

// PolicyConfig is a configuration of Configs as the load-balancing policy
// takes it (PolicyConfigs).
type PolicyConfig struct {
	Index int    // in Configs
	Name  string // Configs[Index].Name
	Data  []byte
}

// PolicyConfigs are the configurations of Configs that are not Whole, as the
// load-balancing policy takes them: no services (the cluster's hosts are
// its services) and none of the header hand-off options it does not serve
// (debugHeader, upstreamCount). Which of them it serves is its ParseConfig's
// to say.
func PolicyConfigs() ([]PolicyConfig, error) {
	var out []PolicyConfig
	for i, cc := range Configs {
		if cc.Whole {
			continue
		}
		data, err := Rewrite(cc.Complete("[]"), map[string]any{"services": nil, "debugHeader": nil, "upstreamCount": nil})
		if err != nil {
			return nil, err
		}
		out = append(out, PolicyConfig{Index: i, Name: cc.Name, Data: data})
	}
	return out, nil
}

// Rewrite returns the configuration data (a whole JSON object) with each
// top-level field of set replaced or added (a nil value removes it): the
// way a test moves a corpus configuration onto other addresses or another
// upstreamCount. The field order becomes alphabetical.
func Rewrite(data []byte, set map[string]any) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("corpus: %v: %s", err, data)
	}
	for k, v := range set {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	return json.Marshal(m)
}

// Request is one request of the corpus: headers as Envoy hands them to a
// filter (lower-case names, pseudo-headers first) and the connection's
// addresses ("" when the host has no such property).
type Request struct {
	Headers      [][2]string
	Source, Dest string
}

// Requests returns n requests that cover every method's input, their
// absence and malformed forms, and client copies of the headers hashlb
// sets. The same n gives the same requests.
func Requests(n int) []Request {
	g := &gen{rng: rand.New(rand.NewPCG(3, 33))}
	out := make([]Request, 0, n)
	for i := 0; i < n; i++ {
		var r Request
		// Each part draws from g in this order: the same n, the same requests.
		g.pseudoHeaders(&r)
		g.forwardedFor(&r)
		g.callID(&r)
		g.tokenInput(&r)
		g.forgedCopies(&r)
		r.add("user-agent", "corpus/1")
		r.add("x-padding", strings.Repeat("p", g.rng.IntN(300)))
		r.Source, r.Dest = g.addr(), g.addr()
		out = append(out, r)
	}
	return out
}

func (r *Request) add(k, v string) { r.Headers = append(r.Headers, [2]string{k, v}) }

// gen draws the corpus's requests from one seeded generator.
type gen struct{ rng *rand.Rand }

func (g *gen) pick(xs ...string) string { return xs[g.rng.IntN(len(xs))] }

func (g *gen) pct(p int) bool { return g.rng.IntN(100) < p }

func (g *gen) v4() string {
	return fmt.Sprintf("10.%d.%d.%d", g.rng.IntN(3), g.rng.IntN(4), g.rng.IntN(256))
}

func (g *gen) v6() string {
	return fmt.Sprintf("2001:db8:%x:%x::%x", g.rng.IntN(3), g.rng.IntN(3), g.rng.IntN(65536))
}

// addr is a connection address: mostly IPv4 with a port, also IPv6,
// v4-mapped, without a port, malformed or absent.
func (g *gen) addr() string {
	switch g.rng.IntN(10) {
	case 0:
		return "" // no such property
	case 1:
		return "[" + g.v6() + "]:" + fmt.Sprint(g.rng.IntN(65536))
	case 2:
		return "[::ffff:" + g.v4() + "]:" + fmt.Sprint(1+g.rng.IntN(65535)) // v4-mapped: one client, one key
	case 3:
		return g.v4() + ":0" // no port
	case 4:
		return "not-an-address"
	default:
		return g.v4() + ":" + fmt.Sprint(1024+g.rng.IntN(64000))
	}
}

// pseudoHeaders adds :method, :scheme, :authority (absent for some) and
// :path: absent, absolute-form, longer than hashLength, or a path with a
// query.
func (g *gen) pseudoHeaders(r *Request) {
	r.add(":method", g.pick("GET", "GET", "POST", "INVITE", "PUT"))
	r.add(":scheme", "http")
	host := g.pick("example.com", "Example.COM", "api.example.com:8443", "example.com.", "shop.example.org",
		"[2001:db8::1]:443", "10.9.9.9:80", "a-very-long-subdomain.example.net", "")
	if host != "" {
		r.add(":authority", host)
	}
	switch g.rng.IntN(12) {
	case 0: // no :path at all: URLHASH has no input
	case 1:
		r.add(":path", "http://"+g.pick("Other.example.com", "user@x.example.com:81", "[2001:db8::2]:8080")+"/abs/"+fmt.Sprint(g.rng.IntN(20))+"?q="+fmt.Sprint(g.rng.IntN(5)))
	case 2:
		r.add(":path", "/"+strings.Repeat("long-segment/", 3+g.rng.IntN(6))+fmt.Sprint(g.rng.IntN(7))) // beyond hashLength
	default:
		p := "/" + g.pick("a", "b", "api/v1/users", "static/img", "cart") + "/" + fmt.Sprint(g.rng.IntN(40))
		if g.pct(40) {
			p += "?id=" + fmt.Sprint(g.rng.IntN(9)) + "&x=" + g.pick("1", "2")
		}
		r.add(":path", p)
	}
}

// forwardedFor adds x-forwarded-for to most: IPv4, IPv6 then IPv4, or junk.
func (g *gen) forwardedFor(r *Request) {
	if !g.pct(70) {
		return
	}
	xff := g.v4()
	if g.pct(30) {
		xff = g.v6() + ", " + xff
	}
	if g.pct(10) {
		xff = "unknown"
	}
	r.add("x-forwarded-for", xff)
}

// callID adds CALLIDHASH's input to some: call-id, the compact i, or empty.
func (g *gen) callID(r *Request) {
	switch g.rng.IntN(4) {
	case 0:
		r.add("call-id", fmt.Sprintf("%d-%x@sip.example.com", g.rng.IntN(30), g.rng.IntN(4)))
	case 1:
		r.add("i", fmt.Sprintf("compact-%d@pbx", g.rng.IntN(30)))
	case 2:
		r.add("call-id", "")
	}
}

// tokenInput adds what a TOKEN expression reads: a header, a cookie, a JWT
// (or a bearer token that is not one), and to half x-client-id.
func (g *gen) tokenInput(r *Request) {
	switch g.rng.IntN(5) {
	case 0:
		r.add("x-tenant", g.pick("Acme", "acme", "Globex", "Initech", "umbrella"))
	case 1:
		r.add("cookie", "a=1; tenant="+g.pick("t1", "t2", "t3")+"; b=2")
	case 2:
		r.add("authorization", jwt(g.pick("alice", "bob", "carol", "dave")))
	case 3:
		r.add("authorization", "Bearer not-a-jwt")
	}
	if g.pct(50) {
		r.add("x-client-id", fmt.Sprint("client-", g.rng.IntN(25)))
	}
}

// forgedCopies adds, to some, client copies of the headers hashlb sets: a
// client must never choose the upstream.
func (g *gen) forgedCopies(r *Request) {
	if !g.pct(30) {
		return
	}
	r.add("x-envoy-original-dst-host", g.pick("6.6.6.6:666", "10.0.0.11:8080", "evil.example.com:80"))
	if g.pct(50) {
		r.add("x-envoy-original-dst-host", "7.7.7.7:777")
	}
	r.add("x-hashlb-service", "evil")
}

// jwt is an unsigned bearer JWT whose subject is sub.
func jwt(sub string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return "Bearer " + enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(`{"sub":"`+sub+`"}`)) + ".sig"
}

// AsEnvoyDecodes gives each request as Envoy's HTTP/1 codec hands it to a
// filter: an absolute-form target is split into :authority (its host and
// port, without user info) and :path (its path and query), which is why
// DOMAINHASH reads :authority only (RATIONALE.md). A target Envoy would
// refuse (an absolute form without a host) is left as it is. reqs is
// changed in place and returned.
func AsEnvoyDecodes(reqs []Request) []Request {
	for i, r := range reqs {
		var target string
		for _, kv := range r.Headers {
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
		for _, kv := range r.Headers {
			switch kv[0] {
			case ":authority":
			case ":path":
				hs = append(hs, [2]string{":path", path})
			default:
				hs = append(hs, kv)
			}
		}
		reqs[i].Headers = hs
	}
	return reqs
}

// Now is the time every oracle decision is made at.
var Now = time.Unix(1767225600, 0)

// Oracle is lbcore's decision for r, built from the request as the filter
// sees it: pseudo-headers split out, client copies of hashlb's headers gone.
func Oracle(b *lbcore.Balancer, r Request) lbcore.Decision {
	return b.Decide(LBRequest(b.Config(), r), Now)
}

// LBRequest is r as lbcore reads it under configuration c.
func LBRequest(c *lbcore.Config, r Request) *lbcore.Request {
	req := lbcore.Request{Source: r.Source, Dest: r.Dest}
	for _, kv := range r.Headers {
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
	return &req
}

// Outcome is what one request left behind on a host.
type Outcome struct {
	Upstream []string // every value of the upstream header after the filter
	Service  []string // every value of the service header
	Status   int      // local reply status, 0 when the request went upstream
	Body     string   // local reply body
	Debug    string   // x-hashlb-decision on the response
}

// Check compares what a host did with lbcore's decision want under c. With
// persist, a decision the debug header says came from the persistence
// table is accepted for a hash decision when it names lbcore's services.
func Check(c *lbcore.Config, want lbcore.Decision, persist bool, got Outcome) error {
	if want.Reason == lbcore.ReasonNoService {
		if got.Status != 503 || got.Body != "no healthy service" || len(got.Upstream) != 0 {
			return fmt.Errorf("got status %d body %q upstream %q, want a local 503 %q", got.Status, got.Body, got.Upstream, "no healthy service")
		}
		return nil
	}
	if got.Status != 0 {
		return fmt.Errorf("got a local %d %q, want a routed request", got.Status, got.Body)
	}
	if len(got.Upstream) != 1 || len(got.Service) != 1 {
		return fmt.Errorf("upstream header %q, service header %q: want exactly one of each", got.Upstream, got.Service)
	}
	reason := Reason(got.Debug)
	if reason != want.Reason.String() && !(persist && reason == lbcore.ReasonPersistence.String()) {
		return fmt.Errorf("reason %q (debug header %q), lbcore's %q", reason, got.Debug, want.Reason)
	}
	if want.Reason == lbcore.ReasonHash {
		addrs := make([]string, want.Len())
		for i := range addrs {
			addrs[i] = c.Services[want.At(i)].Address
		}
		wantUp, wantSvc := strings.Join(addrs, ","), c.Services[want.At(0)].Name
		if got.Upstream[0] != wantUp || got.Service[0] != wantSvc {
			return fmt.Errorf("routed to %q (%s), lbcore's %q (%s)", got.Upstream[0], got.Service[0], wantUp, wantSvc)
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
	addrs := strings.Split(got.Upstream[0], ",")
	if len(addrs) != min(c.UpstreamCount, len(enabled)) {
		return fmt.Errorf("upstream %q names %d services, want %d", got.Upstream[0], len(addrs), min(c.UpstreamCount, len(enabled)))
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if _, ok := enabled[a]; !ok || seen[a] {
			return fmt.Errorf("upstream %q: %q is not a distinct enabled service", got.Upstream[0], a)
		}
		seen[a] = true
	}
	if got.Service[0] != enabled[addrs[0]] {
		return fmt.Errorf("service header %q, want %q for %s", got.Service[0], enabled[addrs[0]], addrs[0])
	}
	return nil
}

// Reason is the reason a debug header (x-hashlb-decision) gives: the value
// of its last field, "reason=hash" → "hash".
func Reason(debug string) string {
	return strings.TrimPrefix(debug[strings.LastIndex(debug, ";")+1:], " reason=")
}

// HeaderValues returns every value of the header name (any case).
func HeaderValues(headers [][2]string, name string) []string {
	var out []string
	for _, kv := range headers {
		if strings.EqualFold(kv[0], name) {
			out = append(out, kv[1])
		}
	}
	return out
}

// Brief formats headers for a failure message, long values clipped.
func Brief(headers [][2]string) string {
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
