package abi

/*
#include "hashlb_abi.h"
*/
import "C"

import "unsafe"

// str views an Envoy buffer as a string, without copying: valid until the
// hook returns.
func str(b C.hl_buf) string {
	if b.ptr == nil || b.length == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Pointer(b.ptr)), int(b.length))
}

// Hosts is a cluster's host set as one load balancer sees it (the methods
// of internal/lbpolicy's Hosts), over the ABI's callbacks; its strings are
// Envoy's, valid until the hook that got them returns. lb is Envoy's load
// balancer pointer, held as an integer (hashlb_abi.h says why).
type Hosts struct{ lb C.uintptr_t }

func (h *Hosts) Levels() int            { return int(C.hl_levels(h.lb)) }
func (h *Hosts) Count(p int) int        { return int(C.hl_hosts_count(h.lb, C.uint32_t(p))) }
func (h *Hosts) HealthyCount(p int) int { return int(C.hl_healthy_count(h.lb, C.uint32_t(p))) }
func (h *Hosts) Address(p, i int) string {
	return str(C.hl_host_address(h.lb, C.uint32_t(p), C.size_t(i)))
}
func (h *Hosts) HealthyAddress(p, i int) string {
	return str(C.hl_healthy_address(h.lb, C.uint32_t(p), C.size_t(i)))
}
func (h *Hosts) Weight(p, i int) int { return int(C.hl_host_weight(h.lb, C.uint32_t(p), C.size_t(i))) }
func (h *Hosts) Metadata(p, i int, key string) string {
	return str(C.hl_host_metadata(h.lb, C.uint32_t(p), C.size_t(i), strAddr(key), C.size_t(len(key))))
}
func (h *Hosts) ActiveRequests(p, i int) int64 {
	return int64(C.hl_host_active(h.lb, C.uint32_t(p), C.size_t(i)))
}

// strAddr is the address of s's bytes as an integer, for a C call that reads
// them during the call only; s must stay reachable until it returns (it is
// an argument of the caller, so it does).
func strAddr(s string) C.uintptr_t {
	return C.uintptr_t(uintptr(unsafe.Pointer(unsafe.StringData(s))))
}

// Context is the request of one choice (the methods of internal/lbpolicy's
// Context), over the ABI's context callbacks; ctx is 0 outside a choice,
// and then the request has no header and any host will do.
type Context struct{ lb, ctx C.uintptr_t }

func (c *Context) Header(name string, i int) (string, int) {
	if c.ctx == 0 {
		return "", 0
	}
	v := C.hl_request_header(c.ctx, strAddr(name), C.size_t(len(name)), C.size_t(i))
	return str(C.hl_buf{ptr: v.ptr, length: v.length}), int(v.total)
}

func (c *Context) ShouldSelectAnotherHost(p, i int) bool {
	if c.ctx == 0 {
		return false
	}
	return bool(C.hl_should_select_another(c.lb, c.ctx, C.uint32_t(p), C.size_t(i)))
}
