package abi

// The part of Envoy's dynamic-module ABI the policy uses, declared in the
// binding's own words (hashlb_abi.h). It follows the oldest Envoy the module
// supports, 1.38.3 (commit 0ebfcfe5b0484b89ca85b761da9e05ce75dbda8d), because Envoy
// promises that a module built for 1.N loads in 1.N+1, not the reverse, and
// 1.40 loads modules with RTLD_NOW (a callback the binary lacks fails the
// load). Envoy's header is source/extensions/dynamic_modules/abi/abi.h; at
// that commit the load-balancing policy is
// source/extensions/load_balancing_policies/dynamic_modules/: abi_impl.cc
// defines the callbacks hashlb_abi.h declares, with the parameters the
// binding had when it followed 1.40.0's header (commit
// 9e5580933739775e8bce696a57a2e1bc99368f23), so one binding serves both;
// 1.39.3 (commit 6eb0d2d97489ec1b4e1584a004f5de443d97a41b) is covered by
// the tests, its source not read here; lb_config.cc resolves the six
// lb hooks; config.cc opens the module by dynamic_module_config.name only
// (lib<name>.so in ENVOY_DYNAMIC_MODULES_SEARCH_PATH); load_balancer.cc calls
// the hooks and reads the chosen index from the priority's healthy hosts.
// e2e/envoy's TestLBPolicyCallbacksInEveryEnvoy checks that every Envoy
// symbol the built module references is exported by each tested Envoy.
//
// The ABI version: the module's program init returns "v0.1.0", the version
// 1.38.3 and 1.39.3 report as their own (1.40.0 reports "v0.2.0"). Envoy
// compares the two strings and nothing more: the same logs "Dynamic module
// ABI version v0.1.0 matched." (1.38, 1.39); another loads the module with
// the warning "Dynamic module ABI version v0.1.0 is deprecated. Please
// recompile ..." (1.40); a null pointer instead of a string makes Envoy
// refuse the module ("Failed to initialize dynamic module"). The 1.38 ABI gives
// the module no way to read Envoy's own version (on_program_init takes no
// argument), so the check is Envoy's, and the tests pin what each version
// logs (TestLBPolicyABIVersion).
//
// What the binaries themselves showed (docs/deploy.md, "The load-balancing
// policy"): a load balancer is made on the main thread and on each worker,
// first with no hosts, then told of the host set by the membership hook, on
// its own thread; the hook runs on health changes too (0 added, 0 removed);
// host health reads in Envoy's Host::Health order (unhealthy 0, degraded 1,
// healthy 2, in 1.38.3 as in 1.40.0: get_host_health passes Host::Health
// through and answers 0 for an index out of range; some later versions of
// abi.h list healthy first); the chosen index is one of the priority's
// healthy hosts.
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

import (
	"fmt"
	"unsafe"
)

// abiVersion is the ABI version the binding was written against: that of
// the oldest Envoy it supports, 1.38 (above). The tests build variants with
// another (-ldflags -X with this package's path, .abiVersion=...) to see
// what Envoy says; an empty one makes the program init return no version.
var abiVersion = "v0.1.0"

// abiVersionC is abiVersion as a C string, made once: Envoy reads it during
// envoy_dynamic_module_on_program_init.
var abiVersionC *C.char

// LogLevel is a level of Envoy's log (envoy_dynamic_module_type_log_level).
type LogLevel int

// The levels the policy logs at.
const (
	LogDebug LogLevel = 1
	LogInfo  LogLevel = 2
	LogWarn  LogLevel = 3
	LogError LogLevel = 4
)

// Logf writes to Envoy's log under the dynamic_modules logger, prefixed
// "hashlb: ".
func Logf(level LogLevel, format string, args ...any) {
	msg := "hashlb: " + fmt.Sprintf(format, args...)
	C.hl_log(C.int(level), (*C.char)(unsafe.Pointer(unsafe.StringData(msg))), C.size_t(len(msg)))
}

// Stats defines a configuration's counters in Envoy's stats (valid during
// Module.NewConfig only: Envoy defines counters in on_lb_config_new).
type Stats struct{ envoy unsafe.Pointer }

// Counter defines the counter called name. One Envoy refused is a Counter
// that counts nothing.
func (s Stats) Counter(name string) Counter {
	c := C.hl_define_counter(s.envoy, (*C.char)(unsafe.Pointer(unsafe.StringData(name))), C.size_t(len(name)))
	return Counter{envoy: s.envoy, id: c.id, ok: c.result == 0}
}

// Counter is one of a configuration's counters; any thread may add to it.
// The zero Counter counts nothing.
type Counter struct {
	envoy unsafe.Pointer // the configuration's envoy pointer, its owner
	id    C.size_t
	ok    bool // Envoy defined it
}

// Add adds n to the counter.
func (c Counter) Add(n uint64) {
	if c.ok {
		C.hl_increment(c.envoy, c.id, C.uint64_t(n))
	}
}
