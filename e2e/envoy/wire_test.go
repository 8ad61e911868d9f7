package envoy

// Sending corpus requests to Envoy over real HTTP/1.1: one fresh TCP
// connection per request, from a chosen loopback source address, the
// request written byte for byte (so that an absolute-form target, a missing
// Host, duplicate headers and custom methods reach Envoy as the corpus has
// them), the answer read with net/http.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// wire is one request as sent: from srcIP to listener address dst.
type wire struct {
	srcIP, dst string
	method     string
	target     string
	host       string // Host header; "" sends none
	headers    [][2]string
}

// setHeaders sets w from headers as a filter would see them: :method, :path
// and :authority are the request line's method and target and the Host
// header, :scheme is not sent (Envoy sets it from the connection), and the
// rest are sent in order. A pseudo-header headers lacks leaves its field as
// it was.
func (w *wire) setHeaders(headers [][2]string) {
	for _, kv := range headers {
		switch kv[0] {
		case ":method":
			w.method = kv[1]
		case ":scheme":
		case ":authority":
			w.host = kv[1]
		case ":path":
			w.target = kv[1]
		default:
			w.headers = append(w.headers, kv)
		}
	}
}

// bytes is the HTTP/1.1 request.
func (w wire) bytes() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", w.method, w.target)
	if w.host != "" {
		fmt.Fprintf(&b, "Host: %s\r\n", w.host)
	}
	for _, kv := range w.headers {
		fmt.Fprintf(&b, "%s: %s\r\n", kv[0], kv[1])
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}

// seen is the request as the filter sees it in Envoy, for the oracle: the
// headers sent, :authority from Host, :path the target as sent, each
// absolute-form target split as Envoy's HTTP/1 codec does
// (corpus.AsEnvoyDecodes), and the connection's real addresses: src, the
// client's address and port Envoy accepted (the dialer's local address),
// and dst, the listener's.
func (w wire) seen(peer string) corpus.Request {
	hs := [][2]string{{":method", w.method}, {":scheme", "http"}}
	if w.host != "" {
		hs = append(hs, [2]string{":authority", w.host})
	}
	hs = append(hs, [2]string{":path", w.target})
	hs = append(hs, w.headers...)
	return corpus.AsEnvoyDecodes([]corpus.Request{{Headers: hs, Source: envoySource(hs, peer), Dest: w.dst}})[0]
}

// envoySource is the source.address Envoy gives a filter for a request
// with headers hs from peer, under an HTTP connection manager without
// use_remote_address (envoy.yaml's, and every bootstrap here): Envoy takes
// the downstream address from the last x-forwarded-for entry when it is an
// IP address, with port 0, and keeps the peer's only otherwise
// (ConnectionManagerUtility::mutateRequestHeaders, "If we are not using
// remote address, attempt to pull a valid IPv4 or IPv6 address out of XFF",
// source/common/http/conn_manager_utility.cc in envoyproxy/envoy, and
// Utility::getLastAddressFromXFF with xff_num_trusted_hops 0).
func envoySource(hs [][2]string, peer string) string {
	xff := corpus.HeaderValues(hs, "x-forwarded-for")
	if len(xff) == 0 {
		return peer
	}
	last := strings.TrimSpace(xff[len(xff)-1][strings.LastIndexByte(xff[len(xff)-1], ',')+1:])
	ip := net.ParseIP(last)
	if ip == nil {
		return peer
	}
	return net.JoinHostPort(ip.String(), "0")
}

// answer is what the client got back.
type answer struct {
	status  int
	backend string // X-Backend: the echo backend that answered ("" for Envoy's own reply)
	debug   string // x-hashlb-decision
	body    string
	echo    envoyrun.Echo // what the backend received (when backend != "")
	src     string        // the connection's client address as Envoy saw it
}

// outcome is the answer in the corpus's terms: the upstream and service
// headers as the upstream received them.
func (a answer) outcome() corpus.Outcome {
	if a.backend == "" {
		return corpus.Outcome{Status: a.status, Body: a.body, Debug: a.debug}
	}
	return corpus.Outcome{
		Upstream: a.echo.Header[http.CanonicalHeaderKey("x-envoy-original-dst-host")],
		Service:  a.echo.Header[http.CanonicalHeaderKey("x-hashlb-service")],
		Debug:    a.debug,
	}
}

// send sends w on a new connection and reads the answer.
func send(w wire) (answer, error) {
	r, err := envoyrun.Exchange(w.srcIP, w.dst, w.bytes(), w.method, 10*time.Second)
	a := answer{src: r.Local}
	if err != nil {
		return a, err
	}
	a.status, a.body = r.Status, string(r.Body)
	a.backend, a.debug = r.Header.Get("X-Backend"), r.Header.Get("x-hashlb-decision")
	if a.backend != "" {
		if err := json.Unmarshal(r.Body, &a.echo); err != nil {
			return a, fmt.Errorf("backend %s: %v: %s", a.backend, err, r.Body)
		}
	}
	return a, nil
}
