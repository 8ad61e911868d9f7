package hostile

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// benignCount is the size of the benign corpus, about that of the hostile one.
const benignCount = 320

// Benign returns ordinary requests, about as many as Requests returns, to run
// beside the hostile ones and to compare against: varied paths, queries and
// hosts, cookies, small JWTs, x-forwarded-for chains, SIP Call-IDs and
// client ids, from varied IPv4 and IPv6 clients. Their class is "benign".
func Benign() []Request {
	g := &benignGen{rng: rand.New(rand.NewPCG(11, 111))}
	rs := make([]Request, 0, benignCount)
	for i := range benignCount {
		// Each part draws from g in this order: the same requests every run.
		path := g.path()
		host := g.pick("example.com", "api.example.com", "Shop.Example.org", "cdn.example.net:8443", "www.example.com.", "[2001:db8::1]:443")
		r := Request{Class: "benign", Headers: [][2]string{
			{":method", g.pick("GET", "GET", "GET", "POST", "PUT", "DELETE", "INVITE")},
			{":scheme", g.pick("http", "https")},
			{":authority", host},
			{":path", path},
			{"user-agent", g.pick("curl/8.5.0", "Mozilla/5.0 (X11; Linux x86_64)", "okhttp/4.12.0")},
			{"accept", "*/*"},
		}}
		g.cookies(&r)
		g.bearer(&r)
		g.forwardedFor(&r)
		g.callID(&r, i)
		if g.pct(50) {
			r.add("x-client-id", fmt.Sprintf("client-%d", g.rng.IntN(1000)))
		}
		if g.pct(10) {
			r.add("content-type", "application/json")
		}
		r.Source = g.v4() + fmt.Sprintf(":%d", 1024+g.rng.IntN(60000))
		if g.pct(20) {
			r.Source = "[" + g.v6() + "]" + fmt.Sprintf(":%d", 1024+g.rng.IntN(60000))
		}
		r.Dest = g.pick(dest, "10.1.0.5:443", "[fd00::5]:8443")
		rs = append(rs, r)
	}
	return rs
}

func (r *Request) add(k, v string) { r.Headers = append(r.Headers, [2]string{k, v}) }

// benignGen draws Benign's requests from one seeded generator.
type benignGen struct{ rng *rand.Rand }

func (g *benignGen) pick(xs ...string) string { return xs[g.rng.IntN(len(xs))] }

func (g *benignGen) pct(p int) bool { return g.rng.IntN(100) < p }

func (g *benignGen) v4() string {
	return fmt.Sprintf("%d.%d.%d.%d", []int{10, 172, 198, 203}[g.rng.IntN(4)], g.rng.IntN(256), g.rng.IntN(256), 1+g.rng.IntN(254))
}

func (g *benignGen) v6() string {
	return fmt.Sprintf("2001:db8:%x::%x", g.rng.IntN(16), 1+g.rng.IntN(65535))
}

var benignSegments = []string{"api", "v1", "v2", "users", "orders", "cart", "static", "img", "search", "items", "profile", "health"}

// path is a request path of one to five segments, some with an id and a
// query.
func (g *benignGen) path() string {
	var path strings.Builder
	for n := 1 + g.rng.IntN(5); n > 0; n-- {
		path.WriteString("/" + benignSegments[g.rng.IntN(len(benignSegments))])
	}
	if g.pct(40) {
		fmt.Fprintf(&path, "/%d", g.rng.IntN(100000))
	}
	if g.pct(30) {
		fmt.Fprintf(&path, "?user=u%d&page=%d", g.rng.IntN(500), g.rng.IntN(20))
	}
	return path.String()
}

// cookies adds to some a session cookie (some of them a JWT) and to a few
// a second cookie header.
func (g *benignGen) cookies(r *Request) {
	if !g.pct(40) {
		return
	}
	c := fmt.Sprintf("session=s%x; tenant=t%d", g.rng.Uint32(), g.rng.IntN(20))
	if g.pct(30) {
		c = "session=" + token(fmt.Sprintf(`{"sub":"user-%d","iat":%d}`, g.rng.IntN(300), 1767225600+g.rng.IntN(86400)))
	}
	r.add("cookie", c)
	if g.pct(20) {
		r.add("cookie", fmt.Sprintf("lang=%s; theme=dark", g.pick("en", "de", "fr")))
	}
}

// bearer adds to some an authorization header with a JWT.
func (g *benignGen) bearer(r *Request) {
	if !g.pct(40) {
		return
	}
	claims := fmt.Sprintf(`{"sub":"user-%d","iss":"https://idp.example.com","aud":["hashlb"],"exp":%d,"roles":["a","b"]}`,
		g.rng.IntN(300), 1767225600+g.rng.IntN(86400))
	r.add("authorization", "Bearer "+token(claims))
}

// forwardedFor adds to most an x-forwarded-for of one to three hops.
func (g *benignGen) forwardedFor(r *Request) {
	if !g.pct(60) {
		return
	}
	xff := g.v4()
	if g.pct(30) {
		xff = g.v6() + ", " + xff
	}
	if g.pct(20) {
		xff = g.v4() + ", " + xff
	}
	r.add("x-forwarded-for", xff)
}

// callID adds to half a SIP Call-ID, long or compact (request i's).
func (g *benignGen) callID(r *Request, i int) {
	switch g.rng.IntN(4) {
	case 0:
		r.add("call-id", fmt.Sprintf("%x@sip.example.com", g.rng.Uint64()))
	case 1:
		r.add("i", fmt.Sprintf("%d-%d@pbx", i, g.rng.IntN(1000)))
	}
}
