package e2e

// The lateness a fleet test measures on the machine it runs on, and the
// time bounds it widens by it. A bound of the fleet (a call's timeout,
// agreement within seconds after etcd answers) is a figure of a quiet
// machine; a loaded one delivers timers, calls and their answers late, and
// a test that held it to the quiet figure would judge the machine, not the
// module. So each fleet test measures how late a 10 ms timer of its own
// process fires while it runs (lateness.Meter, shared with the real-Envoy
// tests), widens its bounds by that, and says so in its failures. The product's figures stay the documented ones
// (docs/persistence.md), measured on a quiet machine.

import "time"

// callTimeout is a fleet call timeout of base on this machine, for a test
// that is not about calls missing it: base widened by twice the lateness
// measured (a call waits for its timer and its answer's delivery), rounded
// up to 10 ms, at most max. The test's failures name it.
func callTimeout(base, late, max time.Duration) time.Duration {
	d := base + 2*late
	d = (d + 9*time.Millisecond).Truncate(10 * time.Millisecond)
	return min(d, max)
}
