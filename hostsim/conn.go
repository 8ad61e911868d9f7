package hostsim

import "net/netip"

// Peer types of a connection close (proxy-wasm spec: proxy_peer_type;
// cpp-host CloseType): who closed it, as Envoy's connection event says.
const (
	PeerUnknown = 0 // Envoy's upstream close signal, seen as end of upstream data
	PeerLocal   = 1 // the proxy closed it (a LocalClose event: proxy_close_stream, tcp_proxy)
	PeerRemote  = 2 // the client closed or reset it (a RemoteClose event)
)

// Conn is one TCP connection: a network-filter context of the module on one
// worker, as Envoy's envoy.filters.network.wasm creates it for every
// accepted connection. Its methods follow Envoy's order
// (source/extensions/common/wasm/context.cc): NewConnection, then
// DownstreamData and UpstreamData any number of times, then Close. Each
// method holds the worker's lock for its callbacks, so the two directions'
// data may be reported from two goroutines (hashlb-proxy -tcp does); after
// Close the others return ErrStreamFinished.
type Conn struct{ s *Stream }

// connState is what a connection context holds beyond a stream's.
type connState struct {
	closeDownstream bool // proxy_close_stream(downstream) was called
	closeUpstream   bool // proxy_close_stream(upstream) was called
}

// FilterStateEntry is a filter state object the module set with the foreign
// function set_envoy_filter_state.
type FilterStateEntry struct {
	Value string
	Span  int // LifeSpan: 0 FilterChain, 1 DownstreamRequest, 2 DownstreamConnection
}

// ConnResult is the outcome of proxy_on_new_connection.
type ConnResult struct {
	// Action is what the callback returned: Continue lets tcp_proxy connect,
	// Pause holds the connection.
	Action Action
	// Upstream is the ORIGINAL_DST filter state the module set
	// (envoy.network.transport_socket.original_dst_address), "" if none: the
	// address tcp_proxy's ORIGINAL_DST cluster would connect to.
	Upstream string
	// Closed is true when the module asked Envoy to close the downstream
	// connection (proxy_close_stream).
	Closed bool
	// Err is set when the VM is dead; Envoy then closes the connection.
	Err error
}

// Routed reports whether Envoy would connect the connection upstream: the
// module continued, did not close it and named an address.
func (r ConnResult) Routed() bool {
	return r.Err == nil && r.Action == ActionContinue && !r.Closed && r.Upstream != ""
}

// originalDstKey is the filter state key an ORIGINAL_DST cluster reads
// (Envoy source/extensions/clusters/original_dst/original_dst_cluster.h).
const originalDstKey = "envoy.network.transport_socket.original_dst_address"

// Conn creates a connection context on worker (proxy_on_context_create(id,
// root)); NewConnection then runs proxy_on_new_connection.
func (h *Host) Conn(worker int) *Conn {
	s := h.Stream(worker)
	s.v.mu.Lock()
	s.conn = &connState{}
	s.v.mu.Unlock()
	return &Conn{s: s}
}

// ID returns the connection's context id.
func (c *Conn) ID() uint32 { return c.s.id }

// NewConnection runs proxy_on_new_connection with the connection's
// properties by dotted path, source.address and destination.address
// ("ip:port") above all; source.port and destination.port are derived from
// them as Envoy does.
func (c *Conn) NewConnection(props map[string][]byte) ConnResult {
	s := c.s
	v := s.v
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.dead != nil || s.finished {
		return ConnResult{Err: s.deadErr(), Closed: true}
	}
	for k, val := range propMap(props) {
		s.props[k] = val
	}
	for _, side := range []string{"source", "destination"} {
		if a, ok := s.props[side+"\x00address"]; ok {
			if ap, err := netip.ParseAddrPort(string(a)); err == nil {
				if _, set := s.props[side+"\x00port"]; !set {
					s.props[side+"\x00port"] = PropInt(int64(ap.Port()))
				}
			}
		}
	}
	act, err := v.call("proxy_on_new_connection", uint64(s.id))
	if err != nil {
		return ConnResult{Err: err, Closed: true}
	}
	return ConnResult{Action: Action(act), Upstream: s.fstate[originalDstKey].Value, Closed: s.conn.closeDownstream}
}

func (s *Stream) deadErr() error {
	if s.v.dead != nil {
		return s.v.dead
	}
	return ErrStreamFinished
}

// DownstreamData runs proxy_on_downstream_data with data readable as the
// downstream data buffer during the call.
func (c *Conn) DownstreamData(data []byte, end bool) (Action, error) {
	return c.data("proxy_on_downstream_data", bufDownstreamData, data, end)
}

// UpstreamData runs proxy_on_upstream_data; with end set it then signals the
// upstream close as Envoy does (proxy_on_upstream_connection_close, peer
// Unknown): Envoy sees the upstream close only as the end of its data.
func (c *Conn) UpstreamData(data []byte, end bool) (Action, error) {
	return c.data("proxy_on_upstream_data", bufUpstreamData, data, end)
}

func (c *Conn) data(export string, typ uint64, data []byte, end bool) (Action, error) {
	s := c.s
	v := s.v
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.dead != nil || s.finished {
		return ActionContinue, s.deadErr()
	}
	v.netBuf, v.netData = typ, data
	act, err := v.call(export, uint64(s.id), uint64(len(data)), boolArg(end))
	v.netBuf, v.netData = 0, nil
	if err == nil && end && typ == bufUpstreamData {
		_, err = v.call("proxy_on_upstream_connection_close", uint64(s.id), PeerUnknown)
	}
	return Action(act), err
}

// Close ends the connection as Envoy's downstream connection event does:
// proxy_on_downstream_connection_close with peer (PeerRemote when the client
// closed or reset it, PeerLocal when the proxy did), then proxy_on_done,
// proxy_on_log and proxy_on_delete, once (Context::onCloseTCP). A second
// Close does nothing.
func (c *Conn) Close(peer int) error {
	s := c.s
	return s.end(func(v *vm) error {
		if _, err := v.call("proxy_on_downstream_connection_close", uint64(s.id), uint64(peer)); err != nil {
			return err
		}
		for _, name := range []string{"proxy_on_done", "proxy_on_log", "proxy_on_delete"} {
			if _, err := v.call(name, uint64(s.id)); err != nil {
				return err
			}
		}
		return nil
	})
}

// CloseRequested reports whether the module asked Envoy to close the
// downstream (or upstream) connection with proxy_close_stream.
func (c *Conn) CloseRequested() (downstream, upstream bool) {
	c.s.v.mu.Lock()
	defer c.s.v.mu.Unlock()
	return c.s.conn.closeDownstream, c.s.conn.closeUpstream
}

// FilterState returns the filter state object key as the module set it on
// this connection (set_envoy_filter_state).
func (c *Conn) FilterState(key string) (FilterStateEntry, bool) { return c.s.FilterState(key) }

// FilterState returns the filter state object key as the module set it on
// this stream (set_envoy_filter_state, upstreamVia filterState).
func (s *Stream) FilterState(key string) (FilterStateEntry, bool) {
	s.v.mu.Lock()
	defer s.v.mu.Unlock()
	e, ok := s.fstate[key]
	return e, ok
}
