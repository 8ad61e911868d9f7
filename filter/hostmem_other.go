//go:build !wasip1

package main

import (
	"strings"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
)

// Outside Wasm (the SDK's native test host) the host's copies are ordinary
// Go memory: hostmem_wasip1.go holds the module's arena.

func arenaStart() {}
func arenaStop()  {}

// appendRequestHeaders appends to dst every request header line named in
// names (headerNamed), in order.
func appendRequestHeaders(dst [][2]string, names []string) ([][2]string, error) {
	all, err := proxywasm.GetHttpRequestHeaders()
	if err != nil {
		return dst, err
	}
	for _, h := range all {
		if headerNamed(names, h[0]) {
			dst = append(dst, h)
		}
	}
	return dst, nil
}

// getRequestHeader is proxywasm.GetHttpRequestHeader.
func getRequestHeader(name string) (string, error) { return proxywasm.GetHttpRequestHeader(name) }

// getResponseHeader is proxywasm.GetHttpResponseHeader.
func getResponseHeader(name string) (string, error) { return proxywasm.GetHttpResponseHeader(name) }

// getProperty is proxywasm.GetProperty for a path serialised with NULs
// between its segments.
func getProperty(path string) (string, error) {
	v, err := proxywasm.GetProperty(strings.Split(path, "\x00"))
	return string(v), err
}

// getSharedData is proxywasm.GetSharedData.
func getSharedData(key string) ([]byte, uint32, error) { return proxywasm.GetSharedData(key) }

// callForeign is proxywasm.CallForeignFunction, its result dropped.
func callForeign(name string, args []byte) error {
	_, err := proxywasm.CallForeignFunction(name, args)
	return err
}
