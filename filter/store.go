package main

import (
	"errors"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// sharedStore is lbcore.Store over the host's shared data
// (proxy_get_shared_data / proxy_set_shared_data): one key space for every
// worker VM of the proxy with the same vm_id.
type sharedStore struct{}

// Get implements lbcore.Store.
func (sharedStore) Get(key string) ([]byte, uint32, error) {
	v, cas, err := getSharedData(key)
	if errors.Is(err, types.ErrorStatusNotFound) {
		return nil, 0, lbcore.ErrNotFound
	}
	return v, cas, err
}

// Set implements lbcore.Store.
func (sharedStore) Set(key string, value []byte, cas uint32) error {
	err := proxywasm.SetSharedData(key, value, cas)
	if errors.Is(err, types.ErrorStatusCasMismatch) {
		return lbcore.ErrCASMismatch
	}
	return err
}
