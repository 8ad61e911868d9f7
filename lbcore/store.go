package lbcore

import "errors"

// ErrNotFound is returned by Store.Get for a key that was never written.
var ErrNotFound = errors.New("not found")

// ErrCASMismatch is returned by Store.Set when cas is non-zero and does not
// match the key's current version.
var ErrCASMismatch = errors.New("cas mismatch")

// Store is the host's shared data as proxy-wasm defines it
// (proxy_get_shared_data / proxy_set_shared_data, ABI 0.2.1): one key space
// shared by every worker VM of a proxy process, values versioned by a cas.
//
// Semantics follow Envoy's host (proxy-wasm-cpp-host SharedData): Set with
// cas 0 always writes; Set with a non-zero cas that differs from the current
// one fails with ErrCASMismatch; a Set on a key that does not exist writes
// whatever cas is given, so CAS cannot guard the creation of a key. Keys
// cannot be deleted.
type Store interface {
	// Get returns the value and its cas, or ErrNotFound.
	Get(key string) (value []byte, cas uint32, err error)
	// Set writes value if cas is 0 or matches, else returns ErrCASMismatch.
	Set(key string, value []byte, cas uint32) error
}
