// cache.h: the choice cache, in C, of one worker's load balancer.
//
// When every choice of the policy is a stateless function of the request's
// :path (internal/lbpolicy Policy.PathKey: a hash method reading the path
// only, no persistence, bounded load or session), a choice lbcore made is
// remembered under the :path's key, and the next request with that key gets
// it without entering Go, as long as the worker's view of the hosts
// (generation and healthy count, which Go bumps on every update and health
// rescan) is the one it was made under and Envoy's retry predicate does not
// reject the host. A miss, anything else, and every retry walk go to Go.
//
// A change of the view does not forget every choice: Go walks the entries
// (Cache.Carry) and keeps, under the new generation and at the host's new
// indices, each choice that is still lbcore's. Rendezvous hashing scores a
// host by the key and the host alone, so a change moves a key only when its
// host is no longer served (removed, unhealthy, or at a level not served)
// or a host newly served (added, or healthy again) outranks it for that
// key; internal/lbpolicy's Worker.CarryFrom decides which, from the key's
// bytes. A change it cannot judge that way (a weight changed, the level
// served is not priority 0, a host ramping up in slow start, more than a
// few hosts newly served) keeps nothing, and the entries go stale as
// before.
// Entering Go costs a Go runtime's callback, which the paired benchmark
// shows is what the policy costs beyond Envoy's own load balancers.
#ifndef HASHLB_CACHE_H
#define HASHLB_CACHE_H
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

// HL_CACHE_KEY is the longest key kept (Go reads it as CacheKeyMax, and
// cmd/hashlb-lbpolicy checks at compile time that internal/lbpolicy's
// PathKeyMax is the same);
// HL_CACHE_BITS the log2 of the entries, in sets of HL_CACHE_WAYS: a key's
// set is its hash's, and a new key takes a set's empty or stale entry, else
// the front one, the others moving back by one (the oldest key leaves).
// Sets of four, not two: in sets of two, three keys meeting on one set
// miss by collisions alone, which sets of four in the same memory avoid
// (docs/performance.md, "hashlb as Envoy's load-balancing policy").
#define HL_CACHE_KEY 96
#define HL_CACHE_BITS 13
#define HL_CACHE_WAYS 4

typedef struct {
	uint32_t gen;     // the cache's gen when stored; 0: empty
	uint32_t len;     // key length
	uint32_t host;    // the host's index among all hosts (the retry predicate's)
	uint32_t healthy; // its index among the healthy hosts (the answer)
	uint64_t hash;
	char key[HL_CACHE_KEY];
} hl_entry;

typedef struct {
	uint32_t gen;           // Go's view of the hosts (Worker.View); 0: none yet
	uint32_t healthy_count; // the healthy hosts of that view
	uint32_t keylen;        // how many bytes of :path decide
	bool prefix;            // a longer :path is decided by its first keylen bytes
	uint64_t hits;          // choices answered here, not yet added to Envoy's counter
	void* config;           // the counter's owner (the policy's config), NULL: not counted
	size_t counter;         // its id
	hl_entry entries[1 << HL_CACHE_BITS];
} hl_cache;

// HL_CACHE_FLUSH hits are added to Envoy's counter at once from C (Go adds
// the rest when the worker next enters Go): a worker the cache answers
// every time may not enter Go for minutes.
#define HL_CACHE_FLUSH 256

// hl_lb is what Envoy holds for one load balancer: the Go state's slot
// (states.go) and its cache (NULL when choices cannot be remembered).
typedef struct {
	uintptr_t slot;
	hl_cache* cache;
} hl_lb;

// hl_cache_key cuts a :path to the cache's key; false when it has none.
static inline bool hl_cache_key(const hl_cache* c, const char* p, size_t* n) {
	if (p == 0 || *n == 0) {
		return false;
	}
	if (*n > c->keylen) {
		if (!c->prefix) {
			return false;
		}
		*n = c->keylen;
	}
	return true;
}

// hl_cache_hash is FNV-1a over the key.
static inline uint64_t hl_cache_hash(const char* p, size_t n) {
	uint64_t h = 14695981039346656037ull;
	for (size_t i = 0; i < n; i++) {
		h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
	}
	return h;
}

// hl_cache_set is the first of the HL_CACHE_WAYS entries of hash h's set.
static inline hl_entry* hl_cache_set(hl_cache* c, uint64_t h) {
	return &c->entries[h & ((1u << HL_CACHE_BITS) - HL_CACHE_WAYS)];
}

// hl_cache_same reports whether e holds the key (n bytes at p, hashed h)
// under the cache's current view.
static inline bool hl_cache_same(const hl_cache* c, const hl_entry* e, const char* p, size_t n, uint64_t h) {
	return e->gen == c->gen && e->hash == h && e->len == n && memcmp(e->key, p, n) == 0;
}

// hl_cache_get is the choice remembered for the key (n bytes at p, hashed
// h) under the current view, or NULL.
static inline const hl_entry* hl_cache_get(hl_cache* c, const char* p, size_t n, uint64_t h) {
	hl_entry* e = hl_cache_set(c, h);
	for (int i = 0; i < HL_CACHE_WAYS; i++, e++) {
		if (hl_cache_same(c, e, p, n, h)) {
			return e;
		}
	}
	return 0;
}

// hl_cache_put remembers a choice for the :path key of p (n bytes).
static inline void hl_cache_put(uintptr_t cache, uintptr_t p, size_t n, uint32_t host, uint32_t healthy) {
	hl_cache* c = (hl_cache*)cache;
	const char* key = (const char*)p;
	if (!hl_cache_key(c, key, &n)) {
		return;
	}
	uint64_t h = hl_cache_hash(key, n);
	hl_entry* set = hl_cache_set(c, h);
	hl_entry* e = (hl_entry*)hl_cache_get(c, key, n, h); // the key's own
	for (int i = 0; i < HL_CACHE_WAYS && e == 0; i++) {
		if (set[i].gen != c->gen) {
			e = &set[i]; // empty or stale
		}
	}
	if (e == 0) { // full: the others move back by one, the oldest leaves
		memmove(&set[1], &set[0], (HL_CACHE_WAYS - 1) * sizeof set[0]);
		e = &set[0];
	}
	e->gen = c->gen;
	e->len = (uint32_t)n;
	e->host = host;
	e->healthy = healthy;
	e->hash = h;
	memcpy(e->key, key, n);
}

// hl_cache_new allocates an empty cache, hl_lb_new the cell Envoy keeps.
hl_cache* hl_cache_new(uint32_t keylen, bool prefix, void* config, size_t counter);
hl_lb* hl_lb_new(uintptr_t slot, hl_cache* cache);
void hl_lb_free(hl_lb* l);

#endif
