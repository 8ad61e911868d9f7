package abi

/*
#include "hashlb_abi.h"
#include "cache.h"
*/
import "C"

import (
	"time"
	"unsafe"
)

// The hooks Envoy calls, Envoy's names (hashlb_abi.h), each behind the
// panic barrier. A hook's results are named and set by its return
// statements alone, so one that panics returns their zero values: Envoy's
// "no" (no ABI version, no configuration, no load balancer, no host).

// maxPanicLogs is how many of a configuration's panics are logged; the
// counter has them all.
const maxPanicLogs = 10

// hook is an export as the barrier's log line names it, with what Envoy
// makes of its panic ("" where the name says it).
type hook struct{ name, outcome string }

var (
	atInit          = hook{"program init", "Envoy refuses the module"}
	atConfig        = hook{"configuration", ""}
	atConfigDestroy = hook{"configuration destroy", ""}
	atNewLB         = hook{"new load balancer", "the choice gets no host"}
	atChoose        = hook{"choose host", "the choice gets no host"}
	atUpdate        = hook{"host membership update", "the choice gets no host"}
	atDestroy       = hook{"destroy load balancer", ""}
)

// barrier is the panic barrier every export defers first: a Go panic that
// reached Envoy's thread would end the process. It recovers the panic, adds
// it to the panic counter of the configuration *cfg names (nil, or nil
// there, before the export knows it: not counted) and logs it, the first
// maxPanicLogs of a configuration. The export has set cfg by then if it
// got that far, which is why it passes the variable, not its value.
func barrier(h *hook, cfg **config) {
	r := recover()
	if r == nil {
		return
	}
	if cfg != nil && *cfg != nil {
		c := *cfg
		c.panics.Add(1)
		if c.logged.Add(1) > maxPanicLogs {
			return
		}
	}
	outcome := ""
	if h.outcome != "" {
		outcome = ", " + h.outcome
	}
	Logf(LogError, "%s: recovered from a panic%s: %v", h.name, outcome, r)
}

//export envoy_dynamic_module_on_program_init
func envoy_dynamic_module_on_program_init() (v *C.char) {
	defer barrier(&atInit, nil)
	if abiVersion == "" {
		return nil
	}
	if abiVersionC == nil {
		C.hl_pin()
		abiVersionC = C.CString(abiVersion)
	}
	return abiVersionC
}

// The counters the binding counts itself, defined with every configuration
// after the Module's: panics the barrier recovered (exports.go), and
// choices the cache answered (cache.h; Cache.SetView adds the rest).
const (
	panicCounter  = "panic"
	cachedCounter = "cached"
)

//export envoy_dynamic_module_on_lb_config_new
func envoy_dynamic_module_on_lb_config_new(envoy unsafe.Pointer, name C.hl_buf, data C.hl_buf) (out unsafe.Pointer) {
	defer barrier(&atConfig, nil)
	raw := C.GoBytes(unsafe.Pointer(data.ptr), C.int(data.length))
	stats := Stats{envoy: envoy}
	mod, err := module.NewConfig(C.GoStringN(name.ptr, C.int(name.length)), raw, stats)
	if err != nil {
		Logf(LogError, "configuration refused: %v", err)
		return nil
	}
	c := &config{mod: mod, panics: stats.Counter(panicCounter), cached: stats.Counter(cachedCounter)}
	return handleOf(c)
}

//export envoy_dynamic_module_on_lb_config_destroy
func envoy_dynamic_module_on_lb_config_destroy(p unsafe.Pointer) {
	defer barrier(&atConfigDestroy, nil)
	if p != nil {
		freeHandle(p)
	}
}

//export envoy_dynamic_module_on_lb_new
func envoy_dynamic_module_on_lb_new(envoy unsafe.Pointer, lb unsafe.Pointer) (out unsafe.Pointer) {
	var cfg *config
	defer barrier(&atNewLB, &cfg)
	cfg = valueOf(envoy).(*config)
	noteCaller()
	lbi := C.uintptr_t(uintptr(lb))
	cn := C.hl_cluster_name(lbi)
	st := &lbState{cfg: cfg, ctx: Context{lb: lbi}}
	if n, prefix, ok := cfg.mod.CacheKey(); ok {
		st.cache = newCache(n, prefix, cfg.cached)
	}
	st.lb = cfg.mod.NewLB(C.GoStringN(cn.ptr, C.int(cn.length)), &Hosts{lb: lbi}, st.cache)
	return keepState(st)
}

// hl_go_choose_host is Envoy's choice hook past the cache (cache.c's
// envoy_dynamic_module_on_lb_choose_host).
//
//export hl_go_choose_host
func hl_go_choose_host(lb, mod, ctx unsafe.Pointer, priority, index *C.uint32_t) (ok C.bool) {
	var cfg *config
	defer barrier(&atChoose, &cfg)
	st := stateOf(mod)
	cfg = st.cfg
	st.ctx.ctx = C.uintptr_t(uintptr(ctx))
	now := time.Now()
	p, i, chosen := st.lb.Choose(&st.ctx, now)
	st.ctx.ctx = 0
	st.entries.enter(now)
	if !chosen {
		return false
	}
	*priority, *index = C.uint32_t(p), C.uint32_t(i)
	return true
}

//export envoy_dynamic_module_on_lb_on_host_membership_update
func envoy_dynamic_module_on_lb_on_host_membership_update(lb, mod unsafe.Pointer, added, removed C.size_t) {
	var cfg *config
	defer barrier(&atUpdate, &cfg)
	st := stateOf(mod)
	cfg = st.cfg
	st.lb.Update(int(added), int(removed))
}

//export envoy_dynamic_module_on_lb_destroy
func envoy_dynamic_module_on_lb_destroy(mod unsafe.Pointer) {
	var cfg *config
	defer barrier(&atDestroy, &cfg)
	if mod == nil {
		return
	}
	st := stateOf(mod)
	cfg = st.cfg
	st.lb.Destroy()
	dropState(mod)
}
