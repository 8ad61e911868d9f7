package lbcore

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
)

// Host is a kind of Envoy host that runs hashlb's decisions.
type Host uint8

// The hosts, in the order docs/config.md's table lists them.
const (
	// HostHTTP is the HTTP filter (envoy.filters.http.wasm, filterType http).
	HostHTTP Host = iota
	// HostNetwork is the network filter (envoy.filters.network.wasm, filterType network).
	HostNetwork
	// HostPolicy is the load-balancing policy (libhashlb_lbpolicy.so, a dynamic module).
	HostPolicy
	numHosts
)

// Hosts returns every host kind, in the order of docs/config.md's table.
func Hosts() []Host { return []Host{HostHTTP, HostNetwork, HostPolicy} }

// String names the host as messages do.
func (h Host) String() string {
	switch h {
	case HostHTTP:
		return "HTTP filter"
	case HostNetwork:
		return "network filter (filterType network)"
	case HostPolicy:
		return "load-balancing policy"
	}
	return fmt.Sprintf("Host(%d)", uint8(h))
}

// Support is what a host does with a configuration field.
type Support uint8

// The kinds of support. The zero value is no entry, which TestHostTable
// refuses: every field says what every host does with it.
const (
	supportUnset Support = iota
	// Serve: the host does what the field says.
	Serve
	// Limit: the host serves the field, but not every value: Why says which
	// it refuses; the check that refuses them reads the value (the network
	// filter's in validate_network.go, the policy's in internal/lbpolicy).
	Limit
	// Refuse: a configuration that has the field does not load in the host;
	// the message is "path: not served by the HOST: Why; Instead".
	Refuse
	// Ignore: the host accepts the field and, by design, nothing it does
	// depends on it; Why says why.
	Ignore
	// AsParent: the field is part of an object the host refuses (Why and
	// Instead are the object's); only the object is named in a refusal.
	AsParent
)

// String names the support as docs/config.md's table does.
func (s Support) String() string {
	switch s {
	case Serve:
		return "serves"
	case Limit:
		return "serves, limited"
	case Refuse:
		return "refuses"
	case Ignore:
		return "ignores"
	case AsParent:
		return "refuses, with its object"
	}
	return "no entry"
}

// HostRule is what one host does with one field.
type HostRule struct {
	Support Support
	// Why is the reason (Refuse, Ignore) or the values refused (Limit).
	Why string
	// Instead is what to do instead (Refuse).
	Instead string
}

func serve() HostRule            { return HostRule{Support: Serve} }
func limit(why string) HostRule  { return HostRule{Support: Limit, Why: why} }
func ignore(why string) HostRule { return HostRule{Support: Ignore, Why: why} }
func refuse(why, instead string) HostRule {
	return HostRule{Support: Refuse, Why: why, Instead: instead}
}
func asParent() HostRule                        { return HostRule{Support: AsParent} }
func all(r HostRule) [numHosts]HostRule         { return [numHosts]HostRule{r, r, r} }
func hosts(h, n, p HostRule) [numHosts]HostRule { return [numHosts]HostRule{h, n, p} }

// Reasons written once, for the fields that share them.
const (
	netNoHeaders   = "a connection has no request headers"
	netLeaveOut    = "leave it out with filterType network"
	polReturnsHost = "the policy returns the host itself: no header or filter state carries the choice"
	polRemove      = "remove it"
	polConnVars    = "no client.* or server.* variable: Envoy gives a load-balancing policy the request headers, not the connection (client.ip from x-forwarded-for with trustedForwardedHops)"
	netConnVars    = "only the connection's variables: client.ip, client.port, server.ip, server.port"
)

// hostTable says, for every configuration field, what each host does with
// it: the one place a host's refusals come from (Host.Refusals), and
// docs/config.md's "What each host serves" table.
var hostTable = [numFields][numHosts]HostRule{
	fFilterType: hosts(serve(), serve(),
		refuse("the policy is not a filter: Envoy asks it for a host for HTTP and TCP alike", polRemove)),
	fLBMethod: hosts(serve(),
		limit("only the methods that read the connection alone: SOURCEIPHASH, SRCIPSRCPORTHASH, DESTINATIONIPHASH, SRCIPDESTIPHASH, LEASTCONNECTION, ROUNDROBIN"),
		limit("not DESTINATIONIPHASH, SRCIPDESTIPHASH or SRCIPSRCPORTHASH (Envoy gives a policy no connection addresses); SOURCEIPHASH only with trustedForwardedHops 1 or more")),
	fHashLength: hosts(serve(),
		ignore("only URLHASH and DOMAINHASH read it, and a network filter serves neither"), serve()),
	fNetmask:        all(serve()),
	fV6NetmaskLen:   all(serve()),
	fToken:          hosts(serve(), limit(netConnVars), limit(polConnVars)),
	fBackupLBMethod: all(serve()),
	fServices: hosts(serve(), serve(),
		refuse("the policy balances over the cluster's hosts (its endpoints, from EDS or load_assignment)",
			"remove it; a host's endpoint metadata hashlb.name and hashlb.hashId and its load_balancing_weight name and weigh it")),
	fServiceName:          hosts(serve(), serve(), asParent()),
	fServiceAddress:       hosts(serve(), serve(), asParent()),
	fServiceWeight:        hosts(serve(), serve(), asParent()),
	fServiceEnabled:       hosts(serve(), serve(), asParent()),
	fServiceHashID:        hosts(serve(), serve(), asParent()),
	fPersistence:          all(serve()),
	fPersistenceKeys:      hosts(serve(), limit(netConnVars), limit(polConnVars)),
	fPersistenceTableSize: all(serve()),
	fPersistenceExpire:    all(serve()),
	fPersistenceEmptyKey:  all(serve()),
	fFleet: hosts(serve(),
		refuse("the fleet level holds a request while it asks etcd, and a connection cannot be held so",
			"leave persistence.fleet out: the proxy's own table keeps persistence"),
		serve()),
	fFleetCluster: hosts(serve(), asParent(),
		refuse("the policy's own etcd client dials etcd, not through an Envoy cluster",
			"list etcd's client endpoints in persistence.fleet.endpoints")),
	fFleetEndpoints: hosts(ignore("the filter calls etcd through the Envoy cluster named by persistence.fleet.cluster, which it requires"),
		asParent(), serve()),
	fFleetAuthority: hosts(serve(), asParent(),
		refuse("the policy's etcd client speaks gRPC to the endpoints as listed, over plain TCP (TLS is not served yet)",
			"remove it, and reach etcd's plain client port")),
	fFleetPrefix:           hosts(serve(), asParent(), serve()),
	fFleetTimeout:          hosts(serve(), asParent(), serve()),
	fFleetCreatesPerSecond: hosts(serve(), asParent(), serve()),
	fHealthCheck: hosts(serve(), serve(),
		refuse("the policy follows Envoy's own health of the hosts", "configure the cluster's health_checks instead")),
	fHealthPath:         hosts(serve(), serve(), asParent()),
	fHealthMethod:       hosts(serve(), serve(), asParent()),
	fHealthPort:         hosts(serve(), serve(), asParent()),
	fHealthHost:         hosts(serve(), serve(), asParent()),
	fHealthExpectBody:   hosts(serve(), serve(), asParent()),
	fHealthInterval:     hosts(serve(), serve(), asParent()),
	fHealthTimeout:      hosts(serve(), serve(), asParent()),
	fHealthyThreshold:   hosts(serve(), serve(), asParent()),
	fUnhealthyThreshold: hosts(serve(), serve(), asParent()),
	fExpectedStatuses:   hosts(serve(), serve(), asParent()),
	fHealthCluster:      hosts(serve(), serve(), asParent()),
	fPassiveHealth: hosts(serve(),
		refuse("it counts HTTP response statuses, which a connection does not have", "leave it out (active healthCheck probes still work)"),
		refuse("the policy follows Envoy's own health of the hosts", "configure the cluster's outlier_detection instead")),
	fConsecutiveFailures: hosts(serve(), asParent(), asParent()),
	fEjectionTime:        hosts(serve(), asParent(), asParent()),
	fFailureStatuses:     hosts(serve(), asParent(), asParent()),
	fSession: hosts(serve(),
		refuse("it needs HTTP request and response headers, which a connection does not have", netLeaveOut),
		refuse("a load-balancing policy can set no cookie or response header",
			"use Envoy's envoy.filters.http.stateful_session filter in front of the policy for cookie sessions (docs/deploy.md)")),
	fSessionType:            hosts(serve(), asParent(), asParent()),
	fSessionName:            hosts(serve(), asParent(), asParent()),
	fSessionPath:            hosts(serve(), asParent(), asParent()),
	fSessionDomain:          hosts(serve(), asParent(), asParent()),
	fSessionSecure:          hosts(serve(), asParent(), asParent()),
	fSessionHTTPOnly:        hosts(serve(), asParent(), asParent()),
	fSessionSameSite:        hosts(serve(), asParent(), asParent()),
	fSessionLifetime:        hosts(serve(), asParent(), asParent()),
	fSessionAbsoluteTimeout: hosts(serve(), asParent(), asParent()),
	fSessionIdleTimeout:     hosts(serve(), asParent(), asParent()),
	fSessionClockSkew:       hosts(serve(), asParent(), asParent()),
	fUpstreamVia: hosts(serve(),
		limit("filterState only (the default there); header is refused: "+netNoHeaders),
		refuse(polReturnsHost, polRemove)),
	fUpstreamHeader: hosts(serve(),
		refuse("it names a request header, and "+netNoHeaders, netLeaveOut),
		refuse(polReturnsHost, polRemove)),
	fUpstreamCount: hosts(serve(),
		limit("1 only: the filter state holds one address"),
		refuse("the policy returns one host, and Envoy's retries walk the ranking (retry_host_predicate previous_hosts)", polRemove)),
	fServiceHeader: hosts(serve(),
		refuse("it names a request header, and "+netNoHeaders, netLeaveOut),
		refuse("a load-balancing policy cannot add request headers", polRemove)),
	fTrustedForwardedHops: hosts(serve(),
		refuse("it reads the x-forwarded-for header, and "+netNoHeaders, netLeaveOut),
		serve()),
	fHashBalanceFactor:         all(serve()),
	fSlowStart:                 all(serve()),
	fSlowStartWindow:           all(serve()),
	fSlowStartMinWeightPercent: all(serve()),
	fSlowStartStep:             all(serve()),
	fDebugHeader: hosts(serve(),
		refuse("it adds a response header, and a connection has no response headers", netLeaveOut),
		refuse("a load-balancing policy cannot add response headers", polRemove)),
}

// HostRuleOf returns what host h does with the field at path (a path of
// Fields, such as "persistence.fleet" or "services[].weight"); false for a
// path that is no field.
func HostRuleOf(h Host, path string) (HostRule, bool) {
	for i := range fieldTable {
		if fieldTable[i].Path == path && h < numHosts {
			return hostTable[i][h], true
		}
	}
	return HostRule{}, false
}

// Refusals returns the problems of the configuration root for host h: each
// field h refuses that root has, as "path: not served by the HOST: why;
// instead", in field order. A refused object's own fields are not named
// again.
func (h Host) Refusals(root gjson.Result) []error {
	if h >= numHosts {
		return nil
	}
	var errs []error
	for i := range fieldTable {
		r := hostTable[i][h]
		path := fieldTable[i].Path
		if r.Support != Refuse || !present(root, path) {
			continue
		}
		errs = append(errs, fmt.Errorf("%s: not served by the %s: %s; %s", path, h, r.Why, r.Instead))
	}
	return errs
}

// present reports whether root has the field at path; an array's item
// fields ("services[].weight") in any item.
func present(root gjson.Result, path string) bool {
	if !root.IsObject() {
		return false
	}
	if !strings.Contains(path, "[]") {
		return root.Get(gjsonEscape(path)).Exists()
	}
	r := root.Get(gjsonEscape(strings.ReplaceAll(path, "[]", ".#")))
	return r.IsArray() && len(r.Array()) > 0
}

// gjsonEscape escapes gjson's wildcard characters, which no field name
// has; kept so that a path is always read literally.
func gjsonEscape(path string) string {
	return strings.NewReplacer("*", `\*`, "?", `\?`).Replace(path)
}
