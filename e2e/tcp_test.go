package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/lbcore"
)

// tcpServices are five services of a network-filter configuration.
const tcpServices = `"services":[{"name":"a","address":"10.1.0.1:443"},{"name":"b","address":"10.1.0.2:443"},
	{"name":"c","address":"10.1.0.3:443","weight":2},{"name":"d","address":"[2001:db8::4]:443"},{"name":"e","address":"10.1.0.5:443","hashId":"e-cache"}]`

// tcpConfig is a network-filter configuration with lbMethod method and extra fields.
func tcpConfig(method, extra string) []byte {
	if extra != "" {
		extra += ","
	}
	return []byte(fmt.Sprintf(`{"filterType":"network","lbMethod":%q,%s%s}`, method, extra, tcpServices))
}

// tuple is a connection's addresses (the protocol is TCP).
type tuple struct{ src, dst string }

// randomTuple draws a client from a few subnets (so masks and the source
// port matter) and one of twenty listener addresses (a transparent proxy sees many).
func randomTuple(r *rand.Rand) tuple {
	src := fmt.Sprintf("192.0.%d.%d:%d", r.IntN(4), 1+r.IntN(200), 1024+r.IntN(60000))
	if r.IntN(5) == 0 {
		src = fmt.Sprintf("[2001:db8:%x::%x]:%d", r.IntN(4), 1+r.IntN(200), 1024+r.IntN(60000))
	}
	return tuple{src, fmt.Sprintf("198.51.100.%d:%d", 1+r.IntN(20), []int{443, 8443}[r.IntN(2)])}
}

// open runs proxy_on_new_connection for t on worker w and fails the test on
// a VM error.
func open(t testing.TB, h *hostsim.Host, w int, tp tuple) (*hostsim.Conn, hostsim.ConnResult) {
	t.Helper()
	c := h.Conn(w)
	res := c.NewConnection(map[string][]byte{
		"source.address": hostsim.PropString(tp.src), "destination.address": hostsim.PropString(tp.dst)})
	if res.Err != nil {
		t.Fatalf("worker %d, connection %v: %v", w, tp, res.Err)
	}
	return c, res
}

// connectRandom connects n random tuples (seeded by seed), tuple i on worker
// i%workers, and returns them with the address each reached.
func connectRandom(t testing.TB, h *hostsim.Host, workers int, seed uint64, n int) ([]tuple, []string) {
	r := rand.New(rand.NewPCG(seed, seed))
	tuples, reached := make([]tuple, n), make([]string, n)
	for i := range tuples {
		tuples[i] = randomTuple(r)
		reached[i] = connect(t, h, i%workers, tuples[i])
	}
	return tuples, reached
}

// connect opens and closes one connection and returns where it went ("" when
// the module refused it).
func connect(t testing.TB, h *hostsim.Host, w int, tp tuple) string {
	t.Helper()
	c, res := open(t, h, w, tp)
	if err := c.Close(hostsim.PeerRemote); err != nil {
		t.Fatal(err)
	}
	if !res.Routed() {
		return ""
	}
	return res.Upstream
}

// newTCPHost starts the module with config under hostsim.
func newTCPHost(t testing.TB, config []byte, workers int, profile string, handler hostsim.HTTPHandler) *hostsim.Host {
	t.Helper()
	ctx := context.Background()
	h, err := hostsim.New(ctx, module(t), hostsim.Config{Workers: workers, Profile: profile, PluginConfig: config,
		LogLevel: hostsim.LogWarn, HTTPCall: handler})
	if err != nil {
		t.Fatalf("hostsim.New: %v", err)
	}
	t.Cleanup(func() { h.Close(ctx) })
	return h
}

// eachTCPHost runs f for 1 and 4 workers under both import profiles.
func eachTCPHost(t *testing.T, f func(t *testing.T, workers int, profile string)) {
	for _, profile := range hostsim.Profiles() {
		for _, workers := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/workers=%d", profile, workers), func(t *testing.T) { f(t, workers, profile) })
		}
	}
}

// TestTCPSameTupleSameService: under each connection hash method the same
// 5-tuple reaches the same service on every worker, the one lbcore ranks
// first; SRCIPDESTIPHASH gives both directions of a flow one service; the
// address travels as the ORIGINAL_DST filter state, for the whole connection.
func TestTCPSameTupleSameService(t *testing.T) {
	methods := map[string]string{
		"SOURCEIPHASH":      `"netmask":"255.255.255.0","v6NetmaskLen":64`,
		"SRCIPSRCPORTHASH":  "",
		"DESTINATIONIPHASH": "",
		"SRCIPDESTIPHASH":   `"netmask":"255.255.0.0"`,
	}
	eachTCPHost(t, func(t *testing.T, workers int, profile string) {
		for method, extra := range methods {
			t.Run(method, func(t *testing.T) {
				config := tcpConfig(method, extra)
				c, err := lbcore.ParseConfig(config)
				if err != nil {
					t.Fatal(err)
				}
				oracle := lbcore.NewBalancer(c, 0)
				h := newTCPHost(t, config, workers, profile, nil)
				r := rand.New(rand.NewPCG(1, uint64(len(method))))
				seen := map[string]bool{}
				for i := 0; i < 300; i++ {
					tp := randomTuple(r)
					d := oracle.Decide(&lbcore.Request{Source: tp.src, Dest: tp.dst}, time.Time{})
					want := c.Services[d.At(0)].Address
					cn, res := open(t, h, i%workers, tp)
					if !res.Routed() || res.Upstream != want {
						t.Fatalf("connection %v on worker %d: %+v, want routed to %s", tp, i%workers, res, want)
					}
					if fs, _ := cn.FilterState("envoy.network.transport_socket.original_dst_address"); fs.Span != 2 {
						t.Fatalf("filter state span %d, want 2 (DownstreamConnection)", fs.Span)
					}
					if err := cn.Close(hostsim.PeerRemote); err != nil {
						t.Fatal(err)
					}
					if got := connect(t, h, (i+1)%workers, tp); got != want {
						t.Fatalf("connection %v again on worker %d went to %s, first to %s", tp, (i+1)%workers, got, want)
					}
					if method == "SRCIPDESTIPHASH" && !strings.HasPrefix(tp.src, "[") {
						back := tuple{src: tp.dst, dst: tp.src}
						if got := connect(t, h, (i+2)%workers, back); got != want {
							t.Fatalf("reverse flow %v went to %s, the forward flow to %s", back, got, want)
						}
					}
					seen[want] = true
				}
				if len(seen) < 3 {
					t.Errorf("300 tuples reached %d services, want them spread", len(seen))
				}
			})
		}
	})
}

// TestTCPDownServiceMovesOnlyItsKeys: a service failing its probes goes DOWN
// on every worker; only the tuples it held move, and they come back when it
// recovers.
func TestTCPDownServiceMovesOnlyItsKeys(t *testing.T) {
	eachTCPHost(t, func(t *testing.T, workers int, profile string) {
		backends := newProbeAnswers()
		config := tcpConfig("SRCIPSRCPORTHASH",
			`"healthCheck":{"interval":"1s","timeout":"500ms","unhealthyThreshold":2,"healthyThreshold":2,"cluster":"backends"}`)
		h := newTCPHost(t, config, workers, profile, backends.handle)
		tuples, before := connectRandom(t, h, workers, 7, 400)
		const down = "10.1.0.3:443"
		set := func(v bool) {
			backends.set(v, down)
			for range 3 {
				h.Advance(time.Second)
			}
		}
		set(true)
		moved := 0
		for i, tp := range tuples {
			got := connect(t, h, (i+1)%workers, tp)
			switch {
			case got == down || got == "":
				t.Fatalf("tuple %v went to %q with %s DOWN", tp, got, down)
			case before[i] != down && got != before[i]:
				t.Fatalf("tuple %v moved from %s to %s although only %s went DOWN", tp, before[i], got, down)
			case before[i] == down:
				moved++
			}
		}
		if moved == 0 {
			t.Fatalf("no tuple was on %s", down)
		}
		set(false)
		for i, tp := range tuples {
			if got := connect(t, h, (i+2)%workers, tp); got != before[i] {
				t.Fatalf("tuple %v went to %s after %s recovered, before to %s", tp, got, down, before[i])
			}
		}
	})
}

// TestTCPPersistenceUnderLeastConnection: with persistence on client.ip, a
// client stays on its first service however loaded it gets, on every
// worker, while a new client goes to the least loaded one.
func TestTCPPersistenceUnderLeastConnection(t *testing.T) {
	eachTCPHost(t, func(t *testing.T, workers int, profile string) {
		h := newTCPHost(t, tcpConfig("LEASTCONNECTION", `"persistence":{"keys":["${client.ip}"]}`), workers, profile, nil)
		var held []*hostsim.Conn
		first := ""
		for port := 1000; port < 1040; port++ {
			c, res := open(t, h, port%workers, tuple{fmt.Sprintf("192.0.2.7:%d", port), "198.51.100.1:443"})
			held = append(held, c)
			switch {
			case !res.Routed():
				t.Fatalf("port %d: %+v", port, res)
			case first == "":
				first = res.Upstream
			case res.Upstream != first:
				t.Fatalf("client 192.0.2.7 port %d went to %s, its first connection to %s", port, res.Upstream, first)
			}
			h.Advance(time.Second) // the workers share their counts on the tick
		}
		if got := connect(t, h, 0, tuple{"192.0.2.8:1000", "198.51.100.1:443"}); got == first || got == "" {
			t.Errorf("a new client went to %q, want the least loaded service, not %s with 40 connections", got, first)
		}
		for _, c := range held {
			if err := c.Close(hostsim.PeerRemote); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestTCPActiveCountsReturnToZero: 10⁴ connections, closed in random order
// by the client, a reset, the proxy or after the upstream ended, leave every
// service's active count at 0.
func TestTCPActiveCountsReturnToZero(t *testing.T) {
	eachTCPHost(t, func(t *testing.T, workers int, profile string) {
		h := newTCPHost(t, tcpConfig("LEASTCONNECTION", ""), workers, profile, nil)
		r := rand.New(rand.NewPCG(3, uint64(workers)))
		var live []*hostsim.Conn
		closeOne := func(i int) {
			c := live[i]
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			switch r.IntN(4) {
			case 0: // the upstream ended first
				if _, err := c.UpstreamData([]byte("bye"), true); err != nil {
					t.Fatal(err)
				}
				if err := c.Close(hostsim.PeerLocal); err != nil {
					t.Fatal(err)
				}
			case 1: // data, then the client reset the connection
				if _, err := c.DownstreamData([]byte("hello"), false); err != nil {
					t.Fatal(err)
				}
				if err := c.Close(hostsim.PeerRemote); err != nil {
					t.Fatal(err)
				}
			case 2:
				if err := c.Close(hostsim.PeerLocal); err != nil {
					t.Fatal(err)
				}
			default:
				if err := c.Close(hostsim.PeerRemote); err != nil {
					t.Fatal(err)
				}
			}
		}
		peak := 0
		for i := 0; i < 10_000; i++ {
			c, res := open(t, h, r.IntN(workers), randomTuple(r))
			if !res.Routed() {
				t.Fatalf("connection %d: %+v", i, res)
			}
			live = append(live, c)
			peak = max(peak, len(live))
			for len(live) > 0 && r.IntN(3) > 0 && (len(live) > 200 || r.IntN(2) == 0) {
				closeOne(r.IntN(len(live)))
			}
			if i%1000 == 0 {
				h.Advance(time.Second)
			}
		}
		if peak < 20 {
			t.Fatalf("at most %d connections were open at once, want many", peak)
		}
		for len(live) > 0 {
			closeOne(r.IntN(len(live)))
		}
		h.Advance(time.Second)
		var total int64
		for _, s := range []string{"a", "b", "c", "d", "e"} {
			m, ok := h.Metric("hashlb.service." + s + ".active")
			if !ok || m.Value != 0 {
				t.Errorf("hashlb.service.%s.active = %d (defined %v), want 0", s, m.Value, ok)
			}
			req, _ := h.Metric("hashlb.service." + s + ".requests")
			total += req.Value
		}
		if total != 10_000 {
			t.Errorf("%d connections counted, want 10000", total)
		}
		for w := 0; w < workers; w++ {
			if err := h.Err(w); err != nil {
				t.Fatalf("worker %d: %v", w, err)
			}
		}
	})
}

// TestTCPNothingSelectable: with no service selectable the connection is
// closed and held, never continued without a destination.
func TestTCPNothingSelectable(t *testing.T) {
	config := []byte(`{"filterType":"network","lbMethod":"SOURCEIPHASH","services":[
		{"name":"a","address":"10.1.0.1:443","enabled":false},{"name":"b","address":"10.1.0.2:443","enabled":false}]}`)
	h := newTCPHost(t, config, 1, hostsim.ProfileEnvoy133, nil)
	c, res := open(t, h, 0, tuple{"192.0.2.1:5000", "198.51.100.1:443"})
	if res.Routed() || res.Action != hostsim.ActionPause || !res.Closed || res.Upstream != "" {
		t.Fatalf("NewConnection = %+v, want Pause, closed, no upstream", res)
	}
	if err := c.Close(hostsim.PeerLocal); err != nil {
		t.Fatal(err)
	}
	h.Advance(time.Second) // the module hands its counts to the host on the tick
	if m, _ := h.Metric("hashlb.decision.no_service"); m.Value != 1 {
		t.Errorf("hashlb.decision.no_service = %d, want 1", m.Value)
	}
}

// TestHTTPUpstreamViaFilterState: with upstreamVia filterState an HTTP
// request carries no upstream header at all; the address is the
// ORIGINAL_DST filter state, and a forged header is still removed.
func TestHTTPUpstreamViaFilterState(t *testing.T) {
	config := []byte(`{"lbMethod":"URLHASH","upstreamVia":"filterState",` + tcpServices + `}`)
	c, err := lbcore.ParseConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	oracle := lbcore.NewBalancer(c, 0)
	h := newTCPHost(t, config, 2, hostsim.ProfileEnvoy133, nil)
	for i := 0; i < 50; i++ {
		path := fmt.Sprintf("/obj/%d", i)
		s := h.Stream(i % 2)
		res := s.RequestHeaders([][2]string{{":method", "GET"}, {":path", path}, {":authority", "h"},
			{"x-envoy-original-dst-host", "203.0.113.9:80"}}, nil)
		if res.Err != nil || res.LocalReply != nil {
			t.Fatalf("%s: %+v", path, res)
		}
		if v, ok := res.Header("x-envoy-original-dst-host"); ok {
			t.Fatalf("%s: upstream header %q left on the request", path, v)
		}
		d := oracle.Decide(&lbcore.Request{Target: path}, time.Time{})
		fs, ok := s.FilterState("envoy.network.transport_socket.original_dst_address")
		if want := c.Services[d.At(0)].Address; !ok || fs.Value != want || fs.Span != 0 {
			t.Fatalf("%s: filter state %+v (set %v), want %s with span 0", path, fs, ok, want)
		}
		s.ResponseHeaders([][2]string{{":status", "200"}})
		if err := s.Finish(); err != nil {
			t.Fatal(err)
		}
	}
}
