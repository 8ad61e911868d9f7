// Command hashlb-lbpolicy is hashlb as a native Envoy load-balancing policy:
// an Envoy dynamic module (Envoy 1.38, 1.39 and 1.40), built with
// `go build -buildmode=c-shared` into libhashlb_lbpolicy.so (./build.sh
// lbpolicy). Envoy's envoy.load_balancing_policies.dynamic_modules policy
// loads it by name; every decision is lbcore's, through internal/lbpolicy,
// over the cluster's own hosts and Envoy's health of them
// (docs/deploy.md, "The load-balancing policy").
//
// Its parts, by file: the hooks Envoy calls, from the program's init to a
// choice, and the log (main.go); the part of Envoy's ABI the module uses
// (abi.go, with the C declarations in hashlb_abi.h); a cluster's hosts as
// lbpolicy.Hosts over Envoy's callbacks (hosts.go); the load balancers Envoy
// holds, by slot, with their choice cache in C (states.go, cache.h,
// cache.c); how the Go runtime lives with Envoy's threads (goruntime.go);
// the library kept mapped for the life of the process (pin.c); and the test
// switches, compiled in only with the build tag hashlb_testhooks
// (testhooks.go; off in testhooks_off.go).
package main

/*
#include "hashlb_abi.h"
#include "cache.h"
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hashlb/hashlb/internal/lbpolicy"
)

// abiVersion is the ABI version the module was written against: that of
// the oldest Envoy it supports, 1.38 (1.38.3 and 1.39.3 report v0.1.0 as
// their own; 1.40.0 reports v0.2.0 and loads a v0.1.0 module with a
// warning; abi.go). The tests build variants with another
// (-ldflags -X main.abiVersion=...) to see what Envoy says; an empty one
// makes the init return no version.
var abiVersion = "v0.1.0"

// abiVersionC is abiVersion as a C string, made once: Envoy reads it during
// envoy_dynamic_module_on_program_init.
var abiVersionC *C.char

func main() {}

// The choice cache's longest key is C's (cache.h HL_CACHE_KEY) and Go's
// (lbpolicy.PathKeyMax): the build fails when they differ.
const (
	_ = uint(lbpolicy.PathKeyMax - C.HL_CACHE_KEY)
	_ = uint(C.HL_CACHE_KEY - lbpolicy.PathKeyMax)
)

//export envoy_dynamic_module_on_program_init
func envoy_dynamic_module_on_program_init() (v *C.char) {
	defer func() {
		if r := recover(); r != nil {
			v = nil
		}
	}()
	if abiVersion == "" {
		return nil
	}
	if abiVersionC == nil {
		C.hl_pin()
		abiVersionC = C.CString(abiVersion)
	}
	return abiVersionC
}

// Envoy's log levels (envoy_dynamic_module_type_log_level).
const (
	logDebug = 1
	logInfo  = 2
	logWarn  = 3
	logError = 4
)

// logf writes to Envoy's log under the dynamic_modules logger, prefixed
// "hashlb: ".
func logf(level int, format string, args ...any) {
	msg := "hashlb: " + fmt.Sprintf(format, args...)
	C.hl_log(C.int(level), (*C.char)(unsafe.Pointer(unsafe.StringData(msg))), C.size_t(len(msg)))
}

// policyState is one on_lb_config_new: the policy and its counters.
type policyState struct {
	pol    *lbpolicy.Policy
	envoy  unsafe.Pointer // the config's envoy pointer, for the counters
	ctrs   [numCounters]C.size_t
	have   [numCounters]bool
	logged atomic.Int32 // panics logged so far
}

// The policy's counters, in Envoy's stats under the policy's namespace.
const (
	cNoHost = iota
	cPanic
	cInconsistent
	cUpdateError
	cCached
	cWeightClamped
	numCounters
)

var counterNames = [numCounters]string{"no_host", "panic", "inconsistent", "update_error", "cached", "weight_clamped"}

func (p *policyState) count(c int) { p.add(c, 1) }

func (p *policyState) add(c int, n uint64) {
	if p.have[c] {
		C.hl_increment(p.envoy, p.ctrs[c], C.uint64_t(n))
	}
}

// recovered handles a panic at an export: logged (the first few), counted.
func (p *policyState) recovered(where string, r any) {
	if p != nil {
		p.count(cPanic)
		if p.logged.Add(1) > 10 {
			return
		}
	}
	logf(logError, "%s: recovered from a panic, the choice gets no host: %v", where, r)
}

// handleOf stores a Go handle in C memory: what Envoy keeps for the module.
func handleOf(v any) unsafe.Pointer {
	p := C.malloc(C.size_t(unsafe.Sizeof(uintptr(0))))
	*(*cgo.Handle)(p) = cgo.NewHandle(v)
	return p
}

func valueOf(p unsafe.Pointer) any { return (*(*cgo.Handle)(p)).Value() }

func freeHandle(p unsafe.Pointer) {
	(*(*cgo.Handle)(p)).Delete()
	C.free(p)
}

//export envoy_dynamic_module_on_lb_config_new
func envoy_dynamic_module_on_lb_config_new(config unsafe.Pointer, name C.hl_buf, data C.hl_buf) (out unsafe.Pointer) {
	defer func() {
		if r := recover(); r != nil {
			logf(logError, "configuration: recovered from a panic: %v", r)
			out = nil
		}
	}()
	raw := C.GoBytes(unsafe.Pointer(data.ptr), C.int(data.length))
	pol, err := lbpolicy.ParseConfig(raw)
	if err != nil {
		logf(logError, "configuration refused: %v", err)
		return nil
	}
	st := &policyState{pol: pol, envoy: config}
	for i, n := range counterNames {
		c := C.hl_define_counter(config, (*C.char)(unsafe.Pointer(unsafe.StringData(n))), C.size_t(len(n)))
		st.ctrs[i], st.have[i] = c.id, c.result == 0
	}
	logf(logInfo, "policy %q: %s", C.GoStringN(name.ptr, C.int(name.length)), pol.Config.LBMethod)
	return handleOf(st)
}

//export envoy_dynamic_module_on_lb_config_destroy
func envoy_dynamic_module_on_lb_config_destroy(p unsafe.Pointer) {
	defer func() { _ = recover() }()
	if p != nil {
		freeHandle(p)
	}
}

// lbState is one worker's load balancer. Envoy holds it as a slot of
// states (not a cgo.Handle, whose lookup is a map lookup with interface
// hashing on every choice).
type lbState struct {
	cluster string
	pol     *policyState
	w       *lbpolicy.Worker
	hosts   cHosts
	ctx     cContext
	entries entries     // when the worker entered Go and yielded (goruntime.go)
	cache   *C.hl_cache // the choice cache (cache.h), nil when choices cannot be remembered
}

//export envoy_dynamic_module_on_lb_new
func envoy_dynamic_module_on_lb_new(config unsafe.Pointer, lb unsafe.Pointer) (out unsafe.Pointer) {
	var pst *policyState
	defer func() {
		if r := recover(); r != nil {
			pst.recovered("new load balancer", r)
			out = nil
		}
	}()
	pst = valueOf(config).(*policyState)
	noteCaller()
	cn := C.hl_cluster_name(C.uintptr_t(uintptr(lb)))
	name := C.GoStringN(cn.ptr, C.int(cn.length))
	lbi := C.uintptr_t(uintptr(lb))
	st := &lbState{cluster: name, pol: pst, w: pst.pol.NewWorker(name), hosts: cHosts{lb: lbi}}
	st.ctx.lb = lbi
	st.w.OnHealth = func() {
		logf(logInfo, "cluster %s: %s (seen by a choice)", name, st.w.Summary())
	}
	if n, prefix, ok := pst.pol.PathKey(); ok && testPanic == "" {
		var owner unsafe.Pointer // the cached counter's, when Envoy defined it
		if pst.have[cCached] {
			owner = pst.envoy
		}
		st.cache = C.hl_cache_new(C.uint32_t(n), C.bool(prefix), owner, pst.ctrs[cCached])
	}
	st.update(0, 0)
	return keepState(st)
}

// update rebuilds the worker's services from the host set; added and
// removed are what Envoy says changed (both 0 for a health change).
func (st *lbState) update(added, removed int) {
	start := time.Now()
	notes, err := st.w.Update(&st.hosts)
	took := time.Since(start)
	st.syncCache()
	logf(logInfo, "cluster %s: %s; %d added, %d removed; %d ms", st.cluster, st.w.Summary(), added, removed, took.Milliseconds())
	if notes.Clamped > 0 {
		st.pol.add(cWeightClamped, uint64(notes.Clamped))
		logf(logWarn, "cluster %s: %d hosts have an LB weight over hashlb's 100 and rank as 100, e.g. %s", st.cluster, notes.Clamped, notes.Example)
	}
	if err != nil {
		st.pol.count(cUpdateError)
		logf(logError, "%v; every request gets no host until the cluster changes", err)
	}
}

// syncCache gives the cache the worker's view of the hosts and adds its
// hits to Envoy's counter.
func (st *lbState) syncCache() {
	c := st.cache
	if c == nil {
		return
	}
	gen, healthy := st.w.View()
	c.gen, c.healthy_count = C.uint32_t(gen), C.uint32_t(healthy)
	if c.hits > 0 {
		st.pol.add(cCached, uint64(c.hits))
		c.hits = 0
	}
}

// hl_go_choose_host is Envoy's choice hook past the cache (cache.c's
// envoy_dynamic_module_on_lb_choose_host): lbcore's decision, remembered in
// the cache when it may be.
//
//export hl_go_choose_host
func hl_go_choose_host(lb, mod, ctx unsafe.Pointer, priority, index *C.uint32_t) (ok C.bool) {
	var st *lbState
	defer func() {
		if r := recover(); r != nil {
			if st != nil {
				st.pol.recovered("choose host", r)
			} else {
				(*policyState)(nil).recovered("choose host", r)
			}
			ok = false
		}
	}()
	st = stateOf(mod)
	if testPanic != "" {
		return testChoose(st, ctx, priority, index)
	}
	st.ctx.ctx = C.uintptr_t(uintptr(ctx))
	now := time.Now()
	p, i, f := st.w.Choose(&st.hosts, &st.ctx, now)
	st.remember()
	st.ctx.ctx = 0
	st.entries.enter(now)
	switch f {
	case lbpolicy.NoFailure:
		*priority, *index = C.uint32_t(p), C.uint32_t(i)
		return true
	case lbpolicy.Inconsistent:
		st.pol.count(cInconsistent)
	default:
		st.pol.count(cNoHost)
	}
	return false
}

// remember puts the last choice in the cache when it may be remembered
// (lbpolicy.Worker.Remembered), under the view it was made in.
func (st *lbState) remember() {
	if st.cache == nil {
		return
	}
	st.syncCache()
	host, healthy, ok := st.w.Remembered()
	if !ok {
		return
	}
	path, _ := st.ctx.Header(":path", 0)
	C.hl_cache_put(C.uintptr_t(uintptr(unsafe.Pointer(st.cache))), strAddr(path), C.size_t(len(path)), C.uint32_t(host), C.uint32_t(healthy))
}

//export envoy_dynamic_module_on_lb_on_host_membership_update
func envoy_dynamic_module_on_lb_on_host_membership_update(lb, mod unsafe.Pointer, added, removed C.size_t) {
	var st *lbState
	defer func() {
		if r := recover(); r != nil {
			if st != nil {
				st.pol.recovered("host membership update", r)
			}
		}
	}()
	st = stateOf(mod)
	st.update(int(added), int(removed))
}

//export envoy_dynamic_module_on_lb_destroy
func envoy_dynamic_module_on_lb_destroy(mod unsafe.Pointer) {
	defer func() { _ = recover() }()
	if mod != nil {
		stateOf(mod).w.Close()
		dropState(mod)
	}
}
