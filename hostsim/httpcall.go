package hostsim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CallRequest is one proxy_http_call made by the module.
type CallRequest struct {
	Worker   int           // the VM that made the call
	Cluster  string        // the upstream (Envoy cluster) name
	Headers  [][2]string   // including :method, :path, :authority
	Body     []byte        // request body
	Trailers [][2]string   // request trailers
	Timeout  time.Duration // the module's timeout
}

// Header returns the first value of header name (lower case), or "".
func (r *CallRequest) Header(name string) string {
	v, _ := lookup(r.Headers, name)
	return v
}

// CallResponse is the answer handed to proxy_on_http_call_response.
type CallResponse struct {
	Headers  [][2]string // including :status
	Body     []byte
	Trailers [][2]string
}

// HTTPHandler answers callouts. An error is delivered as Envoy delivers a
// callout whose upstream refused the connection: a 503 that Envoy makes
// itself (see failedCallout).
type HTTPHandler func(req *CallRequest) (*CallResponse, error)

// failedCallout is what Envoy hands proxy_on_http_call_response when a
// callout gets no answer from its upstream: not a failure without headers,
// but a response of Envoy's own router (the async client's local reply),
// with three headers (:status, content-length, content-type text/plain)
// and a text body. Measured in Envoy 1.36.4 and 1.40.0 by e2e/envoy's
// TestHostFactsAsEnvoyAnswers (docs/envoy-host.md#http-callouts):
//   - the module's timeout passed: 504 "upstream request timeout";
//   - connection refused: 503 "upstream connect error or disconnect/reset
//     before headers. reset reason: remote connection failure", to which
//     1.36 (profile envoy-1.33) adds ", transport failure reason: delayed
//     connect error: Connection refused";
//   - the connection closed before a response: 503 "upstream connect error
//     or disconnect/reset before headers. reset reason: connection
//     termination".
func (h *Host) failedCallout(err error) *CallResponse {
	status, body := "503", "upstream connect error or disconnect/reset before headers. reset reason: connection termination"
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		status, body = "504", "upstream request timeout"
	case errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, new(net.Error)):
		// A handler's own error stands for a refused connection.
		body = "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure"
		if h.prof.name == ProfileEnvoy133 {
			body += ", transport failure reason: delayed connect error: Connection refused"
		}
	}
	return &CallResponse{Headers: [][2]string{{":status", status}, {"content-length", strconv.Itoa(len(body))},
		{"content-type", "text/plain"}}, Body: []byte(body)}
}

// callout is a dispatched call awaiting its answer.
type callout struct {
	root  uint32
	token uint32
	req   *CallRequest
	sent  time.Time // real time
}

var httpCallFuncs = []hostFunc{
	{"proxy_http_call", "iiiiiiiiii", "i", hostHTTPCall},
}

// hostHTTPCall implements proxy_http_call(upstream, headers, body, trailers,
// timeout_ms, token_ptr) (cpp-host exports.cc http_call; Envoy
// Context::httpCall): BadArgument without :path, :method or :authority, with
// a timeout of 2^31 ms or more (Envoy reads it as a signed int), or, when
// the host has Config.Clusters and no Config.HTTPCall, for a cluster not
// among them (Envoy's answer to an unknown cluster; measured in 1.36.4 and
// 1.40.0, TestHostFactsAsEnvoyAnswers). The
// call belongs to the calling context's root context. A call to a cluster of
// Config.Clusters is sent at once on its own goroutine and answered whenever
// its response, failure or timeout comes, as Envoy's async client does (see
// startCallout); any other call is answered by Config.HTTPCall once the
// running guest call has returned, before control goes back to the caller.
func hostHTTPCall(v *vm, p []uint64) uint64 {
	cluster, ok1 := v.mem(p[0], p[1])
	hb, ok2 := v.mem(p[2], p[3])
	body, ok3 := v.mem(p[4], p[5])
	tb, ok4 := v.mem(p[6], p[7])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return statusInvalidMemoryAccess
	}
	headers, ok := decodePairs(hb)
	trailers, ok2 := decodePairs(tb)
	if !ok || !ok2 {
		return statusBadArgument
	}
	for _, k := range []string{":path", ":method", ":authority"} {
		if _, ok := lookup(headers, k); !ok {
			return statusBadArgument
		}
	}
	if int32(uint32(p[8])) < 0 {
		return statusBadArgument
	}
	if _, known := v.h.cfg.Clusters[string(cluster)]; !known && v.h.cfg.Clusters != nil && v.h.cfg.HTTPCall == nil {
		return statusBadArgument
	}
	r := v.rootOf(v.context())
	if r == nil {
		return statusBadArgument
	}
	v.nextToken++
	if !v.putU32(p[9], v.nextToken) {
		return statusInvalidMemoryAccess
	}
	c := &callout{root: r.id, token: v.nextToken, req: &CallRequest{
		Worker: v.id, Cluster: string(cluster), Headers: headers, Body: body, Trailers: trailers,
		Timeout: time.Duration(uint32(p[8])) * time.Millisecond}, sent: time.Now()}
	if addr, ok := v.h.cfg.Clusters[c.req.Cluster]; ok {
		v.h.startCallout(v, c, addr)
		return statusOK
	}
	v.callouts = append(v.callouts, c)
	return statusOK
}

// deliverCallouts answers the pending callouts through
// proxy_on_http_call_response(root, token, headers, body_size, trailers);
// during that call the response is readable as header maps 6/7 and buffer 4.
func (v *vm) deliverCallouts() {
	for len(v.callouts) > 0 && v.dead == nil {
		c := v.callouts[0]
		v.callouts = v.callouts[1:]
		if v.roots[c.root] == nil {
			continue // its root context was deleted: Envoy cancels its callouts
		}
		handler := v.h.cfg.HTTPCall
		if handler == nil {
			handler = LoopbackHTTP
		}
		resp, err := handler(c.req)
		if err != nil || resp == nil {
			v.h.logs.add(v.id, LogDebug, fmt.Sprintf("hostsim: callout %d failed: %v", c.token, err))
			if err == nil {
				err = errors.New("no response")
			}
			resp = v.h.failedCallout(err)
		}
		v.deliver(c, resp)
	}
}

// deliver hands resp to proxy_on_http_call_response of c's root context.
func (v *vm) deliver(c *callout, resp *CallResponse) {
	v.callResp = resp
	v.call("proxy_on_http_call_response", uint64(c.root), uint64(c.token),
		uint64(len(resp.Headers)), uint64(len(resp.Body)), uint64(len(resp.Trailers)))
	v.callResp = nil
}

// startCallout sends c to a cluster of Config.Clusters on its own goroutine.
// Envoy's async client answers a callout later, from the worker's event loop:
// the response (or the failure: connection refused, reset, or the module's
// timeout elapsed) calls proxy_on_http_call_response on the root context that
// made the call, with no guest call of that VM running (context.cc
// Context::httpCall, onHttpCallSuccess, onHttpCallFailure). hostsim takes the
// VM's lock for that call. Timeout 0 means none, as in Envoy; Host.Close
// cancels what is still in flight. A callout made after Close is dropped.
func (h *Host) startCallout(v *vm, c *callout, addr string) {
	h.bgMu.Lock()
	defer h.bgMu.Unlock()
	if h.closed {
		return
	}
	h.bg.Add(1)
	h.pending++
	go h.runCallout(v, c, addr)
}

func (h *Host) runCallout(v *vm, c *callout, addr string) {
	defer h.bg.Done()
	ctx, cancel := h.bgCtx, context.CancelFunc(func() {})
	if c.req.Timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.req.Timeout)
	}
	resp, err := sendHTTP(ctx, h.client, c.req, addr)
	cancel()
	v.mu.Lock()
	defer v.mu.Unlock()
	h.bgMu.Lock()
	h.pending--
	closed := h.closed
	h.bgMu.Unlock()
	switch {
	case closed:
		return // Envoy cancels a root context's callouts when it goes away
	case v.dead != nil:
		return
	case v.roots[c.root] == nil:
		v.h.logs.add(v.id, LogDebug, fmt.Sprintf("hostsim: callout %d dropped: root context %d is gone", c.token, c.root))
		return
	}
	if err != nil {
		v.h.logs.add(v.id, LogDebug, fmt.Sprintf("hostsim: callout %d to cluster %s (%s) failed: %v", c.token, c.req.Cluster, addr, err))
		resp = h.failedCallout(err)
	}
	if c.req.Timeout > 0 {
		h.noteLate(time.Since(c.sent) - c.req.Timeout)
	}
	if h.cfg.OnCallout != nil {
		h.cfg.OnCallout(CalloutRecord{Req: c.req, Resp: resp, Err: err, Sent: c.sent, Answered: time.Now()})
	}
	v.deliver(c, resp)
}

// CalloutRecord is one callout to Config.Clusters and what the module was
// handed for it (Config.OnCallout).
type CalloutRecord struct {
	Req            *CallRequest
	Resp           *CallResponse // as delivered: Envoy's own 503 or 504 when Err is set
	Err            error         // why no answer came from the upstream
	Sent, Answered time.Time     // real time
}

func (h *Host) noteLate(d time.Duration) {
	h.bgMu.Lock()
	h.calloutLate = max(h.calloutLate, d)
	h.bgMu.Unlock()
}

// CalloutLate is the most a callout to Config.Clusters reached the module
// after its timeout (real time, from proxy_http_call to
// proxy_on_http_call_response): 0 on an idle machine; on a loaded one, how
// late the host itself was, which a test of the module's waits allows for.
func (h *Host) CalloutLate() time.Duration {
	h.bgMu.Lock()
	defer h.bgMu.Unlock()
	return h.calloutLate
}

// PendingCallouts returns how many callouts to Config.Clusters are in flight:
// sent and not yet answered (or dropped).
func (h *Host) PendingCallouts() int {
	h.bgMu.Lock()
	defer h.bgMu.Unlock()
	return h.pending
}

// LoopbackHTTP is the default HTTPHandler: a real HTTP/1.1 request to
// http://<:authority><:path>, with the module's timeout.
func LoopbackHTTP(req *CallRequest) (*CallResponse, error) {
	return SendHTTP(req, req.Header(":authority"))
}

// SendHTTP sends req as a real HTTP request to addr (host:port), with the
// module's timeout (5 s when it gave none).
func SendHTTP(req *CallRequest, addr string) (*CallResponse, error) {
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return sendHTTP(ctx, http.DefaultClient, req, addr)
}

// sendHTTP sends req as HTTP/1.1 to addr with client until ctx ends: the
// module's :method and :path, :authority as the Host header, its other
// headers and its body. The response's header names are lower case, :status
// first.
func sendHTTP(ctx context.Context, client *http.Client, req *CallRequest, addr string) (*CallResponse, error) {
	hr, err := http.NewRequestWithContext(ctx, req.Header(":method"), "http://"+addr+req.Header(":path"), bytes.NewReader(req.Body))
	if err != nil {
		return nil, err
	}
	hr.Host = req.Header(":authority")
	for _, h := range req.Headers {
		if !strings.HasPrefix(h[0], ":") {
			hr.Header.Add(h[0], h[1])
		}
	}
	resp, err := client.Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := &CallResponse{Body: body, Headers: [][2]string{{":status", strconv.Itoa(resp.StatusCode)}}}
	for k, vs := range resp.Header {
		for _, val := range vs {
			out.Headers = append(out.Headers, [2]string{strings.ToLower(k), val})
		}
	}
	return out, nil
}
