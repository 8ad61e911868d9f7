package main

/*
#include "hashlb_abi.h"
*/
import "C"

import (
	"unsafe"

	"github.com/hashlb/hashlb/internal/lbpolicy"
)

// str views an Envoy buffer as a string, without copying: valid until the
// hook returns.
func str(b C.hl_buf) string {
	if b.ptr == nil || b.length == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Pointer(b.ptr)), int(b.length))
}

// cHosts is lbpolicy.Hosts over the ABI's callbacks, priority 0.
type cHosts struct{ lb unsafe.Pointer }

func (h *cHosts) Count() int {
	return int(C.envoy_dynamic_module_callback_lb_get_hosts_count(h.lb, 0))
}
func (h *cHosts) HealthyCount() int {
	return int(C.envoy_dynamic_module_callback_lb_get_healthy_hosts_count(h.lb, 0))
}
func (h *cHosts) Address(i int) string        { return str(C.hl_host_address(h.lb, C.size_t(i))) }
func (h *cHosts) HealthyAddress(i int) string { return str(C.hl_healthy_address(h.lb, C.size_t(i))) }
func (h *cHosts) Weight(i int) int {
	return int(C.envoy_dynamic_module_callback_lb_get_host_weight(h.lb, 0, C.size_t(i)))
}
func (h *cHosts) Health(i int) lbpolicy.Health {
	switch C.envoy_dynamic_module_callback_lb_get_host_health(h.lb, 0, C.size_t(i)) {
	case C.HL_HEALTHY:
		return lbpolicy.Healthy
	case C.HL_DEGRADED:
		return lbpolicy.Degraded
	}
	return lbpolicy.Unhealthy
}
func (h *cHosts) Metadata(i int, key string) string {
	return str(C.hl_host_metadata(h.lb, C.size_t(i), (*C.char)(unsafe.Pointer(unsafe.StringData(key))), C.size_t(len(key))))
}
func (h *cHosts) ActiveRequests(i int) int64 { return int64(C.hl_host_active(h.lb, C.size_t(i))) }

// cContext is lbpolicy.Context over the ABI's context callbacks.
type cContext struct{ lb, ctx unsafe.Pointer }

func (c *cContext) Header(name string, i int) (string, int) {
	if c.ctx == nil {
		return "", 0
	}
	v := C.hl_request_header(c.ctx, (*C.char)(unsafe.Pointer(unsafe.StringData(name))), C.size_t(len(name)), C.size_t(i))
	return str(C.hl_buf{ptr: v.ptr, length: v.length}), int(v.total)
}

func (c *cContext) ShouldSelectAnotherHost(i int) bool {
	if c.ctx == nil {
		return false
	}
	return bool(C.envoy_dynamic_module_callback_lb_context_should_select_another_host(c.lb, c.ctx, 0, C.size_t(i)))
}
