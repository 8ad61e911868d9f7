// lbfloor.c: the floor of a load-balancing policy in an Envoy dynamic
// module, for BenchmarkEnvoyLBPolicyPaired: written in C (no Go runtime),
// it reads the request's :path through the same ABI callback hashlb's policy
// uses, hashes it (FNV-1a) and returns that modulo the healthy hosts. What
// the benchmark's row of it costs beyond ring_hash is what Envoy's dynamic
// module mechanism costs any policy; what hashlb's row costs beyond it is
// hashlb's (its Go runtime, cgo and decision). The declarations are
// internal/lbpolicy/abi/hashlb_abi.h's (the ABI of Envoy 1.40.0).
#include "hashlb_abi.h"

static char config_cell, lb_cell;

const char* envoy_dynamic_module_on_program_init(void) { return "v0.2.0"; }

void* envoy_dynamic_module_on_lb_config_new(void* config, hl_buf name, hl_buf data) {
	(void)config, (void)name, (void)data;
	return &config_cell;
}

void envoy_dynamic_module_on_lb_config_destroy(void* config) { (void)config; }

void* envoy_dynamic_module_on_lb_new(void* config, void* lb) {
	(void)config, (void)lb;
	return &lb_cell;
}

bool envoy_dynamic_module_on_lb_choose_host(void* lb, void* mod, void* ctx, uint32_t* priority, uint32_t* index) {
	(void)mod;
	size_t n = hl_healthy_count((uintptr_t)lb, 0);
	if (n == 0) {
		return false;
	}
	static const char path[] = ":path";
	hl_value v = hl_request_header((uintptr_t)ctx, (uintptr_t)path, sizeof path - 1, 0);
	uint64_t h = 14695981039346656037ull;
	for (size_t i = 0; i < v.length; i++) {
		h = (h ^ (unsigned char)v.ptr[i]) * 1099511628211ull;
	}
	*priority = 0;
	*index = (uint32_t)(h % n);
	return true;
}

void envoy_dynamic_module_on_lb_on_host_membership_update(void* lb, void* mod, size_t added, size_t removed) {
	(void)lb, (void)mod, (void)added, (void)removed;
}

void envoy_dynamic_module_on_lb_destroy(void* mod) { (void)mod; }
