package hostsim

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
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
// failed callout: proxy_on_http_call_response with no headers and no body.
type HTTPHandler func(req *CallRequest) (*CallResponse, error)

// callout is a dispatched call awaiting its answer.
type callout struct {
	root  uint32
	token uint32
	req   *CallRequest
}

var httpCallFuncs = []hostFunc{
	{"proxy_http_call", "iiiiiiiiii", "i", hostHTTPCall},
}

// hostHTTPCall implements proxy_http_call(upstream, headers, body, trailers,
// timeout_ms, token_ptr) (cpp-host exports.cc http_call; Envoy
// Context::httpCall): BadArgument without :path, :method or :authority. The
// call belongs to the calling context's root context. hostsim answers it once
// the running guest call has returned, before control goes back to the caller.
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
	r := v.rootOf(v.context())
	if r == nil {
		return statusBadArgument
	}
	v.nextToken++
	if !v.putU32(p[9], v.nextToken) {
		return statusInvalidMemoryAccess
	}
	v.callouts = append(v.callouts, &callout{root: r.id, token: v.nextToken, req: &CallRequest{
		Worker: v.id, Cluster: string(cluster), Headers: headers, Body: body, Trailers: trailers,
		Timeout: time.Duration(uint32(p[8])) * time.Millisecond}})
	return statusOK
}

// deliverCallouts answers the pending callouts through
// proxy_on_http_call_response(root, token, headers, body_size, trailers);
// during that call the response is readable as header maps 6/7 and buffer 4.
func (v *vm) deliverCallouts() {
	for len(v.callouts) > 0 && v.dead == nil {
		c := v.callouts[0]
		v.callouts = v.callouts[1:]
		handler := v.h.cfg.HTTPCall
		if handler == nil {
			handler = LoopbackHTTP
		}
		resp, err := handler(c.req)
		if err != nil || resp == nil {
			v.h.logs.add(v.id, LogDebug, fmt.Sprintf("hostsim: callout %d failed: %v", c.token, err))
			resp = &CallResponse{}
		}
		v.callResp = resp
		v.call("proxy_on_http_call_response", uint64(c.root), uint64(c.token),
			uint64(len(resp.Headers)), uint64(len(resp.Body)), uint64(len(resp.Trailers)))
		v.callResp = nil
	}
}

// LoopbackHTTP is the default HTTPHandler: a real HTTP/1.1 request to
// http://<:authority><:path>, with the module's timeout.
func LoopbackHTTP(req *CallRequest) (*CallResponse, error) {
	return SendHTTP(req, req.Header(":authority"))
}

// SendHTTP sends req as a real HTTP request to addr (host:port).
func SendHTTP(req *CallRequest, addr string) (*CallResponse, error) {
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
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
	resp, err := http.DefaultClient.Do(hr)
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
