package main

import (
	"math/rand/v2"
	"runtime/debug"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	debug.SetGCPercent(gcPercent)
	proxywasm.SetVMContext(&vmContext{})
}

// gcPercent is the module's GOGC. The request path of the hash methods
// allocates nothing (e2e/guestmem_test.go), so what the collector sees is
// the garbage of rarer work: the tick, health checks, hostile inputs
// (token functions such as jwt, oversized header maps), debugHeader's first
// texts. With Go's default of 100 the heap of every worker VM grows by at
// least 4 MiB of such garbage before a first cycle; 25 keeps it to a quarter
// of that, which costs more cycles only where garbage is made.
const gcPercent = 25

// abiVersion marks the module as proxy-wasm ABI 0.2.1. The SDK exports only
// proxy_abi_version_0_2_100, a Higress marker that upstream Envoy refuses
// ("Missing or unknown Proxy-Wasm ABI version"); proxy-wasm-cpp-host accepts
// 0_1_0, 0_2_0 and 0_2_1 (src/bytecode_util.cc; docs/envoy-host.md#loading).
//
//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

// vmContext is the VM: one per proxy worker thread. Envoy keeps the VM when
// a plugin's configuration changes (the same vm_id, VM configuration and
// code) and starts a new plugin context in it, while the old one lives on
// until its streams end (docs/envoy-host.md#reconfiguration).
type vmContext struct {
	types.DefaultVMContext
	// me identifies this worker for the health-probe lease, the same for
	// every plugin context of the VM, so a new configuration's context
	// takes over the lease its predecessor held.
	me uint64
	// live are the started plugin contexts of each root_id, oldest first:
	// the last is current, the others are draining (a newer configuration
	// replaced them).
	live map[string][]*pluginContext
	// metrics are the ids of the metrics this VM defined (metrics.go).
	metrics metricIDs
}

// started records p as the current plugin context of root and returns the
// one it replaces (nil when none).
func (v *vmContext) started(root string, p *pluginContext) (prev *pluginContext) {
	l := v.live[root]
	if n := len(l); n > 0 {
		prev = l[n-1]
		prev.draining = true
	}
	v.live[root] = append(l, p)
	return prev
}

// current returns the current plugin context of root, or nil.
func (v *vmContext) current(root string) *pluginContext {
	if l := v.live[root]; len(l) > 0 {
		return l[len(l)-1]
	}
	return nil
}

// done forgets p, which is going away. If p was current, the newest one
// left becomes current again (two filters sharing a root_id, one removed).
func (v *vmContext) done(root string, p *pluginContext) {
	l := v.live[root]
	for i := range l {
		if l[i] == p {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(v.live, root)
		return
	}
	l[len(l)-1].draining = false
	v.live[root] = l
}

// NewPluginContext implements types.VMContext.
func (v *vmContext) NewPluginContext(id uint32) types.PluginContext {
	if v.me == 0 {
		v.me = rand.Uint64() | 1
		v.live = map[string][]*pluginContext{}
	}
	return &pluginContext{id: id, vm: v}
}
