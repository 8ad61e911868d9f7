package main

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/hashlb/hashlb/hostsim"
)

// proxy is the HTTP side: one hostsim stream per request.
type proxy struct {
	host   *hostsim.Host
	header string // the upstream header the module sets
	next   atomic.Uint64
}

var transport = &http.Transport{MaxIdleConnsPerHost: 64}

// ServeHTTP runs one request through a worker: request headers (with the
// connection's properties), then the upstream named by the module's header,
// then the response headers, then the end of the stream.
func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	worker := int(p.next.Add(1) % uint64(p.host.Workers()))
	s := p.host.Stream(worker)
	defer s.Finish()
	headers := [][2]string{{":method", r.Method}, {":path", r.URL.RequestURI()}, {":authority", r.Host}, {":scheme", "http"}}
	for k, vs := range r.Header {
		for _, v := range vs {
			headers = append(headers, [2]string{strings.ToLower(k), v})
		}
	}
	res := s.RequestHeaders(headers, connectionProps(r))
	if res.Action == hostsim.ActionPause && res.LocalReply == nil && res.Err == nil {
		// The filter holds the request (waiting on a callout): as Envoy, go
		// on when it resumes, answers or closes it, or the client goes away.
		res = s.Wait(r.Context())
	}
	if res.LocalReply != nil {
		writeLocal(w, res.LocalReply)
		return
	}
	if res.Err != nil && res.Action != hostsim.ActionContinue {
		panic(http.ErrAbortHandler) // closed by the module, or the client is gone: reset
	}
	resp, err := p.forward(r, res)
	if err != nil {
		// Envoy's upstream failure is a local reply that still goes through
		// the filter's response path.
		out := s.ResponseHeaders([][2]string{{":status", "503"}, {"content-type", "text/plain"}})
		writeHeaders(w, out, 503)
		io.WriteString(w, "upstream connect error or disconnect/reset before headers: "+err.Error()+"\n")
		return
	}
	defer resp.Body.Close()
	hs := [][2]string{{":status", strconv.Itoa(resp.StatusCode)}}
	for k, vs := range resp.Header {
		for _, v := range vs {
			hs = append(hs, [2]string{strings.ToLower(k), v})
		}
	}
	out := s.ResponseHeaders(hs)
	if out.LocalReply != nil {
		writeLocal(w, out.LocalReply)
		return
	}
	writeHeaders(w, out, resp.StatusCode)
	io.Copy(w, resp.Body)
}

// forward sends the request to the first address of the upstream header, as
// an ORIGINAL_DST cluster with use_http_header does.
func (p *proxy) forward(r *http.Request, res hostsim.Result) (*http.Response, error) {
	target, _ := res.Header(p.header)
	target = strings.TrimSpace(strings.Split(target, ",")[0])
	if target == "" {
		return nil, errNoUpstream
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+target+r.URL.RequestURI(), r.Body)
	if err != nil {
		return nil, err
	}
	for _, h := range res.Headers {
		if !strings.HasPrefix(h[0], ":") {
			out.Header.Add(h[0], h[1])
		}
	}
	if a, ok := res.Header(":authority"); ok {
		out.Host = a
	}
	out.ContentLength = r.ContentLength
	return transport.RoundTrip(out)
}

type proxyError string

func (e proxyError) Error() string { return string(e) }

const errNoUpstream = proxyError("no upstream address in the request headers")

// callout answers the module's proxy_http_call: to the address in the upstream
// header when set (an ORIGINAL_DST cluster), else to :authority.
func (p *proxy) callout(req *hostsim.CallRequest) (*hostsim.CallResponse, error) {
	if addr := strings.TrimSpace(strings.Split(req.Header(p.header), ",")[0]); addr != "" {
		return hostsim.SendHTTP(req, addr)
	}
	return hostsim.LoopbackHTTP(req)
}

// connectionProps are the Envoy properties of the downstream connection.
func connectionProps(r *http.Request) map[string][]byte {
	props := map[string][]byte{"source.address": hostsim.PropString(r.RemoteAddr), "connection.mtls": hostsim.PropBool(false)}
	if _, port, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		n, _ := strconv.Atoi(port)
		props["source.port"] = hostsim.PropInt(int64(n))
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		props["destination.address"] = hostsim.PropString(a.String())
		if _, port, err := net.SplitHostPort(a.String()); err == nil {
			n, _ := strconv.Atoi(port)
			props["destination.port"] = hostsim.PropInt(int64(n))
		}
	}
	return props
}

func writeHeaders(w http.ResponseWriter, res hostsim.Result, status int) {
	for _, h := range res.Headers {
		if h[0] == ":status" {
			status, _ = strconv.Atoi(h[1])
		} else if !strings.HasPrefix(h[0], ":") && h[0] != "content-length" {
			w.Header().Add(h[0], h[1])
		}
	}
	w.WriteHeader(status)
}

func writeLocal(w http.ResponseWriter, l *hostsim.LocalReply) {
	for _, h := range l.Headers {
		if !strings.HasPrefix(h[0], ":") && h[0] != "content-length" {
			w.Header().Add(h[0], h[1])
		}
	}
	w.WriteHeader(l.Status)
	w.Write(l.Body)
}
