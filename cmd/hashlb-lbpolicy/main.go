// Command hashlb-lbpolicy is hashlb as a native Envoy load-balancing policy:
// an Envoy dynamic module (Envoy 1.38, 1.39 and 1.40), built with
// `go build -buildmode=c-shared` into libhashlb_lbpolicy.so (./build.sh
// lbpolicy). Envoy's envoy.load_balancing_policies.dynamic_modules policy
// loads it by name; every decision is lbcore's, through internal/lbpolicy,
// over the cluster's own hosts and Envoy's health of them
// (docs/deploy.md, "The load-balancing policy").
//
// It is the library's main package and the policy's glue: internal/lbpolicy
// as the Module of internal/lbpolicy/abi, the binding to Envoy's ABI that
// exports the hooks (cgo; this package has none). Its parts, by file: the
// choice cache's key length checked against the binding's (main.go); the
// Module, registered with the binding, the configuration with its counters,
// and the load balancer of one Envoy thread with its log lines and its use
// of the choice cache (policy.go); and the test switches, compiled in only
// with the build tag hashlb_testhooks (testhooks.go; off in
// testhooks_off.go).
package main

import (
	"github.com/hashlb/hashlb/internal/lbpolicy"
	"github.com/hashlb/hashlb/internal/lbpolicy/abi"
)

func main() {}

// The choice cache's longest key is the binding's (abi.CacheKeyMax, from
// its cache.h) and the policy's (lbpolicy.PathKeyMax): the build fails when
// they differ.
const (
	_ = uint(lbpolicy.PathKeyMax - abi.CacheKeyMax)
	_ = uint(abi.CacheKeyMax - lbpolicy.PathKeyMax)
)
