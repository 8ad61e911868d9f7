package lbcore

import (
	"strings"
	"sync"
)

// MemStore is an in-memory Store with exactly the semantics of Envoy's host
// (proxy-wasm-cpp-host SharedData): Set with cas 0 always writes, a non-zero
// cas must match the key's current one, a Set on a missing key writes
// whatever the cas, keys are never deleted, and every successful Set takes
// the next value of one counter shared by all keys (starting at 1, skipping
// 0 when it wraps), so a cas value names one write of one key. It is safe for
// concurrent use. Tests and benchmarks use it in place of the host.
//
// Get returns the stored slice itself, not a copy (values are replaced on
// Set, never modified in place): callers must not modify it. Set copies the
// value and, when it adds a key, the key.
type MemStore struct {
	// BeforeSet, if non-nil, runs at the start of every Set, before the store
	// is locked, with Set's arguments. Tests use it to interleave another
	// worker's operations between a Get and the Set that follows it. Set it
	// before the store is shared.
	BeforeSet func(key string, value []byte, cas uint32)

	mu     sync.Mutex
	m      map[string]*memValue
	cas    uint32
	gets   uint64
	sets   uint64
	misses uint64
}

type memValue struct {
	value []byte
	cas   uint32
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{m: make(map[string]*memValue), cas: 1}
}

// Get returns the value and cas stored under key, or ErrNotFound.
func (s *MemStore) Get(key string) ([]byte, uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	v, ok := s.m[key]
	if !ok {
		return nil, 0, ErrNotFound
	}
	return v.value, v.cas, nil
}

// Set writes value under key unless cas is non-zero and the key exists with
// another cas, in which case it returns ErrCASMismatch.
func (s *MemStore) Set(key string, value []byte, cas uint32) error {
	if s.BeforeSet != nil {
		s.BeforeSet(key, value, cas)
	}
	value = append([]byte(nil), value...)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sets++
	v, ok := s.m[key]
	switch {
	case !ok:
		// A map assignment stores the key it is given, even over an existing
		// one, and the caller may pass a string backed by a buffer it reuses:
		// keys are cloned once, and existing values are updated in place.
		v = &memValue{}
		s.m[strings.Clone(key)] = v
	case cas != 0 && cas != v.cas:
		s.misses++
		return ErrCASMismatch
	}
	v.value, v.cas = value, s.nextCAS()
	return nil
}

// nextCAS returns the counter's value and advances it, skipping 0, as
// cpp-host's SharedData::nextCas does.
func (s *MemStore) nextCAS() uint32 {
	c := s.cas
	s.cas++
	if s.cas == 0 {
		s.cas++
	}
	return c
}

// Len returns the number of keys stored.
func (s *MemStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// Range calls f for every key with its value and cas, in no particular order,
// until f returns false. f must not call the store.
func (s *MemStore) Range(f func(key string, value []byte, cas uint32) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.m {
		if !f(k, v.value, v.cas) {
			return
		}
	}
}

// Bytes returns the memory the host would hold for the store's contents,
// estimated as key bytes + value bytes + overheadPerKey for every key.
func (s *MemStore) Bytes(overheadPerKey int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, v := range s.m {
		n += len(k) + len(v.value) + overheadPerKey
	}
	return n
}

// MemStoreStats counts the calls a MemStore has served.
type MemStoreStats struct {
	// Gets is the number of Get calls.
	Gets uint64
	// Sets is the number of Set calls, failed ones included.
	Sets uint64
	// Mismatches is the number of Set calls that returned ErrCASMismatch.
	Mismatches uint64
}

// Stats returns the call counts so far.
func (s *MemStore) Stats() MemStoreStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return MemStoreStats{Gets: s.gets, Sets: s.sets, Mismatches: s.misses}
}

// SetNextCAS sets the cas the next successful Set will take (0 is taken as
// 1). Tests use it to reach the counter's wrap-around.
func (s *MemStore) SetNextCAS(c uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c == 0 {
		c = 1
	}
	s.cas = c
}
