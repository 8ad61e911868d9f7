package lbcore

import "errors"

// createKey writes value under key only if key is still missing, using
// marker, a key of the caller's namespace whose value carries nothing, as the
// guard; it returns ErrCASMismatch if another writer created key first.
//
// A Set on a missing key writes whatever the cas, and a Set with cas 0 on an
// existing key overwrites it: two workers that both saw the key missing would
// both write, and a late blind write would wipe what the other had stored.
// So the create uses a cas that cannot be the key's: the host draws every
// cas from one counter for all keys (cpp-host src/shared_data.cc,
// SharedData::set, nextCas()), and the cas just given to a write of the
// marker belongs to that write, not to any write of key (unless the counter
// wraps, 2^32 writes, between the two). If key is still missing the Set
// creates it; if another worker created it, the Set fails with
// ErrCASMismatch. The cost is one Set and one Get of the marker.
//
// The marker is written with cas 0, which cpp-host always accepts. The SDK's
// proxytest emulator refuses cas 0 on an existing key; there the marker is
// written once more with the cas just read. A guard that only works on one
// host would be a trap.
func createKey(st Store, marker, key string, value []byte) error {
	mark := markerByte[:]
	err := st.Set(marker, mark, 0)
	if errors.Is(err, ErrCASMismatch) {
		_, mcas, gerr := st.Get(marker)
		if gerr != nil {
			return gerr
		}
		err = st.Set(marker, mark, mcas)
	}
	if err != nil {
		return err
	}
	_, guard, err := st.Get(marker)
	if err != nil {
		return err
	}
	return st.Set(key, value, guard)
}

// markerByte is a guard marker's value: one byte, since some hosts' SDKs
// cannot pass an empty value.
var markerByte = [1]byte{1}

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
//
// Exported as what EnablePersistence, NewTable, NewHealthBoard and
// NewLoadBoard take: the filter's shared data implements it.
type Store interface {
	// Get returns the value and its cas, or ErrNotFound.
	Get(key string) (value []byte, cas uint32, err error)
	// Set writes value if cas is 0 or matches, else returns ErrCASMismatch.
	Set(key string, value []byte, cas uint32) error
}
