package main

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

// cHosts is lbpolicy.Hosts over the ABI's callbacks. lb is Envoy's load
// balancer pointer, held as an integer (hashlb_abi.h says why).
type cHosts struct{ lb C.uintptr_t }

func (h *cHosts) Levels() int            { return int(C.hl_levels(h.lb)) }
func (h *cHosts) Count(p int) int        { return int(C.hl_hosts_count(h.lb, C.uint32_t(p))) }
func (h *cHosts) HealthyCount(p int) int { return int(C.hl_healthy_count(h.lb, C.uint32_t(p))) }
func (h *cHosts) Address(p, i int) string {
	return str(C.hl_host_address(h.lb, C.uint32_t(p), C.size_t(i)))
}
func (h *cHosts) HealthyAddress(p, i int) string {
	return str(C.hl_healthy_address(h.lb, C.uint32_t(p), C.size_t(i)))
}
func (h *cHosts) Weight(p, i int) int { return int(C.hl_host_weight(h.lb, C.uint32_t(p), C.size_t(i))) }
func (h *cHosts) Metadata(p, i int, key string) string {
	return str(C.hl_host_metadata(h.lb, C.uint32_t(p), C.size_t(i), strAddr(key), C.size_t(len(key))))
}
func (h *cHosts) ActiveRequests(p, i int) int64 {
	return int64(C.hl_host_active(h.lb, C.uint32_t(p), C.size_t(i)))
}

// strAddr is the address of s's bytes as an integer, for a C call that reads
// them during the call only; s must stay reachable until it returns (it is
// an argument of the caller, so it does).
func strAddr(s string) C.uintptr_t {
	return C.uintptr_t(uintptr(unsafe.Pointer(unsafe.StringData(s))))
}

// cContext is lbpolicy.Context over the ABI's context callbacks; ctx is 0
// outside a choice.
type cContext struct{ lb, ctx C.uintptr_t }

func (c *cContext) Header(name string, i int) (string, int) {
	if c.ctx == 0 {
		return "", 0
	}
	v := C.hl_request_header(c.ctx, strAddr(name), C.size_t(len(name)), C.size_t(i))
	return str(C.hl_buf{ptr: v.ptr, length: v.length}), int(v.total)
}

func (c *cContext) ShouldSelectAnotherHost(p, i int) bool {
	if c.ctx == 0 {
		return false
	}
	return bool(C.hl_should_select_another(c.lb, c.ctx, C.uint32_t(p), C.size_t(i)))
}
