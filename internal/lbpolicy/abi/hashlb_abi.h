// hashlb_abi.h: the part of Envoy's dynamic-module ABI hashlb's policy uses,
// in the binding's own words. It follows Envoy 1.38.3, the oldest Envoy
// supported (commit 0ebfcfe5b0484b89ca85b761da9e05ce75dbda8d, whose
// source/extensions/load_balancing_policies/dynamic_modules/abi_impl.cc
// defines these callbacks); abi.go says why, and how 1.39 and 1.40 compare.
#ifndef HASHLB_ABI_H
#define HASHLB_ABI_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// A buffer: envoy_dynamic_module_type_envoy_buffer and _module_buffer.
typedef struct { const char* ptr; size_t length; } hl_buf;

// Common callbacks.
void envoy_dynamic_module_callback_log(int level, hl_buf message);

// Load-balancer configuration callbacks (main thread, during on_lb_config_new
// for the definitions).
int envoy_dynamic_module_callback_lb_config_define_counter(void* config, hl_buf name, hl_buf* labels, size_t n_labels, size_t* id);
int envoy_dynamic_module_callback_lb_config_increment_counter(void* config, size_t id, hl_buf* labels, size_t n_labels, uint64_t value);

// Host set callbacks: lb is the worker's load balancer.
void envoy_dynamic_module_callback_lb_get_cluster_name(void* lb, hl_buf* result);
size_t envoy_dynamic_module_callback_lb_get_priority_set_size(void* lb);
size_t envoy_dynamic_module_callback_lb_get_hosts_count(void* lb, uint32_t priority);
size_t envoy_dynamic_module_callback_lb_get_healthy_hosts_count(void* lb, uint32_t priority);
bool envoy_dynamic_module_callback_lb_get_host_address(void* lb, uint32_t priority, size_t index, hl_buf* result);
bool envoy_dynamic_module_callback_lb_get_healthy_host_address(void* lb, uint32_t priority, size_t index, hl_buf* result);
uint32_t envoy_dynamic_module_callback_lb_get_host_weight(void* lb, uint32_t priority, size_t index);
// The module reads no host's health flags (envoy_dynamic_module_callback_lb_get_host_health):
// they are live, while the healthy hosts above are the worker's snapshot, the
// list Envoy's answer indexes (docs/deploy.md, "What the policy sees of health").
uint64_t envoy_dynamic_module_callback_lb_get_host_stat(void* lb, uint32_t priority, size_t index, int stat);
bool envoy_dynamic_module_callback_lb_get_host_metadata_string(void* lb, uint32_t priority, size_t index, hl_buf filter_name, hl_buf key, hl_buf* result);

// Request callbacks: ctx is the LoadBalancerContext of one choice.
// The index-th value of header key, and (in *total) how many it has.
bool envoy_dynamic_module_callback_lb_context_get_downstream_header(void* ctx, hl_buf key, hl_buf* result, size_t index, size_t* total);
bool envoy_dynamic_module_callback_lb_context_should_select_another_host(void* lb, void* ctx, uint32_t priority, size_t index);

// The host stat of rq_active (envoy_dynamic_module_type_host_stat_RqActive:
// after cx_connect_fail, cx_total, rq_error, rq_success, rq_timeout,
// rq_total, cx_active).
#define HL_STAT_RQ_ACTIVE 7

// Wrappers for the calls a choice and an update make. They take Envoy's
// pointers as integers (uintptr_t, as Go holds them) and return buffers by
// value: Go then passes no pointer to C, so cgo checks none of the
// arguments (a pointer argument costs a lookup in Go's heap on every call).
// p is a priority level.
#define HL_LB(lb) ((void*)(lb))
static inline size_t hl_levels(uintptr_t lb) {
	return envoy_dynamic_module_callback_lb_get_priority_set_size(HL_LB(lb));
}
static inline size_t hl_hosts_count(uintptr_t lb, uint32_t p) {
	return envoy_dynamic_module_callback_lb_get_hosts_count(HL_LB(lb), p);
}
static inline size_t hl_healthy_count(uintptr_t lb, uint32_t p) {
	return envoy_dynamic_module_callback_lb_get_healthy_hosts_count(HL_LB(lb), p);
}
static inline uint32_t hl_host_weight(uintptr_t lb, uint32_t p, size_t i) {
	return envoy_dynamic_module_callback_lb_get_host_weight(HL_LB(lb), p, i);
}
static inline hl_buf hl_cluster_name(uintptr_t lb) {
	hl_buf b = {0, 0};
	envoy_dynamic_module_callback_lb_get_cluster_name(HL_LB(lb), &b);
	return b;
}
static inline hl_buf hl_host_address(uintptr_t lb, uint32_t p, size_t i) {
	hl_buf b = {0, 0};
	envoy_dynamic_module_callback_lb_get_host_address(HL_LB(lb), p, i, &b);
	return b;
}
static inline hl_buf hl_healthy_address(uintptr_t lb, uint32_t p, size_t i) {
	hl_buf b = {0, 0};
	envoy_dynamic_module_callback_lb_get_healthy_host_address(HL_LB(lb), p, i, &b);
	return b;
}
static inline hl_buf hl_host_metadata(uintptr_t lb, uint32_t p, size_t i, uintptr_t key, size_t key_len) {
	hl_buf filter = {"hashlb", 6};
	hl_buf k = {(const char*)key, key_len};
	hl_buf b = {0, 0};
	if (!envoy_dynamic_module_callback_lb_get_host_metadata_string(HL_LB(lb), p, i, filter, k, &b)) {
		b.ptr = 0;
		b.length = 0;
	}
	return b;
}
typedef struct { const char* ptr; size_t length; size_t total; } hl_value;
// key points at Go memory that outlives the call (a header name of the
// configuration); Envoy reads it during the call only.
static inline hl_value hl_request_header(uintptr_t ctx, uintptr_t key, size_t key_len, size_t index) {
	hl_buf k = {(const char*)key, key_len};
	hl_buf b = {0, 0};
	size_t total = 0;
	hl_value v = {0, 0, 0};
	if (envoy_dynamic_module_callback_lb_context_get_downstream_header(HL_LB(ctx), k, &b, index, &total)) {
		v.ptr = b.ptr;
		v.length = b.length;
	}
	v.total = total;
	return v;
}
static inline bool hl_should_select_another(uintptr_t lb, uintptr_t ctx, uint32_t p, size_t i) {
	return envoy_dynamic_module_callback_lb_context_should_select_another_host(HL_LB(lb), HL_LB(ctx), p, i);
}
static inline uint64_t hl_host_active(uintptr_t lb, uint32_t p, size_t i) {
	return envoy_dynamic_module_callback_lb_get_host_stat(HL_LB(lb), p, i, HL_STAT_RQ_ACTIVE);
}
static inline void hl_log(int level, const char* msg, size_t len) {
	hl_buf b = {msg, len};
	envoy_dynamic_module_callback_log(level, b);
}
typedef struct { size_t id; int result; } hl_counter;
static inline hl_counter hl_define_counter(void* config, const char* name, size_t len) {
	hl_buf b = {name, len};
	hl_counter c = {0, 0};
	c.result = envoy_dynamic_module_callback_lb_config_define_counter(config, b, 0, 0, &c.id);
	return c;
}
// hl_pin makes the library never unload (pin.c).
void hl_pin(void);
static inline void hl_increment(void* config, size_t id, uint64_t n) {
	envoy_dynamic_module_callback_lb_config_increment_counter(config, id, 0, 0, n);
}

#endif
