// Package loadgen is the HTTP/1.1 load generator of hashlb's benchmark
// against Envoy's own load balancers (e2e/envoy, ./build.sh bench): small,
// so that it takes little of the CPU it shares with the proxy it measures,
// and the same for every proxy it is pointed at.
//
// It sends pre-rendered requests (Render) over keep-alive connections, in
// two modes:
//
//   - Closed: a fixed number of connections, each sending its next request
//     as soon as the previous answer is in: the proxy's throughput (req/s)
//     at that concurrency.
//   - Open: requests scheduled at a fixed rate whatever the answers do, each
//     timed from the moment it was due (not from when a connection was free
//     to send it), so a stall of the proxy shows in the latency of every
//     request it delayed (no coordinated omission): p50 and p99 at a load
//     below saturation.
//
// An answer is read as HTTP/1.1 with a Content-Length (what Envoy forwards
// from a backend that sends one); any status other than 2xx, a malformed
// answer or a connection error counts as an error, and the connection is
// opened again. Test-only: nothing in the module imports it.
//
// The generator, its two modes and the reading of answers are loadgen.go.
package loadgen
