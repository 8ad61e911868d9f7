package lbcore

import (
	"errors"
	"net/netip"
	"time"
)

// Config is a validated plugin configuration. Build one with ParseConfig;
// a Config is never modified after parsing.
//
// Its fields are exported whole, the parsed configuration that the filter,
// nsconf and hashlb explain read, whether or not a package outside reads
// each one yet.
type Config struct {
	// FilterType is how Envoy runs the module (default http; http, one
	// decision per request, or network, one per TCP connection).
	FilterType string
	// LBMethod chooses the service (default ROUNDROBIN).
	LBMethod Method
	// HashLength is how many URL or domain bytes are hashed (default 80, 1–4096).
	HashLength int
	// Netmask is the IPv4 mask, as a prefix length, applied to hashed addresses
	// (default 255.255.255.255, i.e. 32).
	Netmask int
	// V6NetmaskLen is the IPv6 prefix length kept (default 128, 1–128).
	V6NetmaskLen int
	// Token is the key expression of the TOKEN method; nil for other methods.
	Token *Expr
	// BackupLBMethod is used when the hash method has no input
	// (default LEASTCONNECTION; LEASTCONNECTION or ROUNDROBIN).
	BackupLBMethod Method
	// Services are the upstream services, in configuration order (1–10000).
	Services []Service
	// Persistence is the TR7 hash persistence table; nil when off.
	Persistence *Persistence
	// HealthCheck configures active probes; nil when off.
	HealthCheck *HealthCheck
	// PassiveHealth configures ejection on failures; nil when off.
	PassiveHealth *PassiveHealth
	// Session configures session persistence (an inserted cookie or header
	// naming the service); nil when off.
	Session *Session
	// UpstreamVia is how the choice reaches Envoy (default header; header or
	// filterState, which filterType network always uses).
	UpstreamVia string
	// UpstreamHeader is the request header set to the chosen addresses
	// (default x-envoy-original-dst-host), lower-case.
	UpstreamHeader string
	// UpstreamCount is how many ranked addresses UpstreamHeader carries (default 1, 1–8).
	UpstreamCount int
	// ServiceHeader is the request header set to the chosen service's name
	// (default x-hashlb-service; "" disables), lower-case.
	ServiceHeader string
	// TrustedForwardedHops takes the client IP from x-forwarded-for, that many
	// hops from the right, when > 0 (default 0, 0–32).
	TrustedForwardedHops int
	// HashBalanceFactor bounds a hash method's load at factor/100 of the mean
	// (default 0 = off, or 101–1000).
	HashBalanceFactor int
	// SlowStart ramps the weight of a service that joins the pool; nil when off.
	SlowStart *SlowStart
	// DebugHeader adds the response header x-hashlb-decision (default false).
	DebugHeader bool

	// byID is the index of Services by identity when WithServices made
	// it (for byIDOf, the slice it indexes): a host whose workers share one
	// Config shares it too, read-only (NewBalancer, byIDFor).
	byID   map[uint64]int
	byIDOf []Service
}

// byIDFor is the index of c.Services by identity WithServices made, or
// nil when c's services are not the ones it indexed.
func (c *Config) byIDFor() map[uint64]int {
	if c.byID == nil || len(c.byIDOf) != len(c.Services) || len(c.Services) == 0 || &c.byIDOf[0] != &c.Services[0] {
		return nil
	}
	return c.byID
}

// Service is one upstream service.
//
// Exported whole as part of Config, the parsed configuration that the filter,
// nsconf and hashlb explain read: a field no package outside reads yet
// is exported with its siblings.
type Service struct {
	// Name identifies the service in headers, metrics and logs (unique).
	Name string
	// Address is "ip:port" or "[v6]:port", as Envoy's cluster knows it.
	Address string
	// Addr is Address parsed.
	Addr netip.AddrPort
	// Weight is the service's share of keys (default 1, 0–100); 0 takes no
	// new keys or picks but keeps its sessions and persistence entries.
	Weight int
	// Enabled is false for a service taken out of rotation (default true).
	Enabled bool
	// HashID, when set, replaces Address in the service hash, so a service
	// that changes address keeps its keys (Citrix -hashId).
	HashID string
	// ID is xxhash64(HashID or Address): the service's rendezvous hash and its
	// identity in the persistence table.
	ID uint64
}

// Persistence configures the TR7 hash persistence table.
//
// Exported whole as part of Config, the parsed configuration that the filter,
// nsconf and hashlb explain read: a field no package outside reads yet
// is exported with its siblings.
type Persistence struct {
	// Keys are the key expressions, joined with \x1f (1–8, no duplicates).
	Keys []*Expr
	// TableSize is the maximum number of entries (default 3000000, 10000–100000000).
	TableSize int
	// Expire is how long an idle entry lives (default 7d, 10m–365d).
	Expire time.Duration
	// EmptyKey is "skip" (default: key-less requests are balanced, not
	// persisted) or "shared" (TR7: they all share one entry).
	EmptyKey string
	// Fleet makes etcd the fleet-wide level behind the local table; nil
	// when the table is per proxy (docs/persistence.md#fleet-wide-persistence-through-etcd).
	Fleet *Fleet
}

// Fleet configures fleet-wide persistence: one etcd (reached through an
// Envoy cluster and etcd's JSON gateway) decides the first service of a
// key for every proxy of the fleet.
//
// Exported whole as part of Config, the parsed configuration that the filter,
// nsconf and hashlb explain read: a field no package outside reads yet
// is exported with its siblings.
type Fleet struct {
	// Cluster is the Envoy cluster that reaches etcd's client port (the
	// filters require it).
	Cluster string
	// Endpoints are etcd's client endpoints (host:port) that the
	// load-balancing policy's own etcd client dials (the policy requires
	// them).
	Endpoints []string
	// Authority is the :authority of the calls; "" means Cluster (CallAuthority).
	Authority string
	// Prefix starts every etcd key of this table; "" stands for
	// "/hashlb/<plugin root id>/" (fleet.Prefix).
	Prefix string
	// Timeout bounds how long a request waits for etcd (default 200ms,
	// 10ms–5s); past it the request is decided locally.
	Timeout time.Duration
	// CreatesPerSecond is the most keys one worker asks etcd to create per
	// second (default 100, 1–100000); keys over it are decided locally.
	CreatesPerSecond int
}

// FilterProblem is why a filter cannot use the fleet, or nil: the filters
// call etcd through the Envoy cluster Cluster names, which lbcore does not
// require because the load-balancing policy dials Endpoints instead. The
// filter refuses the configuration with it; hashlb check reports it.
func (f *Fleet) FilterProblem() error {
	if f.Cluster == "" {
		return errors.New("persistence.fleet.cluster: is required: the filter calls etcd through an Envoy cluster (persistence.fleet.endpoints is the load-balancing policy's)")
	}
	return nil
}

// CallAuthority is the :authority of the calls to etcd.
func (f *Fleet) CallAuthority() string {
	if f.Authority != "" {
		return f.Authority
	}
	return f.Cluster
}

// SlowStart configures slow start: a joining service's effective weight
// grows from a floor to its weight (slowstart.go).
//
// Exported whole as the type of Config.SlowStart: a field no package
// outside reads yet is exported with its siblings.
type SlowStart struct {
	// Window is how long a ramp lasts (required, 1s–7d).
	Window time.Duration
	// MinWeightPercent is the floor, in percent of the weight (default 10, 1–100).
	MinWeightPercent int
	// Step, when not 0, makes the weight rise in steps of that length
	// (1s–1h, at most Window).
	Step time.Duration
}

// HealthCheck configures active HTTP probes.
//
// Exported whole as part of Config, the parsed configuration that the filter,
// nsconf and hashlb explain read: a field no package outside reads yet
// is exported with its siblings.
type HealthCheck struct {
	// Path is the probe's request path (default /healthz).
	Path string
	// Method is the probe's request method, GET or HEAD (default GET).
	Method string
	// Port, when not 0, is the port probed instead of the service's (1 to 65535).
	Port int
	// Host is the probe's :authority; "" stands for the service's address.
	Host string
	// ExpectBody, when not "", is text the first MaxHealthBodyBytes of the
	// response body must contain.
	ExpectBody string
	// Interval is the time between probe rounds (default 5s, 1s–1h).
	Interval time.Duration
	// Timeout bounds one probe (default 2s, 100ms–1m, at most Interval).
	Timeout time.Duration
	// HealthyThreshold is how many successes mark a DOWN service UP (default 2, 1–10).
	HealthyThreshold int
	// UnhealthyThreshold is how many failures mark an UP service DOWN (default 3, 1–10).
	UnhealthyThreshold int
	// ExpectedStatuses are the status codes that count as success (default "200-399").
	ExpectedStatuses StatusSet
	// Cluster is the Envoy cluster probes are dispatched on (default hashlb_upstream).
	Cluster string
}

// PassiveHealth configures ejection after consecutive failures.
//
// Exported whole as the type of Config.PassiveHealth: a field no package
// outside reads yet is exported with its siblings.
type PassiveHealth struct {
	// ConsecutiveFailures ejects a service after that many failures in a row (default 5, 1–1000).
	ConsecutiveFailures int
	// EjectionTime is how long an ejected service stays out (default 30s, 1s–1h).
	EjectionTime time.Duration
	// FailureStatuses are the response codes that count as failures (default "502-504").
	FailureStatuses StatusSet
}

// StatusSet is a set of HTTP status codes written as "200-399,404".
// Exported as the type of HealthCheck.ExpectedStatuses and
// PassiveHealth.FailureStatuses.
type StatusSet struct {
	ranges [][2]uint16
	src    string
}

// contains reports whether code is in the set.
func (s StatusSet) contains(code int) bool {
	for _, r := range s.ranges {
		if code >= int(r[0]) && code <= int(r[1]) {
			return true
		}
	}
	return false
}

// String returns the set as configured (a fmt.Stringer).
func (s StatusSet) String() string { return s.src }

// The values of filterType and upstreamVia.
// Each is exported with the others, whether or not a package outside names
// it.
const (
	// FilterHTTP: the module is an HTTP filter (envoy.filters.http.wasm) and
	// decides once per request.
	FilterHTTP = "http"
	// FilterNetwork: the module is a network filter
	// (envoy.filters.network.wasm) before tcp_proxy and decides once per TCP
	// connection, from the connection's addresses only.
	FilterNetwork = "network"
	// ViaHeader: the choice goes to Envoy in upstreamHeader.
	ViaHeader = "header"
	// ViaFilterState: the choice goes to Envoy as the filter state object
	// OriginalDstFilterState, which an ORIGINAL_DST cluster reads first.
	ViaFilterState = "filterState"
)

// OriginalDstFilterState is the Envoy filter state key an ORIGINAL_DST
// cluster takes the upstream address from ("ip:port"), before any header
// (Envoy: source/extensions/clusters/original_dst/original_dst_cluster.h,
// OriginalDstClusterFilterStateKey; docs/envoy-host.md#steering-a-connection).
const OriginalDstFilterState = "envoy.network.transport_socket.original_dst_address"

// Network reports whether the configuration is for a network (TCP) filter.
func (c *Config) Network() bool { return c.FilterType == FilterNetwork }

// ViaFilterState reports whether the choice is handed to Envoy as filter
// state rather than a header: always for a network filter.
func (c *Config) ViaFilterState() bool { return c.UpstreamVia == ViaFilterState }
