// Package abi is the load-balancing policy's binding to Envoy's
// dynamic-module ABI (cgo): Envoy's hooks, exported from the library, and
// the callbacks they use, under a typed Go API. A Module registered with
// Serve makes a Config of each policy configuration Envoy loads
// (Module.NewConfig), a Config makes the LB of one Envoy thread
// (Config.NewLB), and an LB chooses hosts (LB.Choose), learns of changes
// of the host set (LB.Update) and is dropped (LB.Destroy). It reads the
// cluster through Hosts and the request through Context, whose methods are
// those of internal/lbpolicy's Hosts and Context without this package
// importing it; counters are Stats' and Counter's, the log Logf's.
// cmd/hashlb-lbpolicy implements the Module with internal/lbpolicy and is
// the library's main package; no other package calls the ABI.
//
// It is called abi after the layer of Envoy's own Go SDK for dynamic
// modules that holds the cgo exports (source/extensions/dynamic_modules/
// sdk/go/abi), and lives under internal/lbpolicy because it binds the
// load-balancing policy's hooks alone. The layering follows that SDK as
// read at Envoy commits 65754f927d79d10f6e4c1aba3c6b73b559edec3e
// (sdk/go/abi/load_balancer.go: the exports unwrap Envoy's pointers and
// call a per-worker load balancer's ChooseHost, OnHostMembershipUpdate and
// OnDestroy, made by a factory made from each configuration),
// 3f88ca518e250db35f029a21a9cf0ba0be161538 (sdk/go/shared/load_balancer.go:
// those interfaces, in a package without cgo) and
// ffdbbdd1f7a97ee9ddeb994d79bf13f12e9bef0a (sdk/go/internal/recovery: one
// deferred barrier at the top of every export turns a panic into a logged,
// fail-closed return). The SDK itself is not used: it declares the newest
// ABI, and this binding the oldest Envoy the policy supports (abi.go).
// What differs by design: one policy, not factories registered by name;
// the load balancers held by slot, not by a handle lookup, on the choice
// path (states.go); a choice cache in C answering before Go is entered
// (cache.h); and the barrier counting panics as well as logging them.
//
// Its parts, by file: the ABI's facts and the versions they were read
// from, the ABI version the program init returns, the log and the counters
// (abi.go, with the C declarations and call wrappers in hashlb_abi.h); the
// typed API, Module, Config and LB (api.go); the exports Envoy calls and the
// panic barrier they share (exports.go); what Envoy holds, each
// configuration by a handle and each load balancer by a slot (states.go);
// the cluster's hosts and the request over Envoy's callbacks (hosts.go); the
// choice cache, the choice hook in C that consults it before entering Go
// (cache.h, cache.c) and its Go side, which also carries its choices over a
// change of the hosts (cache.go); how the Go runtime lives
// with Envoy's threads (goruntime.go); the library kept mapped for the life
// of the process (pin.c); and the test switch, compiled in only with the
// build tag hashlb_testhooks (testhooks.go; off in testhooks_off.go).
package abi
