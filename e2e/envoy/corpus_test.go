package envoy

// The request corpus the emulators share (internal/corpus) through real
// Envoy: every corpus configuration on its own listener of one Envoy per
// version and steering mode, its services echo backends on loopback, and
// lbcore, given the exact configuration Envoy runs and the request as Envoy
// decoded it, as the oracle.

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/lbcore"
)

// corpusPerConfig is how many corpus requests each configuration gets, per
// Envoy version and steering mode.
const corpusPerConfig = 240

// listenerHosts are the addresses every corpus listener is bound to: three
// IPv4 loopback addresses in different /16s (DESTINATIONIPHASH masks with
// 255.255.0.0) and the IPv6 loopback.
var listenerHosts = []string{"127.0.0.1", "127.1.0.1", "127.2.0.1", "::1"}

// corpusPool starts one echo backend per corpus service, named like it (s3,
// whose corpus address is IPv6, on [::1]), and returns corpus.Services with
// each address replaced by its backend's: names, weights, the hashId and
// the disabled service stay as they are.
func corpusPool(t testing.TB) ([]*envoyrun.Backend, string) {
	t.Helper()
	var svcs []map[string]any
	if err := json.Unmarshal([]byte(corpus.Services), &svcs); err != nil {
		t.Fatal(err)
	}
	var bs []*envoyrun.Backend
	for _, s := range svcs {
		at := "127.0.0.1:0"
		if strings.HasPrefix(s["address"].(string), "[") {
			at = "[::1]:0"
		}
		b := envoyrun.StartBackendAt(t, s["name"].(string), at)
		s["address"] = b.Addr
		bs = append(bs, b)
	}
	out, err := json.Marshal(svcs)
	if err != nil {
		t.Fatal(err)
	}
	return bs, string(out)
}

// envoyCorpusConfig is corpus configuration cc as Envoy runs it: its
// services on the backends (all-disabled's two on the first two backends'
// addresses, still disabled), and, under ORIGINAL_DST, upstreamCount 1: that
// cluster reads the header as one address (configs/envoy-original-dst.yaml).
func envoyCorpusConfig(t testing.TB, cc corpus.Config, services string, bs []*envoyrun.Backend, mode steering) []byte {
	t.Helper()
	data := cc.Complete(services)
	set := map[string]any{}
	if cc.Whole {
		set["services"] = []any{
			map[string]any{"name": "d1", "address": bs[0].Addr, "enabled": false},
			map[string]any{"name": "d2", "address": bs[1].Addr, "enabled": false},
		}
	}
	if mode == originalDst {
		set["upstreamCount"] = 1
	}
	data, err := corpus.Rewrite(data, set)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// toWire maps corpus request r onto what a client on loopback can send to
// a listener bound to addrs (listenerHosts, with their ports), and says
// what the corpus loses on the way:
//   - the connection's addresses are real ones: an IPv4 client 10.a.b.c
//     connects from 127.a.b.c (c kept within 1–254) to the listener
//     address of index a%3; every other source (IPv6, v4-mapped, none,
//     malformed, port 0) becomes ::1 to [::1]. Ports are ephemeral.
//   - a request without :path is sent with target "/"; HTTP/1.1 has no
//     request without a target.
//   - a request without :authority is sent with Host: the listener's
//     address, as an HTTP/1.1 client does: Envoy answers 400 to an HTTP/1.1
//     request without Host before any filter runs.
//   - ":scheme" is not sent (Envoy sets it from the connection: http).
//
// Everything else is sent as the corpus has it: the absolute-form targets
// (Envoy's codec splits them, which the oracle models with
// corpus.AsEnvoyDecodes), requests without Host, empty values, custom
// methods, the forged copies of hashlb's headers.
func toWire(r corpus.Request, addrs []string) wire {
	w := wire{srcIP: "::1", dst: addrs[3], target: "/"}
	if ap, err := netipParse(r.Source); err == nil && ap.v4 && ap.a < 3 {
		w.srcIP = fmt.Sprintf("127.%d.%d.%d", ap.a, ap.b, min(max(ap.c, 1), 254))
		w.dst = addrs[ap.a%3]
	}
	w.setHeaders(r.Headers)
	if w.host == "" {
		w.host = w.dst
	}
	return w
}

// v4src is the parse of a corpus source "10.a.b.c:port" (port above 0).
type v4src struct {
	v4      bool
	a, b, c int
}

func netipParse(s string) (v4src, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return v4src{}, err
	}
	ip := net.ParseIP(h)
	if port, _ := strconv.Atoi(p); ip == nil || ip.To4() == nil || strings.Contains(h, ":") || port == 0 {
		return v4src{}, fmt.Errorf("not an IPv4 client with a port: %q", s)
	}
	v := ip.To4()
	return v4src{v4: true, a: int(v[1]), b: int(v[2]), c: int(v[3])}, nil
}

// fallbackInEnvoy are the corpus configurations whose hash input a request
// through Envoy can lack, so that the corpus must exercise their fallback
// too. The others always have it in Envoy: every HTTP/1.1 request has a
// target and a Host, and every connection a source and a destination
// address.
var fallbackInEnvoy = map[string]bool{
	"SOURCEIPHASH":     true, // the trusted hop is missing or "unknown"
	"SRCIPSRCPORTHASH": true, // an x-forwarded-for address becomes the source, with port 0
	"CALLIDHASH":       true, // no call-id, or an empty one
	"TOKEN":            true, // no tenant, cookie or JWT
}

// corpusListener is one corpus configuration on its listener.
type corpusListener struct {
	cc   corpus.Config
	mode steering
	c    *lbcore.Config
	name string
}

// TestCorpusThroughEnvoy sends the corpus through real Envoy for every
// corpus configuration (the eight hash methods, least connection, round
// robin, persistence, nothing enabled), in both steering modes, and checks
// each answer against lbcore: the backend that answered is the first
// service of the decision; the upstream received exactly one
// x-envoy-original-dst-host and one x-hashlb-service, hashlb's (a client's
// forged copies never reach it); a hash decision is lbcore's exactly, in
// rank order; the all-disabled pool gets the local 503 "no healthy service"
// from hashlb. One Envoy per version holds every configuration in both
// modes, each on its own listener.
//
// Beside the corpus, two facts of Envoy a user meets with the shipped
// bootstraps: their HTTP connection manager (no allow_custom_methods)
// answers a SIP-style INVITE over HTTP/1.1 with 400 before hashlb runs (and
// an HTTP/1.1 request without Host); and
// an ORIGINAL_DST cluster given a list of addresses (upstreamCount 2) does
// not route it. And one the emulators do not model: under a connection
// manager without use_remote_address (the shipped bootstraps), Envoy gives
// the filter the client's last x-forwarded-for address, port 0, as
// source.address; with use_remote_address, the connection's peer, and Envoy
// appends a hop to x-forwarded-for before hashlb reads it, so that
// trustedForwardedHops 1 reads Envoy's hop.
func TestCorpusThroughEnvoy(t *testing.T) {
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		bs, services := corpusPool(t)
		byAddr := map[string]string{}
		for _, b := range bs {
			byAddr[b.Addr] = b.Name
		}
		var addrs []string
		for _, h := range listenerHosts {
			addrs = append(addrs, net.JoinHostPort(h, "0"))
		}
		clusterOf := map[steering]string{overrideHost: "corpus_override_host", originalDst: "corpus_original_dst"}
		var cls []corpusListener
		var specs []listenerSpec
		for _, mode := range []steering{overrideHost, originalDst} {
			for i, cc := range corpus.Configs {
				data := envoyCorpusConfig(t, cc, services, bs, mode)
				c, err := lbcore.ParseConfig(data)
				if err != nil {
					t.Fatalf("%s: %v", cc.Name, err)
				}
				name := fmt.Sprintf("%s_c%d", mode, i)
				cls = append(cls, corpusListener{cc: cc, mode: mode, c: c, name: name})
				// Each listener's plugin has its own root_id, so its shared
				// data (persistence table, active counts) is its own, as each
				// corpus configuration has a host of its own under hostsim.
				specs = append(specs, listenerSpec{name: name, addrs: addrs, rootID: name, config: data,
					cluster: clusterOf[mode], retries: mode == overrideHost, customMethods: true})
			}
		}
		urlhash := corpus.Configs[0].Complete(services) // URLHASH, upstreamCount 2
		srcPort := corpus.Configs[5].Complete(services) // SRCIPSRCPORTHASH
		srcHops := corpus.Configs[3].Complete(services) // SOURCEIPHASH, trustedForwardedHops 1
		specs = append(specs,
			listenerSpec{name: "shipped_methods", addrs: addrs[:1], rootID: "shipped_methods", config: urlhash,
				cluster: clusterOf[overrideHost], retries: true},
			listenerSpec{name: "original_dst_list", addrs: addrs[:1], rootID: "original_dst_list", config: urlhash,
				cluster: clusterOf[originalDst]},
			listenerSpec{name: "xff_default", addrs: addrs[:1], rootID: "xff_default", config: srcPort,
				cluster: clusterOf[overrideHost]},
			listenerSpec{name: "xff_remote", addrs: addrs[:1], rootID: "xff_remote", config: srcPort,
				cluster: clusterOf[overrideHost], useRemoteAddress: true},
			listenerSpec{name: "xff_remote_hops", addrs: addrs[:1], rootID: "xff_remote_hops", config: srcHops,
				cluster: clusterOf[overrideHost], useRemoteAddress: true})
		yaml := bootstrap{listeners: specs, clusters: []*cluster{
			overrideHost.cluster(t, clusterOf[overrideHost], endpoints(bs)),
			originalDst.cluster(t, clusterOf[originalDst], nil),
		}}.yaml(t)
		e := startEnvoy(t, bin, envoyrun.Options{Bootstrap: yaml, Dir: envoyrun.WorkDir(t)})
		reqs := corpus.Requests(corpusPerConfig)
		for _, cl := range cls {
			t.Run(cl.mode.String()+"/"+cl.cc.Name, func(t *testing.T) {
				checkCorpus(t, e, cl, reqs, byAddr)
			})
		}

		t.Run("INVITE without allow_custom_methods, and no Host", func(t *testing.T) {
			w := wire{srcIP: "127.0.0.1", dst: e.MustListener(t, "shipped_methods"), method: "INVITE", target: "/call", host: "sip.example.com",
				headers: [][2]string{{"call-id", "a84b4c76e66710@pc33.example.com"}}}
			a, err := send(w)
			if err != nil {
				t.Fatal(err)
			}
			if a.status != 400 || a.backend != "" || a.debug != "" {
				t.Errorf("INVITE: %d from %q (decision %q), want Envoy's own 400 before hashlb", a.status, a.backend, a.debug)
			}
			w.method = "GET"
			if a, err := send(w); err != nil || a.status != 200 || a.backend == "" {
				t.Errorf("GET on the same listener: %+v, %v; want 200 from a backend", a, err)
			}
			// And an HTTP/1.1 request without Host, which toWire never sends.
			w.host = ""
			if a, err := send(w); err != nil || a.status != 400 || a.backend != "" {
				t.Errorf("GET without Host: %+v, %v; want Envoy's own 400", a, err)
			}
		})

		t.Run("source.address and x-forwarded-for", func(t *testing.T) {
			c, err := lbcore.ParseConfig(srcPort)
			if err != nil || c.LBMethod != lbcore.MethodSrcIPSrcPortHash {
				t.Fatalf("corpus config 5 is not SRCIPSRCPORTHASH: %v", err)
			}
			for _, l := range []struct {
				name string
				xff  bool // source.address is the x-forwarded-for address, port 0
			}{{"xff_default", true}, {"xff_remote", false}} {
				w := wire{srcIP: "127.0.0.1", dst: e.MustListener(t, l.name), method: "GET", target: "/", host: "example.com",
					headers: [][2]string{{"x-forwarded-for", "192.0.2.7"}}}
				a, err := send(w)
				if err != nil {
					t.Fatal(err)
				}
				src, reason := a.src, lbcore.ReasonHash
				if l.xff {
					src, reason = "192.0.2.7:0", lbcore.ReasonBackup
				}
				want := corpus.Oracle(lbcore.NewBalancer(c, 0), corpus.Request{Headers: [][2]string{{":path", "/"}, {":authority", "example.com"}}, Source: src, Dest: w.dst})
				if err := checkAnswer(c, want, false, a, byAddr); err != nil || want.Reason != reason {
					t.Errorf("%s: SRCIPSRCPORTHASH from %s with x-forwarded-for 192.0.2.7: %v (lbcore's reason for source %s: %s, want %s)", l.name, a.src, err, src, want.Reason, reason)
				}
			}
		})

		t.Run("use_remote_address appends to x-forwarded-for", func(t *testing.T) {
			// With use_remote_address Envoy appends a hop to the client's
			// x-forwarded-for before any filter runs (for a loopback peer,
			// the host's own address, not the loopback peer's, and without a
			// space: ConnectionManagerUtility::mutateRequestHeaders), so
			// trustedForwardedHops 1 reads Envoy's hop, not the client's.
			c, err := lbcore.ParseConfig(srcHops)
			if err != nil || c.LBMethod != lbcore.MethodSourceIPHash {
				t.Fatalf("corpus config 3 is not SOURCEIPHASH: %v", err)
			}
			dst := e.MustListener(t, "xff_remote_hops")
			get := func(client string) (answer, []string) {
				a, err := send(wire{srcIP: "127.0.0.1", dst: dst, method: "GET", target: "/", host: "example.com",
					headers: [][2]string{{"x-forwarded-for", client}}})
				if err != nil {
					t.Fatal(err)
				}
				return a, a.echo.Header["X-Forwarded-For"]
			}
			decide := func(xff, src string) *lbcore.Decision {
				d := corpus.Oracle(lbcore.NewBalancer(c, 0), corpus.Request{Headers: [][2]string{{":path", "/"}, {":authority", "example.com"}, {"x-forwarded-for", xff}}, Source: src, Dest: dst})
				return &d
			}
			a, xff := get("198.51.0.7")
			t.Logf("x-forwarded-for as the filter and the upstream see it: %q", xff)
			parts := strings.Split(strings.Join(xff, ","), ",")
			if len(xff) != 1 || len(parts) != 2 || parts[0] != "198.51.0.7" {
				t.Fatalf("x-forwarded-for %q: want the client's 198.51.0.7 and Envoy's hop after it", xff)
			}
			hop := strings.TrimSpace(parts[1])
			// A client whose own address lbcore would send elsewhere than
			// Envoy's hop, so that the answer tells which one was read.
			for n := 1; n < 64; n++ {
				client := fmt.Sprintf("198.51.%d.7", n)
				if decide(client, a.src).At(0) != decide(hop, a.src).At(0) {
					a, xff = get(client)
					if err := checkAnswer(c, *decide(strings.Join(xff, ","), a.src), false, a, byAddr); err != nil {
						t.Errorf("SOURCEIPHASH (trustedForwardedHops 1) behind use_remote_address: %v", err)
					}
					if a.backend == c.Services[decide(client, a.src).At(0)].Name {
						t.Errorf("trustedForwardedHops 1 read the client's %s behind use_remote_address, not Envoy's hop %s", client, hop)
					}
					return
				}
			}
			t.Fatal("no client address hashes apart from Envoy's hop")
		})

		t.Run("ORIGINAL_DST with upstreamCount 2", func(t *testing.T) {
			c, err := lbcore.ParseConfig(urlhash)
			if err != nil {
				t.Fatal(err)
			}
			w := wire{srcIP: "127.0.0.1", dst: e.MustListener(t, "original_dst_list"), method: "GET", target: "/a/1", host: "example.com"}
			a, err := send(w)
			if err != nil {
				t.Fatal(err)
			}
			want := oracle(c, lbcore.Request{Target: "/a/1", Authority: "example.com", Method: "GET"})
			t.Logf("ORIGINAL_DST given %q (lbcore's %v): %d %q from %q", a.debug, want, a.status, a.body, a.backend)
			if a.status != 503 || a.backend != "" {
				t.Errorf("a list in the header: %d %q from %q, want Envoy's 503 and no backend", a.status, a.body, a.backend)
			}
		})
	})
}

// checkCorpus sends reqs to listener cl of e (four at a time, each on a new
// connection) and checks every answer against lbcore.
func checkCorpus(t *testing.T, e *envoyrun.Envoy, cl corpusListener, reqs []corpus.Request, byAddr map[string]string) {
	las, err := e.ListenerAddresses(cl.name)
	if err != nil || len(las) != len(listenerHosts) {
		t.Fatalf("listener %s: %v %v", cl.name, las, err)
	}
	b := lbcore.NewBalancer(cl.c, 0)
	type result struct {
		w   wire
		a   answer
		err error
	}
	res := make([]result, len(reqs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				w := toWire(reqs[i], las)
				a, err := send(w)
				res[i] = result{w, a, err}
			}
		})
	}
	for i := range reqs {
		next <- i
	}
	close(next)
	wg.Wait()
	reasons := map[string]int{}
	bad, forged := 0, 0
	for i, r := range res {
		err := r.err
		if err == nil {
			want := corpus.Oracle(b, r.w.seen(r.a.src))
			reasons[want.Reason.String()]++
			err = checkAnswer(cl.c, want, cl.cc.Persist, r.a, byAddr)
			if err == nil && r.a.backend != "" && len(corpus.HeaderValues(r.w.headers, "x-hashlb-service")) > 0 {
				forged++
			}
		}
		if err != nil {
			if bad++; bad <= 5 {
				t.Errorf("request %d: %q from %s to %s: %v", i, r.w.bytes(), r.a.src, r.w.dst, err)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d requests differ from lbcore", bad, len(reqs))
	}
	t.Logf("%d requests (%d routed with forged copies stripped), lbcore's reasons %v", len(reqs), forged, reasons)
	if !cl.cc.Whole && forged == 0 {
		t.Errorf("no request with forged copies of hashlb's headers was routed: the test proves nothing about stripping")
	}
	if cl.c.LBMethod.IsHash() && !cl.cc.Whole && (reasons["hash"] == 0 || fallbackInEnvoy[cl.cc.Name] && reasons["backup"] == 0) {
		t.Errorf("the corpus does not exercise %s (and its fallback, where Envoy can lack the input) in Envoy: %v", cl.c.LBMethod, reasons)
	}
}

// checkAnswer is corpus.Check on what the upstream received, and that the
// backend which answered is the decision's first service.
func checkAnswer(c *lbcore.Config, want lbcore.Decision, persist bool, a answer, byAddr map[string]string) error {
	got := a.outcome()
	if err := corpus.Check(c, want, persist, got); err != nil {
		return fmt.Errorf("%v (answer %d from %q)", err, a.status, a.backend)
	}
	if a.backend == "" {
		return nil
	}
	if a.status != 200 {
		return fmt.Errorf("backend %s answered %d", a.backend, a.status)
	}
	first := strings.Split(got.Upstream[0], ",")[0]
	if byAddr[first] != a.backend {
		return fmt.Errorf("hashlb chose %s (%s), but %s answered", first, byAddr[first], a.backend)
	}
	return nil
}
