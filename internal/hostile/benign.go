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
	rng := rand.New(rand.NewPCG(11, 111))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	pct := func(p int) bool { return rng.IntN(100) < p }
	v4 := func() string {
		return fmt.Sprintf("%d.%d.%d.%d", []int{10, 172, 198, 203}[rng.IntN(4)], rng.IntN(256), rng.IntN(256), 1+rng.IntN(254))
	}
	v6 := func() string { return fmt.Sprintf("2001:db8:%x::%x", rng.IntN(16), 1+rng.IntN(65535)) }
	segments := []string{"api", "v1", "v2", "users", "orders", "cart", "static", "img", "search", "items", "profile", "health"}
	rs := make([]Request, 0, benignCount)
	for i := range benignCount {
		var path strings.Builder
		for n := 1 + rng.IntN(5); n > 0; n-- {
			path.WriteString("/" + segments[rng.IntN(len(segments))])
		}
		if pct(40) {
			fmt.Fprintf(&path, "/%d", rng.IntN(100000))
		}
		if pct(30) {
			fmt.Fprintf(&path, "?user=u%d&page=%d", rng.IntN(500), rng.IntN(20))
		}
		host := pick("example.com", "api.example.com", "Shop.Example.org", "cdn.example.net:8443", "www.example.com.", "[2001:db8::1]:443")
		r := Request{Class: "benign", Headers: [][2]string{
			{":method", pick("GET", "GET", "GET", "POST", "PUT", "DELETE", "INVITE")},
			{":scheme", pick("http", "https")},
			{":authority", host},
			{":path", path.String()},
			{"user-agent", pick("curl/8.5.0", "Mozilla/5.0 (X11; Linux x86_64)", "okhttp/4.12.0")},
			{"accept", "*/*"},
		}}
		add := func(k, v string) { r.Headers = append(r.Headers, [2]string{k, v}) }
		if pct(40) {
			c := fmt.Sprintf("session=s%x; tenant=t%d", rng.Uint32(), rng.IntN(20))
			if pct(30) {
				c = "session=" + token(fmt.Sprintf(`{"sub":"user-%d","iat":%d}`, rng.IntN(300), 1767225600+rng.IntN(86400)))
			}
			add("cookie", c)
			if pct(20) {
				add("cookie", fmt.Sprintf("lang=%s; theme=dark", pick("en", "de", "fr")))
			}
		}
		if pct(40) {
			claims := fmt.Sprintf(`{"sub":"user-%d","iss":"https://idp.example.com","aud":["hashlb"],"exp":%d,"roles":["a","b"]}`,
				rng.IntN(300), 1767225600+rng.IntN(86400))
			add("authorization", "Bearer "+token(claims))
		}
		if pct(60) {
			xff := v4()
			if pct(30) {
				xff = v6() + ", " + xff
			}
			if pct(20) {
				xff = v4() + ", " + xff
			}
			add("x-forwarded-for", xff)
		}
		switch rng.IntN(4) {
		case 0:
			add("call-id", fmt.Sprintf("%x@sip.example.com", rng.Uint64()))
		case 1:
			add("i", fmt.Sprintf("%d-%d@pbx", i, rng.IntN(1000)))
		}
		if pct(50) {
			add("x-client-id", fmt.Sprintf("client-%d", rng.IntN(1000)))
		}
		if pct(10) {
			add("content-type", "application/json")
		}
		r.Source = v4() + fmt.Sprintf(":%d", 1024+rng.IntN(60000))
		if pct(20) {
			r.Source = "[" + v6() + "]" + fmt.Sprintf(":%d", 1024+rng.IntN(60000))
		}
		r.Dest = pick(dest, "10.1.0.5:443", "[fd00::5]:8443")
		rs = append(rs, r)
	}
	return rs
}
