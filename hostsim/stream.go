package hostsim

import (
	"context"
	"errors"
	"strconv"
	"strings"
)

// Action is what a header callback returned (spec: proxy_action).
type Action uint32

// Actions.
const (
	ActionContinue Action = 0 // let the headers go on
	ActionPause    Action = 1 // StopIteration: hold them until proxy_continue_stream
)

// LocalReply is a response the filter sent itself (proxy_send_local_response),
// after it went through the filter's own proxy_on_response_headers.
type LocalReply struct {
	Status     int
	Details    string // response code details
	Body       []byte
	Headers    [][2]string // final response headers, :status first
	GRPCStatus int32       // -1 when none
}

// Result is the outcome of feeding headers to a stream.
type Result struct {
	// Action is what the callback returned.
	Action Action
	// Headers are the headers as they leave the filter: for RequestHeaders the
	// request headers the upstream would get, for ResponseHeaders the response
	// headers the client would get. Nil when a local reply replaced them.
	Headers [][2]string
	// LocalReply is set when the filter answered the request itself.
	LocalReply *LocalReply
	// Err is set when the VM is dead (it trapped now or earlier); the result
	// is then Envoy's failure policy: a 503 local reply, or the headers
	// unchanged when Config.FailOpen is set.
	Err error
}

// Header returns the first value of header name in r.Headers (case-insensitive).
func (r Result) Header(name string) (string, bool) { return lookup(r.Headers, strings.ToLower(name)) }

// Header returns the first value of header name of the local reply.
func (l *LocalReply) Header(name string) (string, bool) {
	return lookup(l.Headers, strings.ToLower(name))
}

// Stream is one HTTP stream (an HTTP context of the module) on one worker.
// Its methods follow Envoy's order: RequestHeaders, ResponseHeaders, Finish.
// A Stream is not safe for concurrent use; different streams are.
type Stream struct {
	v        *vm
	id, root uint32
	maps     [4]*headerMap
	props    map[string][]byte
	orig     [][2]string // request headers as received
	status   int
	local    *LocalReply
	inLocal  bool
	finished bool
	closed   bool
	resumed  bool    // proxy_continue_stream(0) was called on the stream
	calls    []Call  // Config.Trace
	entries  []Entry // Config.Trace

	// The request's way out of the filter (see Wait).
	req     reqState
	outcome Result        // set when req becomes reqDone
	done    chan struct{} // closed when req becomes reqDone
	// fstate is the filter state the module set (set_envoy_filter_state).
	fstate map[string]FilterStateEntry
	// conn is set for a connection context (Host.Conn), nil for HTTP.
	conn *connState
}

// reqState is where a stream's request headers are.
type reqState int

const (
	reqNone   reqState = iota // RequestHeaders not called yet
	reqPaused                 // proxy_on_request_headers returned Pause, nothing resolved it yet
	reqDone                   // continued, answered locally, closed, reset or failed: outcome holds it
)

// ErrStreamFinished is returned when a finished stream is used again, and by
// Wait for a paused stream that Finish reset.
var ErrStreamFinished = errors.New("hostsim: stream already finished")

// ErrStreamClosed is Wait's error for a request the module closed
// (proxy_close_stream): Envoy resets the stream, the client gets no response.
var ErrStreamClosed = errors.New("hostsim: stream closed by the module (proxy_close_stream)")

// Stream creates an HTTP context on worker (proxy_on_context_create(id, root)).
func (h *Host) Stream(worker int) *Stream {
	v := h.vms[worker]
	v.mu.Lock()
	defer v.mu.Unlock()
	v.nextID++
	s := &Stream{v: v, id: v.nextID, root: v.root.id, props: map[string][]byte{}, done: make(chan struct{})}
	for i := range s.maps {
		s.maps[i] = &headerMap{}
	}
	if v.dead == nil {
		v.streams[s.id] = s
		v.root.streams++
		v.call("proxy_on_context_create", uint64(s.id), uint64(s.root))
	}
	return s
}

// ID returns the stream's context id.
func (s *Stream) ID() uint32 { return s.id }

// Root returns the id of the root context the stream belongs to: the one
// that was current when it was created.
func (s *Stream) Root() uint32 { return s.root }

// Property returns a property of the stream as the module would read it
// (path dotted, e.g. "source.address", or NUL-separated).
func (s *Stream) Property(path string) ([]byte, bool) {
	s.v.mu.Lock()
	defer s.v.mu.Unlock()
	saved := s.v.cur
	s.v.cur = s.id
	defer func() { s.v.cur = saved }()
	return s.v.property(propKey(path))
}

func (s *Stream) failure(headers [][2]string) Result {
	err := s.v.dead
	if err == nil {
		err = ErrStreamFinished
	}
	if s.v.h.cfg.FailOpen && s.v.dead != nil {
		return Result{Action: ActionContinue, Headers: headers, Err: err}
	}
	return Result{Err: err, LocalReply: &LocalReply{Status: 503, Details: "wasm_fail_stream",
		Headers: [][2]string{{":status", "503"}}, GRPCStatus: -1}}
}

func lowerPairs(ps [][2]string) [][2]string {
	out := make([][2]string, len(ps))
	for i, p := range ps {
		out[i] = [2]string{strings.ToLower(p[0]), p[1]}
	}
	return out
}

// RequestHeaders sends the request headers (end of stream: no body) with
// per-stream properties by dotted path (see PropString, PropInt), calling
// proxy_on_request_headers. After it returns Continue the request headers are
// out of the module's reach, as in Envoy.
func (s *Stream) RequestHeaders(headers [][2]string, props map[string][]byte) Result {
	v := s.v
	v.mu.Lock()
	defer v.mu.Unlock()
	res := s.requestHeaders(headers, props)
	switch {
	case s.req != reqNone: // headers sent twice: Wait keeps the first outcome
	case res.Action == ActionPause && res.LocalReply == nil && res.Err == nil:
		s.req = reqPaused
		v.paused++
		s.settle() // the module may have resumed it already (a callout answered in the same call)
	default:
		s.resolve(res)
	}
	return res
}

func (s *Stream) requestHeaders(headers [][2]string, props map[string][]byte) Result {
	v := s.v
	if v.dead != nil || s.finished {
		return s.failure(headers)
	}
	s.orig = lowerPairs(headers)
	s.maps[mapRequestHeaders] = &headerMap{pairs: lowerPairs(headers), state: mapOpen}
	s.maps[mapRequestTrailers] = &headerMap{state: mapOpen}
	for k, val := range propMap(props) {
		s.props[k] = val
	}
	act, err := v.call("proxy_on_request_headers", uint64(s.id), uint64(len(headers)), 1)
	if err != nil {
		return s.failure(headers)
	}
	if s.local != nil {
		s.closeRequest()
		return s.localReply()
	}
	res := Result{Action: Action(act), Headers: append([][2]string(nil), s.maps[mapRequestHeaders].pairs...)}
	if res.Action == ActionContinue {
		s.closeRequest()
	}
	return res
}

func (s *Stream) closeRequest() {
	s.maps[mapRequestHeaders].state = mapClosed
	s.maps[mapRequestTrailers].state = mapClosed
}

// localReply runs a local reply through the filter's own
// proxy_on_response_headers, as Envoy's encoder chain does.
func (s *Stream) localReply() Result {
	l := s.local
	hs := [][2]string{{":status", strconv.Itoa(l.Status)}}
	if len(l.Body) > 0 {
		hs = append(hs, [2]string{"content-length", strconv.Itoa(len(l.Body))}, [2]string{"content-type", "text/plain"})
	}
	hs = append(hs, lowerPairs(l.Headers)...)
	s.status = l.Status
	s.maps[mapResponseHeaders] = &headerMap{pairs: hs, state: mapOpen}
	s.maps[mapResponseTrailers] = &headerMap{state: mapOpen}
	s.inLocal = true
	_, err := s.v.call("proxy_on_response_headers", uint64(s.id), uint64(len(hs)), boolArg(len(l.Body) == 0))
	s.inLocal = false
	s.maps[mapResponseHeaders].state = mapClosed
	s.maps[mapResponseTrailers].state = mapClosed
	l.Headers = append([][2]string(nil), s.maps[mapResponseHeaders].pairs...)
	return Result{LocalReply: l, Err: err}
}

func boolArg(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// ResponseHeaders sends the upstream's response headers (end of stream)
// through proxy_on_response_headers and returns them as the client would get them.
func (s *Stream) ResponseHeaders(headers [][2]string) Result {
	v := s.v
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.dead != nil || s.finished {
		return s.failure(headers)
	}
	if s.local != nil {
		return Result{LocalReply: s.local, Err: errors.New("hostsim: stream already answered by a local reply")}
	}
	hs := lowerPairs(headers)
	if st, ok := lookup(hs, ":status"); ok {
		s.status, _ = strconv.Atoi(st)
	}
	s.maps[mapResponseHeaders] = &headerMap{pairs: hs, state: mapOpen}
	s.maps[mapResponseTrailers] = &headerMap{state: mapOpen}
	act, err := v.call("proxy_on_response_headers", uint64(s.id), uint64(len(hs)), 1)
	if err != nil {
		return s.failure(headers)
	}
	if s.local != nil {
		return s.localReply()
	}
	res := Result{Action: Action(act), Headers: append([][2]string(nil), s.maps[mapResponseHeaders].pairs...)}
	if res.Action == ActionContinue {
		s.maps[mapResponseHeaders].state = mapClosed
		s.maps[mapResponseTrailers].state = mapClosed
	}
	return res
}

// ResponseBody sends one frame of the response's body, size bytes (the last
// when end is set), through proxy_on_response_body, as Envoy does for each
// data frame after the response headers; a module without that export is
// not called. The body's bytes are not held: the module reads its buffer
// as absent.
func (s *Stream) ResponseBody(size int, end bool) (Action, error) {
	v := s.v
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.dead != nil {
		return ActionContinue, v.dead
	}
	if s.finished || s.local != nil {
		return ActionContinue, ErrStreamFinished
	}
	act, err := v.call("proxy_on_response_body", uint64(s.id), uint64(size), boolArg(end))
	return Action(act), err
}

// Finish ends the stream: proxy_on_done, proxy_on_log (both header maps
// readable, read-only), proxy_on_delete. It returns the VM's error if it is
// dead. A context whose proxy_on_done returns false is still logged and
// deleted at once (hostsim does not wait for proxy_done).
func (s *Stream) Finish() error {
	return s.end(func(v *vm) error {
		if _, err := v.call("proxy_on_done", uint64(s.id)); err != nil {
			return err
		}
		for _, m := range s.maps {
			if m.state != mapAbsent {
				m.state = mapReadOnly
			}
		}
		if _, err := v.call("proxy_on_log", uint64(s.id)); err != nil {
			return err
		}
		for _, m := range s.maps {
			if m.state != mapAbsent {
				m.state = mapClosed
			}
		}
		_, err := v.call("proxy_on_delete", uint64(s.id))
		return err
	})
}

// end ends the context once, with the VM locked (a second end does
// nothing): a request still paused in the filter is resolved as Envoy's
// reset resolves it (the context goes away and nothing resumes it), the
// module's last callbacks run in calls unless the VM is dead (whose error
// end returns), and the VM forgets the context either way. Stream.Finish
// and Conn.Close end their contexts so.
func (s *Stream) end(calls func(v *vm) error) error {
	v := s.v
	v.mu.Lock()
	defer v.mu.Unlock()
	if s.finished {
		return nil
	}
	s.finished = true
	if s.req == reqPaused {
		s.resolve(Result{Action: ActionPause, Err: ErrStreamFinished})
	}
	defer v.forget(s)
	if v.dead != nil {
		return v.dead
	}
	return calls(v)
}

// Wait blocks until the request of a stream whose RequestHeaders returned
// Pause leaves the filter, and returns the Result RequestHeaders would have
// returned then:
//   - the module resumed it (proxy_continue_stream(0) on the stream, also
//     through proxy_set_effective_context from a callout's response or a
//     tick): Action Continue, Headers as they leave the filter;
//   - the module answered it (proxy_send_local_response): LocalReply, after
//     the reply went through the filter's proxy_on_response_headers;
//   - the module closed it (proxy_close_stream): Err ErrStreamClosed;
//   - the VM died: Envoy's failure policy, as RequestHeaders;
//   - Finish reset it: Err ErrStreamFinished; the Host closed: ErrHostClosed;
//   - ctx ended first: Action Pause and ctx's error; the stream stays paused.
//
// For a request that already left the filter (RequestHeaders returned
// Continue or a local reply, or the module resumed it) Wait returns that at
// once. Wait may be called from another goroutine than the stream's other
// methods.
func (s *Stream) Wait(ctx context.Context) Result {
	v := s.v
	v.mu.Lock()
	if s.req == reqNone {
		v.mu.Unlock()
		return Result{Err: errors.New("hostsim: Wait before RequestHeaders")}
	}
	v.mu.Unlock()
	select {
	case <-s.done:
	case <-ctx.Done():
		select {
		case <-s.done: // resolved at the same time: prefer the outcome
		default:
			return Result{Action: ActionPause, Err: ctx.Err()}
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return s.outcome
}

// resolve records the request's way out of the filter and wakes Wait.
func (s *Stream) resolve(r Result) {
	switch s.req {
	case reqDone:
		return
	case reqPaused:
		s.v.paused--
	}
	s.req, s.outcome = reqDone, r
	close(s.done)
}

// settle resolves a paused request that the module has let go of, reporting
// whether it did. The VM's lock is held.
func (s *Stream) settle() bool {
	if s.req != reqPaused {
		return false
	}
	switch {
	case s.v.dead != nil:
		s.resolve(s.failure(s.orig))
	case s.local != nil:
		s.closeRequest()
		s.resolve(s.localReply())
	case s.closed:
		s.resolve(Result{Action: ActionPause, Err: ErrStreamClosed})
	case s.resumed:
		s.resolve(Result{Action: ActionContinue, Headers: append([][2]string(nil), s.maps[mapRequestHeaders].pairs...)})
	default:
		return false
	}
	return true
}

// settle resolves every paused stream of the VM that the last guest call let
// go of (continued, answered, closed, or the VM died). Called after each
// top-level guest call; a local reply runs the filter's
// proxy_on_response_headers, which may let go of further streams, so it
// repeats until nothing changes.
func (v *vm) settle() {
	if v.settling || v.paused == 0 {
		return
	}
	v.settling = true
	defer func() { v.settling = false }()
	for changed := true; changed && v.paused > 0; {
		changed = false
		for _, s := range v.streams {
			if s.settle() {
				changed = true
			}
		}
	}
}
