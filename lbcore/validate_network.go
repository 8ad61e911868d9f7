package lbcore

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tidwall/gjson"
)

// connectionMethods are the methods a network filter can use: they read
// nothing but the connection's addresses.
var connectionMethods = []Method{MethodSourceIPHash, MethodSrcIPSrcPortHash, MethodDestIPHash,
	MethodSrcDestIPHash, MethodLeastConnection, MethodRoundRobin}

// fieldSet records which top-level fields a configuration wrote.
type fieldSet struct{ names []string }

func (s *fieldSet) note(name string) { s.names = append(s.names, name) }
func (s *fieldSet) has(name string) bool {
	return slices.Contains(s.names, name)
}

// httpInput names what a method reads that only an HTTP request has, or "".
var httpInput = map[Method]string{
	MethodURLHash:    "the request URL",
	MethodDomainHash: "the request's host",
	MethodCallIDHash: "the SIP Call-ID header",
	MethodTokenHash:  "a token expression over the request",
}

// steering checks how the choice reaches Envoy, and refuses in a network
// filter everything that needs an HTTP request: such a configuration would
// load and then decide every connection by its backup method, or not at all.
// The fields a network filter refuses whole come from the host table
// (hosts.go); the values it refuses of the fields it serves are checked here.
func (d *decoder) steering(c *Config, set *fieldSet, root gjson.Result) {
	if !c.Network() {
		if c.ViaFilterState() && c.UpstreamCount > 1 {
			d.errorf("upstreamCount: %d with upstreamVia filterState: the filter state holds one address", c.UpstreamCount)
		}
		return
	}
	const why = "which a network filter (filterType network) does not have"
	if in, ok := httpInput[c.LBMethod]; ok {
		var names []string
		for _, m := range connectionMethods {
			names = append(names, m.String())
		}
		d.errorf("lbMethod: %s reads %s, %s; use one of %s", c.LBMethod, in, why, strings.Join(names, ", "))
	}
	if set.has("upstreamVia") && c.UpstreamVia == ViaHeader {
		d.errorf("upstreamVia: %q with filterType network: a network filter has no request headers; it always sets the filter state %s", ViaHeader, OriginalDstFilterState)
	}
	c.UpstreamVia = ViaFilterState
	if c.UpstreamCount > 1 {
		d.errorf("upstreamCount: %d with filterType network: the filter state holds one address", c.UpstreamCount)
	}
	d.errs = append(d.errs, HostNetwork.Refusals(root)...)
	check := func(path string, e *Expr) {
		if v := e.httpVariable(); v != "" {
			d.errorf("%s: %q reads %s, %s; a connection has only client.ip, client.port, server.ip and server.port", path, e.String(), v, why)
		}
	}
	if c.Token != nil {
		check("token", c.Token)
	}
	if p := c.Persistence; p != nil {
		for i, k := range p.Keys {
			check(fmt.Sprintf("persistence.keys[%d]", i), k)
		}
	}
}

// httpVariable returns the first variable of e that only an HTTP request
// has (request.*, sip.callid), as written, or "".
func (e *Expr) httpVariable() string {
	for _, part := range e.parts {
		for _, pl := range part.alts {
			switch pl.v.kind {
			case varClientIP, varClientPort, varServerIP, varServerPort:
			default:
				return varNames[pl.v.kind] + pl.v.name
			}
		}
	}
	return ""
}
