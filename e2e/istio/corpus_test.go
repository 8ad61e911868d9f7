package istio

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/lbcore"
)

// outboundAddr is where the sidecar's outbound listener for the shipped
// ServiceEntry's port is bound (INTERCEPTION_MODE NONE: 127.0.0.1).
const outboundAddr = "127.0.0.1:8080"

// clientRequest is one corpus request as a client workload sends it
// through its sidecar to the shipped service.
type clientRequest struct {
	srcIP   string
	method  string
	target  string
	headers [][2]string // after Host
}

// fromCorpus maps corpus request r onto what a client of the sidecar
// sends. The sidecar routes by Host, so every request names the shipped
// service (hashlb's SOURCEIPHASH does not read it), and the rest of the
// corpus request goes as it is but for what an HTTP/1.1 client cannot
// send or Envoy refuses before any filter:
//   - an IPv4 client 10.a.b.c (a < 3) connects from 127.a.b.c (c kept
//     within 1–254); every other source from 127.0.0.1. Ports are
//     ephemeral;
//   - an absolute-form target is sent as its path (its host would replace
//     Host in Envoy's codec); a request without :path with "/";
//   - a method other than GET, POST and PUT (the corpus's INVITE) is sent
//     as GET: Istio's connection manager answers 400 to it.
func fromCorpus(r corpus.Request) clientRequest {
	c := clientRequest{srcIP: "127.0.0.1", method: "GET", target: "/"}
	if h, _, err := net.SplitHostPort(r.Source); err == nil {
		if ip := net.ParseIP(h); ip != nil && ip.To4() != nil && !strings.Contains(h, ":") && ip.To4()[1] < 3 {
			v := ip.To4()
			c.srcIP = fmt.Sprintf("127.%d.%d.%d", v[1], v[2], min(max(v[3], 1), 254))
		}
	}
	for _, kv := range r.Headers {
		switch kv[0] {
		case ":method":
			if kv[1] == "POST" || kv[1] == "PUT" {
				c.method = kv[1]
			}
		case ":path":
			c.target = kv[1]
			if u, err := url.Parse(kv[1]); err == nil && strings.Contains(kv[1], "://") {
				c.target = u.RequestURI()
			}
		case ":scheme", ":authority":
		default:
			c.headers = append(c.headers, kv)
		}
	}
	return c
}

// seen is the request as hashlb sees it in a proxy of shape s, for lbcore:
// from peer (the client's address and port as Envoy accepted them).
func (c clientRequest) seen(peer string, s proxyShape) corpus.Request {
	hs := [][2]string{{":method", c.method}, {":scheme", "http"}, {":authority", backendsHost}, {":path", c.target}}
	hs = append(hs, c.headers...)
	src := peer
	if !s.remote {
		src = envoySource(hs, peer)
	}
	return corpus.Request{Headers: hs, Source: src, Dest: s.addr}
}

// envoySource is the source.address Envoy gives a filter under a
// connection manager without use_remote_address, as istiod configures a
// sidecar's outbound one: the last x-forwarded-for entry when it is an IP
// address, with port 0, else the peer (the same rule as e2e/envoy's
// envoySource, which cites Envoy's code).
func envoySource(hs [][2]string, peer string) string {
	xff := corpus.HeaderValues(hs, "x-forwarded-for")
	if len(xff) == 0 {
		return peer
	}
	last := xff[len(xff)-1]
	ip := net.ParseIP(strings.TrimSpace(last[strings.LastIndexByte(last, ',')+1:]))
	if ip == nil {
		return peer
	}
	return net.JoinHostPort(ip.String(), "0")
}

// reply is what the client got back.
type reply struct {
	status  int
	header  http.Header
	backend string
	echo    envoyrun.Echo
	peer    string
}

// send sends c on a new connection to addr.
func (c clientRequest) send(addr string) (reply, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", c.method, c.target, backendsHost)
	for _, kv := range c.headers {
		fmt.Fprintf(&b, "%s: %s\r\n", kv[0], kv[1])
	}
	b.WriteString("\r\n")
	r, err := envoyrun.Exchange(c.srcIP, addr, []byte(b.String()), c.method, 30*time.Second)
	a := reply{peer: r.Local}
	if err != nil {
		return a, err
	}
	a.status, a.header, a.backend = r.Status, r.Header, r.Header.Get("X-Backend")
	if a.backend == "" {
		return a, fmt.Errorf("answer %d from Envoy, not a backend: %.200s", a.status, r.Body)
	}
	if err := json.Unmarshal(r.Body, &a.echo); err != nil {
		return a, fmt.Errorf("backend %s: %v", a.backend, err)
	}
	return a, nil
}

// oracle is lbcore deciding the shipped configuration's requests in the
// order they are sent to a proxy of its shape, with a persistence table of
// its own, as the proxy's one VM does.
type oracle struct {
	c     *lbcore.Config
	b     *lbcore.Balancer
	shape proxyShape
}

// newOracle is the oracle of a sidecar.
func newOracle(pluginConfig []byte) (*oracle, error) {
	return newOracleOf(sidecarShape, pluginConfig)
}

func newOracleOf(s proxyShape, pluginConfig []byte) (*oracle, error) {
	c, err := lbcore.ParseConfig(pluginConfig)
	if err != nil {
		return nil, err
	}
	b := lbcore.NewBalancer(c, 0)
	b.EnablePersistence(&corpus.MemStore{}, "hashlb")
	return &oracle{c: c, b: b, shape: s}, nil
}

// check decides r (as the filter saw it) and compares what the backend
// received: the backend is lbcore's first service, and the upstream got
// exactly one x-envoy-original-dst-host, lbcore's ranking (so that no
// client copy of it reached the backend), and one service header naming
// the first.
func (o *oracle) check(r corpus.Request, a reply) error {
	d := corpus.Oracle(o.b, r)
	if d.Len() == 0 {
		return fmt.Errorf("lbcore chose no service (%s) but %s answered", d.Reason, a.backend)
	}
	var addrs []string
	for i := range d.Len() {
		addrs = append(addrs, o.c.Services[d.At(i)].Address)
	}
	first := o.c.Services[d.At(0)].Name
	up := a.echo.Header[http.CanonicalHeaderKey(o.c.UpstreamHeader)]
	if a.backend != first || a.status != 200 {
		return fmt.Errorf("%d from %s, lbcore's choice is %s (%s, %s)", a.status, a.backend, first, strings.Join(addrs, ","), d.Reason)
	}
	if len(up) != 1 || up[0] != strings.Join(addrs, ",") {
		return fmt.Errorf("the backend received %s %q, lbcore's %q", o.c.UpstreamHeader, up, strings.Join(addrs, ","))
	}
	if o.c.ServiceHeader != "" {
		if svc := a.echo.Header[http.CanonicalHeaderKey(o.c.ServiceHeader)]; len(svc) != 1 || svc[0] != first {
			return fmt.Errorf("the backend received %s %q, want %q", o.c.ServiceHeader, svc, first)
		}
	}
	return nil
}

// send sends corpus request r to the proxy's listener and checks the reply
// (check); the error is the send's or the check's.
func (o *oracle) send(r corpus.Request) (reply, error) {
	c := fromCorpus(r)
	a, err := c.send(o.shape.addr)
	if err == nil {
		err = o.check(c.seen(a.peer, o.shape), a)
	}
	return a, err
}
