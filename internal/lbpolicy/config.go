package lbpolicy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/tidwall/gjson"
)

// Policy is a validated policy configuration: hashlb's JSON without
// services, as lbcore parsed it.
type Policy struct {
	// Config is the lbcore configuration; its one service is a placeholder
	// that Worker replaces with the cluster's hosts.
	Config *lbcore.Config
	// in is what the decisions read of a request.
	in lbcore.Inputs
	// active: the decisions read active requests (least connection,
	// bounded load); activeBackup: the backup method does (a hash method's
	// least-connection backup).
	active, activeBackup bool
	// store is the persistence store its workers use: processStore, or a
	// test's own, standing for another Envoy process.
	store *sharedStore
	// etcd is the fleet client's credentials (LoadEtcdCredentials; none
	// until it is called).
	etcd etcdCredentials
}

// placeholder is the service the policy's JSON is parsed with: lbcore
// requires services, the policy gets them from the cluster.
const placeholder = `"services":[{"name":"placeholder","address":"127.0.0.1:1"}]`

// ParseConfig validates the policy's configuration: hashlb's JSON
// configuration (docs/config.md) without services. lbcore checks it,
// with the filter's messages; every option the policy cannot serve
// (lbcore.HostPolicy's refusals) and every input it cannot read is refused
// with the reason and what to do instead. All problems are returned, joined.
func ParseConfig(data []byte) (*Policy, error) {
	if !gjson.ValidBytes(data) || !gjson.ParseBytes(data).IsObject() {
		_, err := lbcore.ParseConfig(data) // lbcore's message for what is wrong
		if err == nil {
			err = errors.New("configuration: not a JSON object")
		}
		return nil, err
	}
	// What the policy refuses whole comes from lbcore's host table, as the
	// network filter's refusals do: a field cannot be added without saying
	// what the policy does with it.
	root := gjson.ParseBytes(data)
	errs := lbcore.HostPolicy.Refusals(root)
	if f := root.Get("persistence.fleet"); f.IsObject() && !f.Get("endpoints").Exists() {
		// Before lbcore, which asks for the filters' cluster instead.
		errs = append(errs, errNoEndpoints)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	text := strings.TrimSpace(string(data))
	body := strings.TrimSpace(text[1:])
	var whole string
	if body == "}" {
		whole = "{" + placeholder + "}"
	} else {
		whole = "{" + placeholder + "," + body
	}
	c, err := lbcore.ParseConfig([]byte(whole))
	if err != nil {
		return nil, err
	}
	errs = append(errs, connectionProblems(c)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	p := &Policy{Config: c, in: c.Inputs(), store: processStore}
	p.active = c.LBMethod == lbcore.MethodLeastConnection || c.HashBalanceFactor > 0
	p.activeBackup = c.LBMethod.IsHash() && c.BackupLBMethod == lbcore.MethodLeastConnection
	return p, nil
}

// errNoEndpoints refuses a fleet without endpoints.
var errNoEndpoints = errors.New("persistence.fleet.endpoints: is required: the policy's own etcd client dials etcd's client endpoints (host:port), listed there")

// PathKeyMax is the longest :path key a cache of choices keeps
// (internal/lbpolicy/abi's cache.h HL_CACHE_KEY; cmd/hashlb-lbpolicy checks
// at compile time that the two agree).
const PathKeyMax = 96

// PathKey says whether a choice of p can be remembered by the request's
// :path: ok when every decision reads the :path and nothing else and keeps
// no state (a hash method, or a token over the path; no persistence, bounded
// load or session). Then a request whose :path has the same first n bytes
// gets the same choice while the hosts stay as they were, when prefix (URLHASH
// hashes the first hashLength bytes); without prefix, only a :path of at most
// n bytes can be remembered, whole.
func (p *Policy) PathKey() (n int, prefix, ok bool) {
	c := p.Config
	in := p.in
	if !c.LBMethod.IsHash() || c.Persistence != nil || c.HashBalanceFactor != 0 || c.Session != nil ||
		!in.Target || in.Authority || in.Method || in.Source || in.Dest || len(in.Headers) > 0 {
		return 0, false, false
	}
	if c.LBMethod == lbcore.MethodURLHash && c.HashLength <= PathKeyMax {
		return c.HashLength, true, true
	}
	return PathKeyMax, false, true
}

// connectionProblems refuses what reads the connection's addresses: Envoy's
// load-balancing context carries the request headers (and a route's hash
// key), not the downstream connection. The client IP is served from
// x-forwarded-for (trustedForwardedHops ≥ 1; with use_remote_address: true
// Envoy itself appends the peer's address there).
func connectionProblems(c *lbcore.Config) []error {
	var errs []error
	m := *c
	m.Persistence = nil
	in := m.Inputs()
	switch {
	case c.LBMethod == lbcore.MethodDestIPHash || c.LBMethod == lbcore.MethodSrcDestIPHash:
		errs = append(errs, fmt.Errorf("lbMethod: %s hashes the address the connection was accepted on, which Envoy does not give a load-balancing policy; use the filter (envoy.yaml) for it", c.LBMethod))
	case c.LBMethod == lbcore.MethodSrcIPSrcPortHash:
		// It hashes the connection's peer and port, never x-forwarded-for
		// (which has no port): trustedForwardedHops cannot help.
		errs = append(errs, fmt.Errorf("lbMethod: SRCIPSRCPORTHASH hashes the connection's client address and port, which Envoy does not give a load-balancing policy (x-forwarded-for has no port); use SOURCEIPHASH with trustedForwardedHops, or the filter (envoy.yaml)"))
	case in.Dest:
		errs = append(errs, fmt.Errorf("token: reads ${server.ip} or ${server.port}, which Envoy does not give a load-balancing policy"))
	}
	if in.Source && c.LBMethod != lbcore.MethodSrcIPSrcPortHash {
		what := "token: reads ${client.ip} or ${client.port}"
		if c.LBMethod == lbcore.MethodSourceIPHash {
			what = "lbMethod: " + c.LBMethod.String() + " hashes the client address"
		}
		errs = append(errs, fmt.Errorf("%s, and Envoy gives a load-balancing policy the request headers, not the connection: set trustedForwardedHops to 1 or more (with use_remote_address: true Envoy appends the client's address to x-forwarded-for)", what))
	}
	if p := c.Persistence; p != nil {
		k := *c
		k.LBMethod, k.Token = lbcore.MethodRoundRobin, nil
		kin := k.Inputs()
		if kin.Source {
			errs = append(errs, fmt.Errorf("persistence.keys: read ${client.ip} or ${client.port}, and Envoy gives a load-balancing policy the request headers, not the connection: set trustedForwardedHops to 1 or more"))
		}
		if kin.Dest {
			errs = append(errs, fmt.Errorf("persistence.keys: read ${server.ip} or ${server.port}, which Envoy does not give a load-balancing policy"))
		}
	}
	return errs
}
