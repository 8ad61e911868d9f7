// cache.c: the choice hook Envoy calls, in C: the cache first (cache.h),
// then Go (hl_go_choose_host, exports.go).
#include <stdlib.h>

#include "_cgo_export.h"
#include "cache.h"
#include "hashlb_abi.h"

hl_cache* hl_cache_new(uint32_t keylen, bool prefix, void* config, size_t counter) {
	hl_cache* c = calloc(1, sizeof(hl_cache));
	if (c != 0) {
		c->keylen = keylen < HL_CACHE_KEY ? keylen : HL_CACHE_KEY;
		c->prefix = prefix;
		c->config = config;
		c->counter = counter;
	}
	return c;
}

hl_lb* hl_lb_new(uintptr_t slot, hl_cache* cache) {
	hl_lb* l = calloc(1, sizeof(hl_lb));
	if (l != 0) {
		l->slot = slot;
		l->cache = cache;
	}
	return l;
}

void hl_lb_free(hl_lb* l) {
	if (l != 0) {
		free(l->cache);
		free(l);
	}
}

bool envoy_dynamic_module_on_lb_choose_host(void* lb, void* mod, void* ctx, uint32_t* priority, uint32_t* index) {
	hl_lb* l = mod;
	hl_cache* c = l != 0 ? l->cache : 0;
	if (c != 0 && c->gen != 0 && hl_healthy_count((uintptr_t)lb, 0) == c->healthy_count) {
		static const char path[] = ":path";
		hl_value v = hl_request_header((uintptr_t)ctx, (uintptr_t)path, sizeof path - 1, 0);
		size_t n = v.length;
		if (hl_cache_key(c, v.ptr, &n)) {
			const hl_entry* e = hl_cache_get(c, v.ptr, n, hl_cache_hash(v.ptr, n));
			if (e != 0 && !hl_should_select_another((uintptr_t)lb, (uintptr_t)ctx, 0, e->host)) {
				if (++c->hits == HL_CACHE_FLUSH && c->config != 0) {
					hl_increment(c->config, c->counter, c->hits);
					c->hits = 0;
				}
				*priority = 0;
				*index = e->healthy;
				return true;
			}
		}
	}
	return hl_go_choose_host(lb, mod, ctx, priority, index);
}
