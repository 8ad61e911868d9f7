package hostile

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
)

// MaxValue is the largest header value in either corpus: 60 KiB, Envoy's
// default limit on a request's headers (max_request_headers_kb). A request
// with thousands of header lines may exceed it in total, as it does behind an
// Envoy configured with a higher limit; no single value does.
const MaxValue = 60 << 10

// The connection's addresses of every request whose class is not about them.
const (
	source = "203.0.113.10:40000"
	dest   = "192.168.0.1:8080"
)

func init() {
	classes = []class{
		{"jwt-deep-array", jwtDeepArray},
		{"jwt-deep-object", jwtDeepObject},
		{"jwt-huge", jwtHuge},
		{"jwt-malformed", jwtMalformed},
		{"long-inputs", longInputs},
		{"replace-quadratic", replaceQuadratic},
		{"many-header-lines", manyHeaderLines},
		{"repeated-forged", repeatedForged},
		{"bad-bytes", badBytes},
		{"bad-addresses", badAddresses},
		{"absolute-form", absoluteForm},
		{"split-xff", splitXFF},
		{"split-cookie", splitCookie},
		{"missing-pseudo", missingPseudo},
		{"arena-edge", arenaEdge},
	}
}

// request returns a GET request of class with the four pseudo-headers, then
// extra, from source to dest.
func request(class, path, authority string, extra ...[2]string) Request {
	hs := [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", authority}, {":path", path}}
	return Request{Class: class, Headers: append(hs, extra...), Source: source, Dest: dest}
}

func hdr(name, value string) [2]string { return [2]string{name, value} }

var b64 = base64.RawURLEncoding.EncodeToString

// jwtHeader is the JOSE header of every token built here.
var jwtHeader = b64([]byte(`{"alg":"none","typ":"JWT"}`))

// token returns a JWT (header.payload.signature) with the given JSON payload.
func token(payload string) string { return jwtHeader + "." + b64([]byte(payload)) + ".c2lnbmF0dXJl" }

// fit returns build(n) for the largest n whose value is at most size bytes;
// the length of build(n) must not shrink as n grows, and build(0) must fit.
func fit(size int, build func(n int) string) string {
	lo, hi := 0, 1 // build(lo) fits, build(hi) does not
	for len(build(hi)) <= size {
		lo, hi = hi, hi*2
	}
	for hi-lo > 1 {
		if mid := (lo + hi) / 2; len(build(mid)) <= size {
			lo = mid
		} else {
			hi = mid
		}
	}
	return build(lo)
}

// deepSizes are the lengths of the header values carrying deeply nested JSON,
// from 1 KiB to Envoy's limit; 13 KiB traps V8 (Envoy's engine) under a
// recursive JSON walk.
var deepSizes = []int{1 << 10, 2 << 10, 4 << 10, 8 << 10, 13 << 10, 16 << 10, 24 << 10, 32 << 10, 48 << 10, MaxValue}

// jwtDeep makes the requests of a deep-JSON class: for every size, a token
// whose payload is deep(n) alone, after a readable claim, as the claim
// itself, and unclosed, in authorization and in the session cookie.
func jwtDeep(class string, deep func(n int) string, unclosed func(n int) string) []Request {
	shapes := []struct {
		carrier string // "authorization" or "cookie"
		payload func(n int) string
	}{
		{"authorization", deep},
		{"cookie", deep},
		{"authorization", func(n int) string { return `{"sub":"alice","iat":1767225600,"x":` + deep(n) + `}` }},
		{"cookie", func(n int) string { return `{"sub":"alice","x":` + deep(n) + `}` }},
		{"authorization", func(n int) string { return `{"sub":` + deep(n) + `}` }},
		{"authorization", unclosed},
	}
	var rs []Request
	for _, size := range deepSizes {
		for i, s := range shapes {
			var h [2]string
			switch s.carrier {
			case "authorization":
				prefix := "Bearer "
				if i == 5 {
					prefix = "" // a bare token is read too
				}
				h = hdr("authorization", fit(size, func(n int) string { return prefix + token(s.payload(n)) }))
			default:
				h = hdr("cookie", fit(size, func(n int) string { return "lang=en; session=" + token(s.payload(n)) }))
			}
			rs = append(rs, request(class, fmt.Sprintf("/deep/%d/%d", size, i), "api.example.com", h))
		}
	}
	return rs
}

func jwtDeepArray() []Request {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	unclosed := func(n int) string { return strings.Repeat("[", n) }
	return jwtDeep("jwt-deep-array", deep, unclosed)
}

func jwtDeepObject() []Request {
	deep := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	unclosed := func(n int) string { return strings.Repeat(`{"a":[`, n) }
	rs := jwtDeep("jwt-deep-object", deep, unclosed)
	// Objects and arrays alternating, and the deep part under the claim's path.
	mixed := func(n int) string { return strings.Repeat(`{"a":[`, n) + strings.Repeat("]}", n) }
	under := func(n int) string { return strings.Repeat(`{"sub":`, n) + `"x"` + strings.Repeat("}", n) }
	for _, size := range []int{13 << 10, MaxValue} {
		for i, p := range []func(int) string{mixed, under} {
			v := fit(size, func(n int) string { return "Bearer " + token(p(n)) })
			rs = append(rs, request("jwt-deep-object", fmt.Sprintf("/deep/mixed/%d/%d", size, i), "api.example.com", hdr("authorization", v)))
		}
	}
	return rs
}

// jwtHuge: tokens as large as a header may be, but flat: long claims, many
// claims, long arrays, long header and signature segments.
func jwtHuge() []Request {
	shapes := []func(n int) string{
		func(n int) string { return token(`{"sub":"` + strings.Repeat("u", n) + `"}`) },
		func(n int) string {
			var b strings.Builder
			b.WriteString("{")
			for i := range n {
				fmt.Fprintf(&b, `"c%d":%d,`, i, i)
			}
			b.WriteString(`"sub":"bob"}`)
			return token(b.String())
		},
		func(n int) string {
			return token(`{"sub":"carol","n":[` + strings.TrimSuffix(strings.Repeat("12345,", n+1), ",") + `]}`)
		},
		func(n int) string {
			return token(`{"sub":[` + strings.TrimSuffix(strings.Repeat(`"x",`, n+1), ",") + `]}`)
		},
		func(n int) string { return token(`{` + strings.Repeat(`"sub":"dup",`, n) + `"z":0}`) },
		func(n int) string { return token(`{"sub":"` + strings.Repeat(`\u00e9`, n) + `"}`) },
		func(n int) string {
			return b64([]byte(`{"alg":"none","x":"`+strings.Repeat("h", n)+`"}`)) + "." + b64([]byte(`{"sub":"dave"}`)) + ".sig"
		},
		func(n int) string {
			return jwtHeader + "." + b64([]byte(`{"sub":"erin"}`)) + "." + strings.Repeat("s", n)
		},
	}
	var rs []Request
	for _, size := range []int{16 << 10, MaxValue} {
		for i, shape := range shapes {
			v := fit(size, func(n int) string { return "Bearer " + shape(n) })
			rs = append(rs, request("jwt-huge", fmt.Sprintf("/huge/%d/%d", size, i), "api.example.com", hdr("authorization", v)))
		}
		for i, shape := range shapes[:3] {
			v := fit(size, func(n int) string { return "session=" + shape(n) })
			rs = append(rs, request("jwt-huge", fmt.Sprintf("/huge/cookie/%d/%d", size, i), "api.example.com", hdr("cookie", v)))
		}
	}
	return rs
}

// jwtMalformed: every way a token can be broken.
func jwtMalformed() []Request {
	good := token(`{"sub":"mallory"}`)
	parts := strings.Split(good, ".")
	tokens := []string{
		"Bearer", "Bearer ", "Bearer  ", "bearer", "BEARER " + good, "Bearer\t" + good, "Bearer\x00" + good,
		"Bearer " + good + "\x00", "Basic dXNlcjpwYXNz", "",
		"Bearer eyJ!!!.e$%^&*.sig", "Bearer " + parts[0] + ".@@@@." + parts[2],
		"Bearer " + parts[0] + "." + base64.StdEncoding.EncodeToString([]byte(`{"sub":"std+/?>"}`)) + ".sig",
		"Bearer " + parts[0] + "." + parts[1] + "==." + parts[2],
		"Bearer " + parts[0] + "." + parts[1][:len(parts[1])/2] + "=" + parts[1][len(parts[1])/2:] + "." + parts[2],
		"Bearer " + parts[0] + ".a." + parts[2], // a payload length base64 cannot have
		"Bearer " + parts[0] + "." + parts[1],   // one dot
		"Bearer " + good + ".extra",             // three dots
		"Bearer " + parts[0] + parts[1] + parts[2],
		"Bearer " + good + strings.Repeat(".", 1000),
		"Bearer ..", "Bearer ...", "Bearer " + strings.Repeat(".", 4096),
		"Bearer " + parts[0] + ".\x00" + parts[1] + "." + parts[2],
		"Bearer " + parts[0] + "." + parts[1] + "\n." + parts[2],
		"Bearer " + token("{\"sub\":\"a\x00b\"}"),
		"Bearer " + token("{\"sub\":\"\xff\xfe\"}"),
		"Bearer " + token("{\"sub\":\"\xc3\x28\xc0\xaf\xed\xa0\x80\"}"),
		"Bearer " + token(`{"sub":"\ud800"}`),
		"Bearer " + token(`hello`), "Bearer " + token(`"sub"`), "Bearer " + token(`null`), "Bearer " + token(``),
		"Bearer " + token(`{"sub":12345}`), "Bearer " + token(`{"sub":{"x":1}}`), "Bearer " + token(`{"sub":null}`),
		"Bearer " + token(`{"sub":true}`), "Bearer " + token(`{}`), "Bearer " + token(`[]`),
		"Bearer " + token(`{"sub":1e999999999}`), "Bearer " + token(`{"sub":"a"}xyz`), "Bearer " + token(`{"sub":"a"`),
		"Bearer " + token(`{"sub":"a",}`), "Bearer " + token(`{"su\u0062":"escaped-key"}`),
		"Bearer " + token("\xef\xbb\xbf"+`{"sub":"bom"}`),
	}
	var rs []Request
	for i, v := range tokens {
		rs = append(rs, request("jwt-malformed", fmt.Sprintf("/malformed/%d", i), "api.example.com", hdr("authorization", v)))
		if i%3 == 0 {
			c := "session=" + strings.TrimPrefix(v, "Bearer ")
			rs = append(rs, request("jwt-malformed", fmt.Sprintf("/malformed/cookie/%d", i), "api.example.com", hdr("cookie", c)))
		}
	}
	return rs
}

// text returns n bytes drawn from alphabet by rng.
func text(rng *rand.Rand, alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

const urlSafe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~"

// longInputs: every input an expression or method reads, at Envoy's limit.
func longInputs() []Request {
	rng := rand.New(rand.NewPCG(5, 55))
	long := func(prefix string) string { return prefix + text(rng, urlSafe, MaxValue-len(prefix)) }
	label := func() string { return text(rng, "abcdefghijklmnopqrstuvwxyz0123456789", 62) + "." }
	host := strings.Repeat(label(), MaxValue/63+1)[:MaxValue]
	var pairs strings.Builder
	for i := 0; pairs.Len() < MaxValue-32; i++ {
		fmt.Fprintf(&pairs, "c%d=%s; ", i, text(rng, urlSafe, 8))
	}
	cookies := pairs.String() + "session=last"
	const class = "long-inputs"
	rs := []Request{
		request(class, long("/"), "example.com"),
		request(class, long("/q?"), "example.com"),
		request(class, long("/q?user="), "example.com"),
		request(class, "/q?"+strings.Repeat("a=1&", (MaxValue-3)/4), "example.com"),
		request(class, "/long-host", host),
		request(class, "/long-host", host[:MaxValue-5]+":8080"),
		request(class, "/long-host-header", "example.com", hdr("host", host)),
		request(class, "/", "example.com", hdr("cookie", long("session="))),
		request(class, "/", "example.com", hdr("cookie", cookies)),
		request(class, "/", "example.com", hdr("x-client-id", long(""))),
		request(class, "/", "example.com", hdr("call-id", long(""))),
		request(class, "/", "example.com", hdr("i", long(""))),
		request(class, "/", "example.com", hdr("authorization", long("Bearer "))),
		request(class, "/", "example.com", hdr("x-forwarded-for", long(""))),
		request(class, "/", "example.com", hdr("user-agent", long(""))),
		request(class, strings.Repeat("/", MaxValue), "example.com"),
		request(class, "/"+strings.Repeat("%", MaxValue-1), "example.com"),
		request(class, "/"+strings.Repeat("?#", (MaxValue-1)/2), "example.com"),
	}
	// Everything long at once.
	rs = append(rs, request(class, long("/all?user="), host,
		hdr("host", host), hdr("cookie", long("session=")), hdr("x-client-id", long("")), hdr("call-id", long("")),
		hdr("i", long("")), hdr("authorization", long("Bearer ")), hdr("x-forwarded-for", long(""))))
	return rs
}

// The module's arena for a request's host copies, and the one larger copy
// it keeps beside it (filter/hostmem_wasip1.go): values over them are
// refused, never allocated.
const (
	arenaBytes    = 128 << 10
	overflowBytes = 1 << 20
)

// arenaEdge: values just over the arena, of 1 MiB and just over it (Envoy's
// max_request_headers_kb can be raised to 8 MiB), and a header map over
// 1 MiB made of values that each fit.
func arenaEdge() []Request {
	rng := rand.New(rand.NewPCG(6, 66))
	long := func(n int) string { return text(rng, urlSafe, n) }
	const class = "arena-edge"
	return []Request{
		request(class, "/arena", "example.com", hdr("x-client-id", long(arenaBytes+1))),
		request(class, "/"+long(arenaBytes), "example.com"),
		request(class, "/overflow", "example.com", hdr("cookie", "session="+long(overflowBytes-64))),
		request(class, "/over", strings.Repeat("h", overflowBytes+24)), // 1,048,600 bytes of :authority
		request(class, "/over", "example.com", hdr("authorization", "Bearer "+long(overflowBytes+1))),
		request(class, "/map", "example.com", hdr("x-client-id", long(600<<10)), hdr("cookie", "session="+long(600<<10))),
	}
}

// replaceQuadratic: runs of 'a' without 'b', for the configs' replace("a.*b|a", "x"),
// which rescans the rest of the input after every match of its short branch.
func replaceQuadratic() []Request {
	const class = "replace-quadratic"
	a := func(n int) string { return strings.Repeat("a", n) }
	const n = 16 << 10
	rs := []Request{
		request(class, "/"+a(n-1), "example.com"),
		request(class, "/", "example.com", hdr("cookie", "session="+a(n))),
		request(class, "/", "example.com", hdr("x-client-id", a(n))),
		request(class, "/", "example.com", hdr("authorization", "Bearer "+a(n))),
		request(class, "/"+a(n-1), "example.com", hdr("cookie", "session="+a(n)), hdr("x-client-id", a(n)), hdr("authorization", "Bearer "+a(n))),
		request(class, "/"+a(4<<10), "example.com"),
		request(class, "/"+a(8<<10), "example.com"),
		request(class, "/"+a(n-2)+"b", "example.com"),
		request(class, "/"+strings.Repeat(a(99)+"c", n/100), "example.com"),
		request(class, "/"+strings.Repeat("ab", n/2), "example.com"),
		request(class, "/"+a(n-1), "example.com", hdr("cookie", "session="+token(`{"sub":"`+a(n/2)+`"}`))),
	}
	return rs
}

// caseVariants are spellings of one header name; Envoy lower-cases names,
// and a filter must strip every one of them.
func caseVariants(name string) []string {
	var mixed, alt []byte
	for i := 0; i < len(name); i++ {
		c := name[i]
		if i%2 == 0 && 'a' <= c && c <= 'z' {
			mixed = append(mixed, c-'a'+'A')
		} else {
			mixed = append(mixed, c)
		}
		if i%2 == 1 && 'a' <= c && c <= 'z' {
			alt = append(alt, c-'a'+'A')
		} else {
			alt = append(alt, c)
		}
	}
	title := []byte(name)
	for i := range title {
		if (i == 0 || title[i-1] == '-') && 'a' <= title[i] && title[i] <= 'z' {
			title[i] -= 'a' - 'A'
		}
	}
	return []string{name, strings.ToUpper(name), string(title), string(mixed), string(alt)}
}

const (
	upstreamHeader = "x-envoy-original-dst-host"
	serviceHeader  = "x-hashlb-service"
)

// forgedValues are what a client would put in the upstream header.
var forgedValues = []string{
	"6.6.6.6:666", "127.0.0.1:22", "10.0.0.1:80,6.6.6.6:1", "169.254.169.254:80", "[::1]:22",
	"6.6.6.6:666, 10.0.0.1:80", "", "localhost:6379", "10.0.0.1:80",
}

// manyHeaderLines: thousands of lines of one name, or of distinct names.
func manyHeaderLines() []Request {
	const class, n = "many-header-lines", 3000
	rng := rand.New(rand.NewPCG(7, 77))
	lines := func(names []string, value func(i int) string) [][2]string {
		hs := make([][2]string, n)
		for i := range hs {
			hs[i] = hdr(names[i%len(names)], value(i))
		}
		return hs
	}
	ip := func(int) string { return fmt.Sprintf("10.%d.%d.%d", rng.IntN(256), rng.IntN(256), rng.IntN(256)) }
	one := func(s string) []string { return []string{s} }
	var rs []Request
	add := func(path string, hs ...[2]string) { rs = append(rs, request(class, path, "example.com", hs...)) }
	add("/many/xff", lines(one("x-forwarded-for"), ip)...)
	add("/many/xff-variants", lines(caseVariants("x-forwarded-for"), ip)...)
	cookie := lines(one("cookie"), func(i int) string { return fmt.Sprintf("c%d=%d", i, i) })
	cookie[n-1] = hdr("cookie", "session="+token(`{"sub":"last-line"}`))
	add("/many/cookie", cookie...)
	add("/many/upstream", lines(caseVariants(upstreamHeader), func(i int) string { return forgedValues[i%len(forgedValues)] })...)
	add("/many/service", lines(caseVariants(serviceHeader), func(i int) string { return fmt.Sprintf("evil-%d", i) })...)
	add("/many/call-id", lines([]string{"call-id", "i", "Call-ID"}, func(i int) string { return fmt.Sprintf("%d@pbx", i) })...)
	add("/many/authorization", lines(one("authorization"), func(i int) string { return "Bearer " + token(fmt.Sprintf(`{"sub":"u%d"}`, i)) })...)
	names := make([][2]string, n)
	for i := range names {
		names[i] = hdr(fmt.Sprintf("x-h-%d", i), text(rng, urlSafe, 8))
	}
	add("/many/names", names...)
	var mixed [][2]string
	for i := range n {
		switch i % 4 {
		case 0:
			mixed = append(mixed, hdr("x-forwarded-for", ip(i)))
		case 1:
			mixed = append(mixed, hdr("cookie", fmt.Sprintf("k%d=v", i)))
		case 2:
			mixed = append(mixed, hdr(caseVariants(upstreamHeader)[i%5], "6.6.6.6:666"))
		default:
			mixed = append(mixed, hdr(caseVariants(serviceHeader)[i%5], "evil"))
		}
	}
	add("/many/mixed", mixed...)
	return rs
}

// repeatedForged: our own headers, forged in every spelling and many copies.
func repeatedForged() []Request {
	const class = "repeated-forged"
	ups, svcs := caseVariants(upstreamHeader), caseVariants(serviceHeader)
	var rs []Request
	for i, v := range forgedValues {
		var hs [][2]string
		for j := range ups {
			hs = append(hs, hdr(ups[j], v), hdr(svcs[j], "evil"))
		}
		rs = append(rs, request(class, fmt.Sprintf("/forged/%d", i), "example.com", hs...))
	}
	for _, copies := range []int{2, 31, 32, 33, 64, 100} {
		var hs [][2]string
		for j := range copies {
			hs = append(hs, hdr(ups[j%len(ups)], forgedValues[j%len(forgedValues)]), hdr(svcs[j%len(svcs)], "a"))
		}
		rs = append(rs, request(class, fmt.Sprintf("/forged/copies/%d", copies), "example.com", hs...))
	}
	// Forged headers before the pseudo-headers' values are read, after other
	// headers, with a debug header and an empty name-like value.
	rs = append(rs,
		request(class, "/forged/between", "example.com", hdr("cookie", "session=x"), hdr(ups[1], "6.6.6.6:666"),
			hdr("x-forwarded-for", "6.6.6.6"), hdr(svcs[2], "s1"), hdr(ups[0], "127.0.0.1:22")),
		request(class, "/forged/decision", "example.com", hdr("x-hashlb-decision", "method=URLHASH; service=evil"), hdr(ups[3], "6.6.6.6:666")),
		request(class, "/forged/nul", "example.com", hdr(ups[0], "6.6.6.6:666\x00"), hdr(svcs[0], "\x00")),
		request(class, "/forged/long", "example.com", hdr(ups[0], strings.Repeat("6.6.6.6:666,", MaxValue/12))),
	)
	return rs
}

// badBytes: invalid UTF-8, NUL and control bytes in every input.
func badBytes() []Request {
	const class = "bad-bytes"
	bad := []string{"\xff", "\xc3\x28", "\xed\xa0\x80", "\xc0\xaf", "\x00", "a\x00b", "\xf4\x90\x80\x80",
		"\xfe\xff", "\r\n", "\x7f\x1b[31m", "\xe2\x80\xae"}
	all := strings.Join(bad, "")
	fields := func(b string) Request {
		r := request(class, "/"+b+"/x?user="+b, "ex"+b+"ample.com",
			hdr("cookie", "session="+b+"; tenant="+b), hdr("x-forwarded-for", "1.2.3.4"+b+", "+b),
			hdr("call-id", b+"@pbx"), hdr("i", b), hdr("authorization", "Bearer "+b), hdr("x-client-id", b),
			hdr("host", b))
		r.Headers[0][1] = "GET" + b
		return r
	}
	var rs []Request
	for _, b := range bad {
		rs = append(rs, fields(b))
	}
	rs = append(rs, fields(all))
	for _, h := range []string{":path", ":authority", "cookie", "x-forwarded-for", "call-id", "authorization", "x-client-id"} {
		r := request(class, "/", "example.com")
		switch h {
		case ":path":
			r.Headers[3][1] = "/" + all
		case ":authority":
			r.Headers[2][1] = all
		case "cookie":
			r.Headers = append(r.Headers, hdr(h, "session="+all))
		default:
			r.Headers = append(r.Headers, hdr(h, all))
		}
		rs = append(rs, r)
	}
	rs = append(rs,
		request(class, "/", "example.com", hdr("authorization", "Bearer "+token(`{"sub":"`+all+`"}`))),
		request(class, "/", "example.com", hdr("x-\xffname", "v"), hdr("x-client-id\x00", "v")),
	)
	return rs
}

// badAddresses: malformed connection addresses and x-forwarded-for entries.
func badAddresses() []Request {
	const class = "bad-addresses"
	addrs := []string{"", "garbage", "1.2.3.4", "1.2.3.4:99999", "[::1]", "[fe80::1%eth0]:80", "fe80::1%25eth0",
		"[::ffff:10.0.0.1]:80", strings.Repeat("1", MaxValue), "1.2.3.4:", ":80", "[::1]:", "[[::1]]:80",
		"1.2.3.4:-1", "01.02.03.04:80", "1.2.3.4.5:80", "::ffff:1.2.3.4", "[fe80::1%]:80", "0.0.0.0:0",
		"255.255.255.255:65535", "[::]:0", "1.2.3.4:80\x00", "\xff:80", "[1.2.3.4]:80", "1.2.3.4:80:90",
		"[" + strings.Repeat("0:", 4000) + ":1]:80", "unix:/var/run/envoy.sock", "pipe://x"}
	xffs := []string{"fe80::1%eth0", "1.2.3.4:80", "[::1]", "[::1]:443", "junk", "", " , ,", "unknown",
		"1.2.3.4,", ",1.2.3.4", "::ffff:10.0.0.1", "\t1.2.3.4\t", "1.2.3.4 5.6.7.8", "_hidden", "for=1.2.3.4",
		"fe80::1%25eth0, 10.0.0.1", "[fe80::1%eth0]:80", "1.2.3.4, [::1]:80, junk,, ,::1%lo"}
	var entries []string
	for i := range 1000 {
		entries = append(entries, fmt.Sprintf("%d.%d.%d.%d", 1+i%200, i%256, (i*7)%256, (i*13)%256))
	}
	xffs = append(xffs, strings.Join(entries, ", "), strings.Repeat(",", 1000), strings.Repeat(" ,", 1000)+"1.2.3.4")
	var rs []Request
	for i, a := range addrs {
		r := request(class, fmt.Sprintf("/addr/%d", i), "example.com", hdr("x-forwarded-for", xffs[i%len(xffs)]))
		r.Source, r.Dest = a, addrs[(i+len(addrs)/2)%len(addrs)]
		rs = append(rs, r)
	}
	for i, x := range xffs {
		rs = append(rs, request(class, fmt.Sprintf("/xff/%d", i), "example.com", hdr("x-forwarded-for", x)))
	}
	return rs
}

// absoluteForm: request targets that are not origin-form paths.
func absoluteForm() []Request {
	const class = "absolute-form"
	paths := []string{"http://evil.example:80/x?y", "https://user@host:1/", "//x", "http://[::1]/", "*", "",
		"http://", "http://[::1", "HTTP://EVIL.EXAMPLE/", "http://a@b@c/", "ftp://x/y", "http://evil.example:99999/",
		"http:/x", "?q=1", "#frag", "/x#y?z", "http://[fe80::1%25eth0]:80/", "http://evil.example?user=a/b",
		"https://:443/", "http://evil.example#@good.example/", "example.com:443", "a://b://c", "://x"}
	var rs []Request
	for i, p := range paths {
		authority := []string{"example.com", "", "good.example:8443"}[i%3]
		rs = append(rs, request(class, p, authority))
	}
	return rs
}

// splitXFF: the client's own x-forwarded-for line, then the line the trusted
// proxy appended: with trustedForwardedHops 1 the client IP is the last
// line's rightmost entry.
func splitXFF() []Request {
	const class = "split-xff"
	cases := [][]string{
		{"6.6.6.6", "198.51.100.7"},
		{"6.6.6.6, 7.7.7.7", "198.51.100.8"},
		{"junk", "2001:db8::7"},
		{"6.6.6.6", "7.7.7.7", "198.51.100.9"},
		{"10.0.0.1", "198.51.100.10, 198.51.100.11"},
		{"6.6.6.6", ""},
		{"", "198.51.100.12"},
		{strings.Repeat("6.6.6.6, ", 500) + "6.6.6.6", "198.51.100.13"},
	}
	return splitLines(class, "x-forwarded-for", cases)
}

// splitLines makes one request of class per case, at /class/i, with one
// header line named name per string of the case.
func splitLines(class, name string, cases [][]string) []Request {
	var rs []Request
	for i, lines := range cases {
		var hs [][2]string
		for _, l := range lines {
			hs = append(hs, hdr(name, l))
		}
		rs = append(rs, request(class, fmt.Sprintf("/%s/%d", class, i), "example.com", hs...))
	}
	return rs
}

// splitCookie: the session cookie only in a later cookie line.
func splitCookie() []Request {
	const class = "split-cookie"
	cases := [][]string{
		{"a=1; b=2", "session=alice"},
		{"tenant=x", "b=2", "session=" + token(`{"sub":"bob"}`)},
		{"session=", "session=carol"},
		{"sessionx=1; xsession=2", "session=dave"},
		{"", "session=eve"},
		{"a=1", "session=frank; tenant=t2"},
		{"session", "session=grace"},
		{"a=1; session=heidi", "session=ivan"},
	}
	return splitLines(class, "cookie", cases)
}

// missingPseudo: requests without some or all pseudo-headers, or with two.
func missingPseudo() []Request {
	const class = "missing-pseudo"
	without := func(names ...string) Request {
		r := request(class, "/missing", "example.com", hdr("cookie", "session=x"), hdr("x-forwarded-for", "1.2.3.4"))
		var hs [][2]string
		for _, h := range r.Headers {
			keep := true
			for _, n := range names {
				keep = keep && h[0] != n
			}
			if keep {
				hs = append(hs, h)
			}
		}
		r.Headers = hs
		return r
	}
	twice := request(class, "/a", "a.example.com", hdr(":path", "/b"), hdr(":authority", "b.example.com"), hdr(":method", "POST"))
	return []Request{
		without(":path"), without(":authority"), without(":method"), without(":scheme"),
		without(":method", ":scheme", ":authority", ":path"), without(":method", ":scheme", ":authority"),
		{Class: class, Source: source, Dest: dest},
		twice,
	}
}
