package main

// The part of Envoy's dynamic-module ABI this module uses, declared here in
// the module's own words. It follows the ABI of Envoy 1.40.0 (commit
// 9e5580933739775e8bce696a57a2e1bc99368f23), whose header is
// source/extensions/dynamic_modules/abi/abi.h in the Envoy repository; the
// load-balancing policy that calls these hooks is
// source/extensions/load_balancing_policies/dynamic_modules/ (config.cc
// loads the module by name and hands lb_policy_config to the module as bytes,
// a google.protobuf.StringValue as its string; lb_config.cc resolves the six
// lb hooks; load_balancer.cc calls them and reads the chosen index from the
// priority's healthy hosts; abi_impl.cc implements the callbacks).
//
// What the binary itself showed (docs/deploy.md, "The load-balancing
// policy"): it logs "Dynamic module ABI version v0.2.0 matched." for this
// module; a load balancer is made on the main thread and on each worker,
// first with no hosts, then told of the host set by the membership hook, on
// its own thread; the hook runs on health changes too (0 added, 0 removed);
// host health reads in Envoy's Host::Health order (unhealthy 0, degraded 1,
// healthy 2; other versions of abi.h list healthy first); the chosen index
// is one of the priority's healthy hosts.
//
// Every buffer is a pointer and a length; Envoy's strings are valid until the
// hook that got them returns. The callbacks are Envoy's exported symbols,
// resolved when the module is loaded, so the library links with unresolved
// symbols allowed. hl_pin marks the library RTLD_NODELETE, so that it stays
// mapped if Envoy closes it (a Go runtime cannot be unloaded; Envoy closes a
// module whose configurations are all gone unless do_not_close is set).

/*
#cgo linux LDFLAGS: -Wl,--unresolved-symbols=ignore-all -ldl
#include "hashlb_abi.h"
*/
import "C"
