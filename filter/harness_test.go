//go:build !wasip1

package main

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// Every filter test runs twice: natively (the plugin's Go code in this test
// binary, under the SDK's host emulator) and against the compiled module
// dist/hashlb.wasm, run by the SDK's own wazero runner
// (proxytest.NewWasmVMContext), a host we did not write.

var (
	wasmOnce  sync.Once
	wasmBytes []byte
	wasmErr   error
)

// wasmModule returns dist/hashlb.wasm. When it is missing the test skips
// locally and fails under CI (CI=true), where ./build.sh test builds it first.
func wasmModule(t *testing.T) []byte {
	t.Helper()
	wasmOnce.Do(func() {
		wasmBytes, wasmErr = os.ReadFile(filepath.Join("..", "dist", "hashlb.wasm"))
	})
	if wasmErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("dist/hashlb.wasm is required under CI: %v (run ./build.sh wasm)", wasmErr)
		}
		t.Skipf("dist/hashlb.wasm missing (%v): run ./build.sh wasm", wasmErr)
	}
	return wasmBytes
}

// host is one configured plugin under the SDK emulator.
type host struct {
	proxytest.HostEmulator
	t       *testing.T
	started types.OnPluginStartStatus
}

// eachRunner runs f natively and against the compiled module.
// newHost starts a plugin with config for test t; the SDK's emulator is
// global, so one test holds one host at a time, released at t's cleanup.
type newHostFunc func(t *testing.T, config string) *host

func eachRunner(t *testing.T, f func(t *testing.T, newHost newHostFunc)) {
	t.Run("native", func(t *testing.T) {
		f(t, func(t *testing.T, config string) *host { return startHost(t, &vmContext{}, config) })
	})
	t.Run("wasm", func(t *testing.T) {
		wasm := wasmModule(t)
		f(t, func(t *testing.T, config string) *host {
			vm, err := proxytest.NewWasmVMContext(wasm)
			if err != nil {
				t.Fatalf("NewWasmVMContext: %v", err)
			}
			t.Cleanup(func() { vm.Close() })
			return startHost(t, vm, config)
		})
	})
}

func startHost(t *testing.T, vm types.VMContext, config string) *host {
	t.Helper()
	opt := proxytest.NewEmulatorOption().WithVMContext(vm).WithPluginConfiguration([]byte(config))
	h, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(reset)
	if st := h.StartVM(); st != types.OnVMStartStatusOK {
		t.Fatalf("StartVM = %v", st)
	}
	return &host{HostEmulator: h, t: t, started: h.StartPlugin()}
}

// result is what one request left behind.
type result struct {
	action   types.Action
	headers  [][2]string // request headers after the filter
	local    *proxytest.LocalHttpResponse
	response [][2]string // response headers after the filter
}

// get returns every value of name (exact, lower-case) in headers.
func get(headers [][2]string, name string) []string {
	var out []string
	for _, kv := range headers {
		if kv[0] == name {
			out = append(out, kv[1])
		}
	}
	return out
}

// request runs one whole stream: request headers (with source and
// destination addresses as Envoy properties), response headers, done.
func (h *host) request(src, dst string, headers ...[2]string) result {
	h.t.Helper()
	if src != "" {
		if err := h.SetProperty([]string{"source", "address"}, []byte(src)); err != nil {
			h.t.Fatal(err)
		}
	}
	if dst != "" {
		if err := h.SetProperty([]string{"destination", "address"}, []byte(dst)); err != nil {
			h.t.Fatal(err)
		}
	}
	id := h.InitializeHttpContext()
	var r result
	r.action = h.CallOnRequestHeaders(id, headers, true)
	r.headers = h.GetCurrentRequestHeaders(id)
	r.local = h.GetSentLocalResponse(id)
	h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
	r.response = h.GetCurrentResponseHeaders(id)
	h.CompleteHttpContext(id)
	return r
}

// counter returns a counter's value after a tick: the module counts requests
// in the worker and gives the host the counts on the tick (metrics.flush), so
// the host's values are exact after one.
func (h *host) counter(name string) uint64 {
	h.t.Helper()
	h.Tick()
	n, _ := h.GetCounterMetric(name) // an error: never incremented
	return n
}

// gauge is counter for a gauge.
func (h *host) gauge(name string) uint64 {
	h.t.Helper()
	h.Tick()
	n, _ := h.GetGaugeMetric(name)
	return n
}
