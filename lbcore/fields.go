package lbcore

import (
	"slices"
	"time"
)

// FieldSpec describes one configuration field: its JSON path, type, default,
// range and meaning. The decoder takes every default and bound from the
// field table (fieldTable); Fields publishes it, configs/schema.json is
// generated from it, and TestEveryField checks the decoder, the schema and
// docs/config.md's configuration reference against it, field by field.
//
// Its fields are exported as one record, whether or not a package outside
// reads each one.
type FieldSpec struct {
	// Path is the JSON path: "hashLength", "services[].weight", "persistence.tableSize".
	Path string
	// Type is the JSON Schema type: "string", "integer", "boolean", "array" or "object".
	Type string
	// Format refines strings: "duration", "expression", "netmask", "statuses",
	// "address", "header", "method", "name" (an HTTP token), "path", or "".
	Format string
	// Default is the value used when the field is absent: an int, bool or
	// string (a duration as written, "7d"); nil when none.
	Default any
	// Min and Max bound integers and array lengths (int) and durations
	// ("10m"); nil when none.
	Min, Max any
	// Off is a value outside [Min, Max] that is also accepted and turns the
	// feature off: 0 for hashBalanceFactor, "" for serviceHeader; nil when none.
	Off any
	// Enum lists the allowed strings (case-insensitive for methods).
	Enum []string
	// Required is true for a field that must be present (within its object).
	Required bool
	// NonEmpty is true for a string that must not be "".
	NonEmpty bool
	// Unique is true for an array whose items must all differ.
	Unique bool
	// Doc says what the field does: configs/schema.json's description.
	Doc string
}

// fieldID names a field of fieldTable; the decoder reads its entry.
type fieldID uint8

// The configuration fields, in the order docs/config.md lists them.
const (
	fFilterType fieldID = iota
	fLBMethod
	fHashLength
	fNetmask
	fV6NetmaskLen
	fToken
	fBackupLBMethod
	fServices
	fServiceName
	fServiceAddress
	fServiceWeight
	fServiceEnabled
	fServiceHashID
	fPersistence
	fPersistenceKeys
	fPersistenceTableSize
	fPersistenceExpire
	fPersistenceEmptyKey
	fFleet
	fFleetCluster
	fFleetEndpoints
	fFleetAuthority
	fFleetPrefix
	fFleetTimeout
	fFleetCreatesPerSecond
	fHealthCheck
	fHealthPath
	fHealthMethod
	fHealthPort
	fHealthHost
	fHealthExpectBody
	fHealthInterval
	fHealthTimeout
	fHealthyThreshold
	fUnhealthyThreshold
	fExpectedStatuses
	fHealthCluster
	fPassiveHealth
	fConsecutiveFailures
	fEjectionTime
	fFailureStatuses
	fSession
	fSessionType
	fSessionName
	fSessionPath
	fSessionDomain
	fSessionSecure
	fSessionHTTPOnly
	fSessionSameSite
	fSessionLifetime
	fSessionAbsoluteTimeout
	fSessionIdleTimeout
	fSessionClockSkew
	fUpstreamVia
	fUpstreamHeader
	fUpstreamCount
	fServiceHeader
	fTrustedForwardedHops
	fHashBalanceFactor
	fSlowStart
	fSlowStartWindow
	fSlowStartMinWeightPercent
	fSlowStartStep
	fDebugHeader
	numFields
)

// maxUpstreamCount bounds upstreamCount; Decision holds that many services,
// so it is the one bound a type needs as a constant.
const maxUpstreamCount = 8

// fieldTable is every configuration field: the one place its default, range
// and meaning are written.
var fieldTable = [numFields]FieldSpec{
	fFilterType: {Path: "filterType", Type: "string", Default: FilterHTTP, Enum: []string{FilterHTTP, FilterNetwork},
		Doc: "How Envoy runs the module: http, an HTTP filter balancing each request (envoy.filters.http.wasm, Istio WasmPlugin type HTTP); network, a network filter balancing each TCP connection for tcp_proxy (envoy.filters.network.wasm, type NETWORK), with the methods and keys that need no HTTP."},
	fLBMethod: {Path: "lbMethod", Type: "string", Format: "method", Default: "ROUNDROBIN", Enum: Methods(),
		Doc: "How the service is chosen. The eight Citrix ADC hashing methods (URLHASH … TOKEN) rank services by rendezvous hashing of the request's key; LEASTCONNECTION picks the fewest active requests per weight; ROUNDROBIN is smooth weighted round robin. hashlb accepts any letter case."},
	fHashLength: {Path: "hashLength", Type: "integer", Default: 80, Min: 1, Max: 4096,
		Doc: "URLHASH and DOMAINHASH: how many bytes of the URL (path and query as received) or the host name are hashed."},
	fNetmask: {Path: "netmask", Type: "string", Format: "netmask", Default: "255.255.255.255",
		Doc: "IPv4 mask applied to the addresses the IP methods hash, e.g. 255.255.255.0 to keep a /24 on one service. Must be contiguous."},
	fV6NetmaskLen: {Path: "v6NetmaskLen", Type: "integer", Default: 128, Min: 1, Max: 128,
		Doc: "IPv6 prefix length kept by the IP methods, e.g. 64."},
	fToken: {Path: "token", Type: "string", Format: "expression",
		Doc: "Required for lbMethod TOKEN, not allowed otherwise: a key expression whose value is hashed, e.g. ${request.header.x-tenant||request.cookie.tenant}. An empty value uses backupLBMethod."},
	fBackupLBMethod: {Path: "backupLBMethod", Type: "string", Format: "method", Default: "LEASTCONNECTION", Enum: backupMethods(),
		Doc: "Used when a hashing method has no input (no Host, no Call-ID, empty token)."},
	fServices: {Path: "services", Type: "array", Min: 1, Max: 10000, Required: true,
		Doc: "The upstream services. With Envoy's override_host policy they must be exactly the cluster's endpoints."},
	fServiceName: {Path: "services[].name", Type: "string", Format: "name", Required: true,
		Doc: "Unique name, used in the x-hashlb-service header, metrics (hashlb.service.<name>.requests) and logs. An HTTP token: letters, digits and !#$%&'*+-.^_`|~."},
	fServiceAddress: {Path: "services[].address", Type: "string", Format: "address", Required: true,
		Doc: "ip:port or [v6]:port, written canonically (as Envoy reports the endpoint). Unique."},
	fServiceWeight: {Path: "services[].weight", Type: "integer", Default: 1, Min: 0, Max: 100,
		Doc: "Share of keys (and of round-robin/least-connection traffic) relative to the other services. 0 drains the service: it takes no new keys or picks, and keeps the sessions and persistence entries it has (Gateway API weight 0)."},
	fServiceEnabled: {Path: "services[].enabled", Type: "boolean", Default: true,
		Doc: "false takes the service out of rotation; its keys move to their next-ranked services."},
	fServiceHashID: {Path: "services[].hashId", Type: "string", NonEmpty: true,
		Doc: "Hashed instead of the address (Citrix -hashId, HAProxy hash-key id), so a service that changes address keeps its keys. Unique, not empty."},
	fPersistence: {Path: "persistence", Type: "object",
		Doc: "TR7 hash persistence: a table in the proxy's shared data maps a key to the service chosen for it, so the key stays on that service while it is selectable."},
	fPersistenceKeys: {Path: "persistence.keys", Type: "array", Format: "expression", Min: 1, Max: 8, Required: true, Unique: true,
		Doc: `Key expressions, joined into one key, e.g. ["${client.ip}", "${request.header.x-client-id}"].`},
	fPersistenceTableSize: {Path: "persistence.tableSize", Type: "integer", Default: 3000000, Min: 10000, Max: 100000000,
		Doc: "Maximum number of entries; the least recently used are evicted when full."},
	fPersistenceExpire: {Path: "persistence.expire", Type: "string", Format: "duration", Default: "7d", Min: "10m", Max: "365d",
		Doc: "How long an unused entry lives: a whole number and a unit (ms, s, m, h, d), 10m to 365d."},
	fPersistenceEmptyKey: {Path: "persistence.emptyKey", Type: "string", Default: "skip", Enum: []string{"skip", "shared"},
		Doc: "skip: a request whose key is empty is balanced but not persisted; shared: all empty keys share one entry (TR7)."},
	fFleet: {Path: "persistence.fleet", Type: "object",
		Doc: "Fleet-wide persistence: etcd, reached through an Envoy cluster, decides a new key's service once for every proxy (first writer wins); the local table stays the first level. Without it the table is per proxy, as in TR7."},
	fFleetCluster: {Path: "persistence.fleet.cluster", Type: "string", NonEmpty: true,
		Doc: "Envoy cluster that reaches etcd's client port (HTTP/1.1; TLS through the cluster's transport socket); the filters require it."},
	fFleetEndpoints: {Path: "persistence.fleet.endpoints", Type: "array", Format: "endpoint", Min: 1, Max: 16, Unique: true,
		Doc: "etcd's client endpoints (host:port) that the load-balancing policy's own etcd client dials; the policy requires it, the filters call etcd through cluster instead."},
	fFleetAuthority: {Path: "persistence.fleet.authority", Type: "string", NonEmpty: true,
		Doc: "The :authority of the calls to etcd; default: the cluster name."},
	fFleetPrefix: {Path: "persistence.fleet.prefix", Type: "string", NonEmpty: true,
		Doc: "Start of every etcd key of this table; default /hashlb/<plugin root id>/."},
	fFleetTimeout: {Path: "persistence.fleet.timeout", Type: "string", Format: "duration", Default: "200ms", Min: "10ms", Max: "5s",
		Doc: "How long a request waits for etcd, 10ms to 5s; past it the request is decided by the local table, as without fleet."},
	fFleetCreatesPerSecond: {Path: "persistence.fleet.createsPerSecond", Type: "integer", Default: 100, Min: 1, Max: 100000,
		Doc: "Most new keys one worker asks etcd to create per second (a burst of one second's worth); keys over it are decided and persisted locally and counted, so a client cannot fill etcd."},
	fHealthCheck: {Path: "healthCheck", Type: "object",
		Doc: "Active HTTP probes, sent by one worker at a time through Envoy (dispatch_http_call on cluster)."},
	fHealthPath: {Path: "healthCheck.path", Type: "string", Format: "path", Default: "/healthz",
		Doc: "Absolute request path of the probe."},
	fHealthMethod: {Path: "healthCheck.method", Type: "string", Default: "GET", Enum: []string{"GET", "HEAD"},
		Doc: "Request method of the probe: GET, or HEAD (no body is read, so not with expectBody)."},
	fHealthPort: {Path: "healthCheck.port", Type: "integer", Min: 1, Max: 65535,
		Doc: "Port the probe goes to instead of the service's own; absent: the service's port. The probe names ip:port in upstreamHeader, so the probe cluster must reach that address: an ORIGINAL_DST cluster does; an override_host cluster whose endpoints lack it sends the probe to its fallback policy's host."},
	fHealthHost: {Path: "healthCheck.host", Type: "string", NonEmpty: true,
		Doc: "The probe's :authority (Host); absent: the service's address."},
	fHealthExpectBody: {Path: "healthCheck.expectBody", Type: "string", NonEmpty: true,
		Doc: "Text the probe's response body must contain (a plain substring, case-sensitive, at most 1024 bytes), searched in the first 24 KiB of the body; a response without it fails the probe."},
	fHealthInterval: {Path: "healthCheck.interval", Type: "string", Format: "duration", Default: "5s", Min: "1s", Max: "1h",
		Doc: "Time between probe rounds, 1s to 1h."},
	fHealthTimeout: {Path: "healthCheck.timeout", Type: "string", Format: "duration", Default: "2s", Min: "100ms", Max: "1m",
		Doc: "Timeout of one probe, 100ms to 1m, at most interval."},
	fHealthyThreshold: {Path: "healthCheck.healthyThreshold", Type: "integer", Default: 2, Min: 1, Max: 10,
		Doc: "Consecutive successes that bring a DOWN service back."},
	fUnhealthyThreshold: {Path: "healthCheck.unhealthyThreshold", Type: "integer", Default: 3, Min: 1, Max: 10,
		Doc: "Consecutive failures that mark a service DOWN."},
	fExpectedStatuses: {Path: "healthCheck.expectedStatuses", Type: "string", Format: "statuses", Default: "200-399",
		Doc: "Status codes that count as healthy, e.g. 200-399,404."},
	fHealthCluster: {Path: "healthCheck.cluster", Type: "string", Default: "hashlb_upstream", NonEmpty: true,
		Doc: "Envoy cluster the probes are sent on; it must exist in the proxy."},
	fPassiveHealth: {Path: "passiveHealth", Type: "object",
		Doc: "Ejection after consecutive failed responses (or failed connections) of a service."},
	fConsecutiveFailures: {Path: "passiveHealth.consecutiveFailures", Type: "integer", Default: 5, Min: 1, Max: 1000,
		Doc: "Failures in a row that eject the service."},
	fEjectionTime: {Path: "passiveHealth.ejectionTime", Type: "string", Format: "duration", Default: "30s", Min: "1s", Max: "1h",
		Doc: "How long an ejected service stays out, 1s to 1h."},
	fFailureStatuses: {Path: "passiveHealth.failureStatuses", Type: "string", Format: "statuses", Default: "502-504",
		Doc: "Response codes that count as failures, e.g. 502-504."},
	fSession: {Path: "session", Type: "object",
		Doc: "Session persistence: the response carries a signed cookie (or header) naming the chosen service, and a request that brings a valid one back goes to that service while it is selectable, before persistence, hashing and weights. The key comes from the VM's environment variable HASHLB_SESSION_KEY (32 bytes or more); without it the plugin refuses to start."},
	fSessionType: {Path: "session.type", Type: "string", Required: true, Enum: []string{SessionCookie, SessionHeader},
		Doc: "cookie: a Set-Cookie on the response, read back from the Cookie header; header: a response header the client sends back as a request header (for API clients)."},
	fSessionName: {Path: "session.name", Type: "string", Format: "name", Default: "hashlb-session",
		Doc: "The cookie's or header's name (a header name is lower-cased), at most 128 bytes. The client's copies are removed before the request goes upstream. A session is signed for its name and the plugin's root_id: a value issued under another name or root_id is refused, so give each hashlb plugin its own name."},
	fSessionPath: {Path: "session.path", Type: "string", Format: "path", Default: "/",
		Doc: "The cookie's Path attribute (cookie sessions); no ';' or ','."},
	fSessionDomain: {Path: "session.domain", Type: "string", NonEmpty: true,
		Doc: "The cookie's Domain attribute (cookie sessions), e.g. example.com; absent: a host-only cookie."},
	fSessionSecure: {Path: "session.secure", Type: "boolean", Default: false,
		Doc: "Adds the cookie attribute Secure: the browser sends the cookie over HTTPS only. Required with sameSite None."},
	fSessionHTTPOnly: {Path: "session.httpOnly", Type: "boolean", Default: true,
		Doc: "Adds the cookie attribute HttpOnly: scripts in the page cannot read the cookie."},
	fSessionSameSite: {Path: "session.sameSite", Type: "string", Enum: []string{"Strict", "Lax", "None"},
		Doc: "The cookie's SameSite attribute; absent: none is written (browsers then treat it as Lax)."},
	fSessionLifetime: {Path: "session.lifetime", Type: "string", Default: LifetimeSession, Enum: []string{LifetimeSession, LifetimePermanent},
		Doc: "session: no Max-Age, the browser drops the cookie when it closes; permanent: Max-Age = absoluteTimeout (Gateway API lifetimeType Permanent). Either way hashlb honours a session at most absoluteTimeout."},
	fSessionAbsoluteTimeout: {Path: "session.absoluteTimeout", Type: "string", Format: "duration", Default: "1d", Min: "1m", Max: "365d",
		Doc: "How long after its issue a session is honoured, 1m to 365d; past it the request is balanced again and gets a new session."},
	fSessionIdleTimeout: {Path: "session.idleTimeout", Type: "string", Format: "duration", Min: "1m", Max: "365d",
		Doc: "When set, a session unused this long ends, 1m to 365d and at most absoluteTimeout; a response re-issues a session last used more than a tenth of it ago. Absent: no idle expiry."},
	fSessionClockSkew: {Path: "session.clockSkew", Type: "string", Format: "duration", Default: "5m", Min: "10s", Max: "1h",
		Doc: "How far ahead of this proxy's clock a session's signed times may be (another proxy's clock running ahead), 10s to 1h; a value signed further ahead is refused (hashlb.session_future) and the request gets a new session."},
	fUpstreamVia: {Path: "upstreamVia", Type: "string", Default: ViaHeader, Enum: []string{ViaHeader, ViaFilterState},
		Doc: "How the choice reaches Envoy: header sets upstreamHeader; filterState sets Envoy's filter state envoy.network.transport_socket.original_dst_address (set_envoy_filter_state, Envoy 1.28 or later), which an ORIGINAL_DST cluster reads before any header, so the client never sees or forges it. filterType network always uses filterState."},
	fUpstreamHeader: {Path: "upstreamHeader", Type: "string", Format: "header", Default: "x-envoy-original-dst-host",
		Doc: "Request header hashlb sets to the chosen address(es); the header Envoy's override_host policy (or ORIGINAL_DST cluster) reads. Client-supplied copies are always removed."},
	fUpstreamCount: {Path: "upstreamCount", Type: "integer", Default: 1, Min: 1, Max: maxUpstreamCount,
		Doc: "How many ranked addresses upstreamHeader carries, comma-separated, best first; Envoy's override_host uses the later ones for retries. Must be 1 with an ORIGINAL_DST cluster."},
	fServiceHeader: {Path: "serviceHeader", Type: "string", Format: "header", Default: "x-hashlb-service", Off: "",
		Doc: `Request header set to the chosen service's name; "" disables it. Must differ from upstreamHeader.`},
	fTrustedForwardedHops: {Path: "trustedForwardedHops", Type: "integer", Default: 0, Min: 0, Max: 32,
		Doc: "When > 0 the client IP is read from x-forwarded-for, this many hops from the right, instead of the connection's source address. Only for traffic through that many trusted proxies."},
	fHashBalanceFactor: {Path: "hashBalanceFactor", Type: "integer", Default: 0, Min: 101, Max: 1000, Off: 0,
		Doc: "Bounded load for the hashing methods: 0 is off, else 101 to 1000 (percent of the mean active requests a service may carry before a key spills to its next-ranked service)."},
	fSlowStart: {Path: "slowStart", Type: "object",
		Doc: "Slow start for the hash methods: a service that joins the pool after the proxy has started deciding (added by a new configuration, back from DOWN or ejection, enabled again, or raised from weight 0) ranks with an effective weight that grows from a floor to its weight over window, so it takes a growing share of new keys, and every key that moves, moves to it. Persistence entries, fleet records and sessions keep their keys."},
	fSlowStartWindow: {Path: "slowStart.window", Type: "string", Format: "duration", Required: true, Min: "1s", Max: "7d",
		Doc: "How long a ramp lasts, 1s to 7d: at its end the service ranks with its full weight."},
	fSlowStartMinWeightPercent: {Path: "slowStart.minWeightPercent", Type: "integer", Default: 10, Min: 1, Max: 100,
		Doc: "The floor, in percent of the service's weight: the effective weight is weight × max(minWeightPercent/100, elapsed/window) (Envoy's slow_start_config with aggression 1). 100 turns the ramp off."},
	fSlowStartStep: {Path: "slowStart.step", Type: "string", Format: "duration", Min: "1s", Max: "1h",
		Doc: "When set, the weight rises in steps (NetScaler's -newServiceRequestIncrementInterval): elapsed counts as the end of the step it is in, ⌊elapsed/step⌋+1 steps, so each step's level holds from its start. 1s to 1h, at most window."},
	fDebugHeader: {Path: "debugHeader", Type: "boolean", Default: false,
		Doc: "Adds the response header x-hashlb-decision (method, service, reason)."},
}

// Fields returns every configuration field, in the order docs/config.md lists them.
func Fields() []FieldSpec {
	out := make([]FieldSpec, len(fieldTable))
	for i, f := range fieldTable {
		f.Enum = slices.Clone(f.Enum)
		out[i] = f
	}
	return out
}

// spec returns the field's entry.
func (f fieldID) spec() *FieldSpec { return &fieldTable[f] }

// defaultInt, defaultBool, defaultString and defaultDuration return the
// field's default.
func (f fieldID) defaultInt() int       { return fieldTable[f].Default.(int) }
func (f fieldID) defaultBool() bool     { return fieldTable[f].Default.(bool) }
func (f fieldID) defaultString() string { return fieldTable[f].Default.(string) }
func (f fieldID) defaultDuration() time.Duration {
	return mustDuration(fieldTable[f].Default.(string))
}

// intRange returns an integer field's (or an array's length) bounds.
func (f fieldID) intRange() (lo, hi int) { return fieldTable[f].Min.(int), fieldTable[f].Max.(int) }

// durationRange returns a duration field's bounds.
func (f fieldID) durationRange() (lo, hi time.Duration) {
	return mustDuration(fieldTable[f].Min.(string)), mustDuration(fieldTable[f].Max.(string))
}

// mustDuration parses a duration of the field table, which tests keep valid.
func mustDuration(s string) time.Duration {
	d, err := ParseDuration(s)
	if err != nil {
		panic("lbcore: field table: " + err.Error())
	}
	return d
}
