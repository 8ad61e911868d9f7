// Package lateness measures how late this process's timers fire, for the
// tests that hold a time bound: a bound is a figure of a quiet machine, and
// a loaded one delivers timers, calls and their answers late, so a test
// that held it to the quiet figure would judge the machine, not the code
// under test. A test measures the lateness while it runs (Meter, or Measure
// before), widens its bound by it (Widen) and says so in its failures
// (Note). The fleet tests under hostsim (e2e) and the real-Envoy tests
// (e2e/envoy) use it. Test-only: the module never imports it.
//
// All of it is lateness.go.
package lateness
