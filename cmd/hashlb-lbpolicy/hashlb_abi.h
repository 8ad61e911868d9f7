// hashlb_abi.h: the part of Envoy's dynamic-module ABI hashlb-lbpolicy uses,
// in the module's own words (abi.go says which Envoy it follows).
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

// Host set callbacks: lb is the worker's load balancer, priority 0.
void envoy_dynamic_module_callback_lb_get_cluster_name(void* lb, hl_buf* result);
size_t envoy_dynamic_module_callback_lb_get_hosts_count(void* lb, uint32_t priority);
size_t envoy_dynamic_module_callback_lb_get_healthy_hosts_count(void* lb, uint32_t priority);
bool envoy_dynamic_module_callback_lb_get_host_address(void* lb, uint32_t priority, size_t index, hl_buf* result);
bool envoy_dynamic_module_callback_lb_get_healthy_host_address(void* lb, uint32_t priority, size_t index, hl_buf* result);
uint32_t envoy_dynamic_module_callback_lb_get_host_weight(void* lb, uint32_t priority, size_t index);
int envoy_dynamic_module_callback_lb_get_host_health(void* lb, uint32_t priority, size_t index);
// envoy_dynamic_module_type_host_health in 1.40.0: Envoy's Host::Health
// order (unhealthy, degraded, healthy). Seen in the binary: a host failing
// its active health check reads 0, a passing one 2.
#define HL_UNHEALTHY 0
#define HL_DEGRADED 1
#define HL_HEALTHY 2
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

// Wrappers that return buffers by value, so Go passes no pointer of its own.
static inline hl_buf hl_cluster_name(void* lb) {
	hl_buf b = {0, 0};
	envoy_dynamic_module_callback_lb_get_cluster_name(lb, &b);
	return b;
}
static inline hl_buf hl_host_address(void* lb, size_t i) {
	hl_buf b = {0, 0};
	envoy_dynamic_module_callback_lb_get_host_address(lb, 0, i, &b);
	return b;
}
static inline hl_buf hl_healthy_address(void* lb, size_t i) {
	hl_buf b = {0, 0};
	envoy_dynamic_module_callback_lb_get_healthy_host_address(lb, 0, i, &b);
	return b;
}
static inline hl_buf hl_host_metadata(void* lb, size_t i, const char* key, size_t key_len) {
	hl_buf filter = {"hashlb", 6};
	hl_buf k = {key, key_len};
	hl_buf b = {0, 0};
	if (!envoy_dynamic_module_callback_lb_get_host_metadata_string(lb, 0, i, filter, k, &b)) {
		b.ptr = 0;
		b.length = 0;
	}
	return b;
}
typedef struct { const char* ptr; size_t length; size_t total; } hl_value;
static inline hl_value hl_request_header(void* ctx, const char* key, size_t key_len, size_t index) {
	hl_buf k = {key, key_len};
	hl_buf b = {0, 0};
	size_t total = 0;
	hl_value v = {0, 0, 0};
	if (envoy_dynamic_module_callback_lb_context_get_downstream_header(ctx, k, &b, index, &total)) {
		v.ptr = b.ptr;
		v.length = b.length;
	}
	v.total = total;
	return v;
}
static inline uint64_t hl_host_active(void* lb, size_t i) {
	return envoy_dynamic_module_callback_lb_get_host_stat(lb, 0, i, HL_STAT_RQ_ACTIVE);
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
static inline void hl_increment(void* config, size_t id) {
	envoy_dynamic_module_callback_lb_config_increment_counter(config, id, 0, 0, 1);
}

#endif
