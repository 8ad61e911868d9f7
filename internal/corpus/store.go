package corpus

import (
	"strings"
	"sync"

	"github.com/hashlb/hashlb/lbcore"
)

// MemStore is an lbcore.Store in memory with the rules of Envoy's shared
// data (lbcore.Store's comment): one cas counter for every key, a Set with
// cas 0 or on a missing key always writes, a non-zero cas must match, every
// write takes a new cas. It is an oracle's persistence table, for a test
// that decides with lbcore what a host with persistence must do. The zero
// value is empty and ready.
type MemStore struct {
	mu  sync.Mutex
	m   map[string]memValue
	cas uint32
}

type memValue struct {
	v   []byte
	cas uint32
}

// Get returns a copy of key's value and its cas, or lbcore.ErrNotFound.
func (s *MemStore) Get(key string) ([]byte, uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if !ok {
		return nil, 0, lbcore.ErrNotFound
	}
	return append([]byte(nil), v.v...), v.cas, nil
}

// Set writes value under key unless cas is non-zero and not key's
// (lbcore.ErrCASMismatch).
func (s *MemStore) Set(key string, value []byte, cas uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]memValue{}
	}
	if old, ok := s.m[key]; ok && cas != 0 && cas != old.cas {
		return lbcore.ErrCASMismatch
	}
	s.cas++
	if s.cas == 0 {
		s.cas = 1
	}
	// The key may be a string over a buffer lbcore reuses: copied.
	s.m[strings.Clone(key)] = memValue{append([]byte(nil), value...), s.cas}
	return nil
}
