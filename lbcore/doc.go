// Package lbcore owns every decision hashlb makes, and what the workers of a
// proxy share to make them alike. Its parts, by file:
//
//   - Configuration: the types (config.go), the field table every field's
//     type, default and range comes from (fields.go), the JSON Schema
//     generated from it (schema.go), parsing and validation, every problem
//     reported at once (validate.go, validate_sections.go,
//     validate_network.go), the caps on what a request or a configuration
//     can cost (limits.go), the hosts that run hashlb (Envoy's HTTP filter,
//     network filter and load-balancing policy) and what each does with
//     every field (hosts.go), and a configuration's copy over services a host
//     learns elsewhere (outside.go).
//   - The request: the read-only view of one request (request.go), what a
//     configuration's decisions read from it so the filter fetches nothing
//     else (inputs.go, inputs_host.go), addresses (addr.go).
//   - The decision: the eight Citrix ADC key extractors with masks and hash
//     length (methods.go, mask.go), weighted rendezvous ranking (hrw.go) and
//     its cache of recent rankings (rankcache.go), the Balancer that decides
//     (balancer.go), slow start, the growing effective weight of a service
//     that joins the pool (slowstart.go), its backup methods (leastconn.go,
//     roundrobin.go), and
//     XXH64 in inlinable pieces for the Wasm build (xxh64.go; the build tag
//     hashlb_inlinehash uses them natively too, xxh64_tag.go; without it,
//     xxh64_notag.go).
//   - Key expressions: parsing, evaluation and functions (expr.go,
//     exprparse.go, exprfuncs.go, exprtext.go), JSON paths for JWT claims
//     (jsonpath.go, jsonsyntax.go), and replace()'s bounded regexp
//     backtracker (replace.go); hex digits (hex.go) and conversions without a
//     copy (nocopy.go).
//   - Persistence: the TR7 table over a Store (persist.go, balancer_persist.go),
//     the Store itself with createKey (store.go), and what the fleet level
//     asks of the services (balancer_fleet.go).
//   - Session persistence: the session block (session_config.go), and the
//     signed cookie or header that names a service, checked on a request
//     and set on its response (session.go).
//   - The boards in shared data: LoadBoard shares active requests between
//     workers (loadboard.go); HealthBoard holds health records and the probe
//     lease (healthboard.go) in a bounded slot table (healthslots.go), with
//     the probe and ejection rules (health.go).
//   - Reconfiguration: Carry maps a new services list to the old one by
//     identity, so health, active requests and persistence follow a service
//     (carry.go).
//   - Explain: how a request is decided, step by step, from the Balancer's
//     own code on a copy of its state (explain.go, for hashlb explain).
//
// The fleet-wide level of persistence (etcd) is package lbcore/fleet, which
// imports lbcore: lbcore parses its config (Fleet) and gives it the services'
// identities in fleet records (balancer_fleet.go), and never imports it.
//
// It imports the Go standard library, xxhash and gjson only: it never sees the
// proxy-wasm SDK, so it builds and is tested natively and for GOOS=wasip1 alike.
// Time and storage come from the caller (a now argument, a Store); lbcore has
// no package state that changes, no goroutines and never reads the clock.
package lbcore
