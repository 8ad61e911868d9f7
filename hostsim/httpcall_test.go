package hostsim

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestHTTPCallGoHandler(t *testing.T) {
	var got []*CallRequest
	h := newHost(t, "basic", Config{HTTPCall: func(r *CallRequest) (*CallResponse, error) {
		got = append(got, r)
		if len(got) > 1 {
			return nil, errors.New("refused")
		}
		return &CallResponse{Headers: [][2]string{{":status", "204"}}, Body: []byte("pong")}, nil
	}})
	// A handler's error is answered as Envoy answers a refused connection.
	refused := "callout 2 status 503 body upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, transport failure reason: delayed connect error: Connection refused"
	for i, want := range []string{"callout 1 status 204 body pong", refused} {
		res := h.Stream(0).RequestHeaders(req("/call"), nil)
		if v, _ := res.Header("x-call"); v != fmt.Sprintf("0:%d", i+1) {
			t.Fatalf("http_call = %q, want ok with token %d", v, i+1)
		}
		if v, _ := res.Header("x-call-bad"); v != "2" {
			t.Fatalf("http_call without :authority = %q, want 2 BadArgument", v)
		}
		logs := h.LogsAt(LogInfo)
		if last := logs[len(logs)-1]; last != want {
			t.Fatalf("on_http_call_response log = %q, want %q", last, want)
		}
	}
	if r := got[0]; r.Cluster != "cluster" || r.Header(":path") != "/probe" || r.Timeout.Milliseconds() != 1000 {
		t.Fatalf("request = %+v", r)
	}
}

func TestHTTPCallLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	h := newHost(t, "basic", Config{HTTPCall: func(r *CallRequest) (*CallResponse, error) {
		return SendHTTP(r, ln.Addr().String())
	}})
	h.Stream(0).RequestHeaders(req("/call"), nil)
	logs := h.LogsAt(LogInfo)
	if last := logs[len(logs)-1]; !strings.HasSuffix(last, "status 200 body hello /probe") {
		t.Fatalf("on_http_call_response log = %q", last)
	}
}
