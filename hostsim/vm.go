package hostsim

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

type vmKey struct{}

// TrapError reports that a VM died: a Wasm trap, a restricted callback, or a
// failed start. Every later call on that VM fails with it.
type TrapError struct {
	Worker int    // the VM's worker index
	Call   string // the export that was running
	Reason string // the trap or failure
}

func (e *TrapError) Error() string {
	return fmt.Sprintf("hostsim: worker %d: VM died in %s: %s", e.Worker, e.Call, e.Reason)
}

// restrictedCallback is the panic value a disallowed host call raises; wazero
// turns it into a trap of the running call, as V8 does ("restricted_callback").
type restrictedCallback struct{ name string }

func (r restrictedCallback) Error() string { return "restricted_callback: " + r.name }

// rootCtx is one plugin (root) context of a VM.
type rootCtx struct {
	id       uint32
	period   time.Duration // tick period, 0 = off
	nextTick time.Time
	config   []byte // the plugin configuration it was configured with
	streams  int    // its stream and connection contexts not yet finished
	// draining: a newer configuration replaced it; it lives on for its
	// streams, then retire runs proxy_on_done.
	draining bool
	// done: proxy_on_done returned false; proxy_done completes it.
	done bool
}

// vm is one worker: one module instance, single-threaded behind mu.
type vm struct {
	h   *Host
	id  int
	mu  sync.Mutex
	ctx context.Context
	mod api.Module

	alloc     api.Function
	allocName string // the export alloc is: malloc or proxy_on_memory_allocate
	exports   map[string]api.Function

	dead      error
	allowed   map[string]bool // non-nil while V8 would restrict callbacks
	now       time.Time       // clock snapshot for the running call
	cur       uint32          // context of the running callback
	phase     string          // the running top-level export (for Config.Trace)
	effective uint32          // set by proxy_set_effective_context, reset per call
	nextID    uint32
	root      *rootCtx
	roots     map[uint32]*rootCtx
	streams   map[uint32]*Stream
	rootProps map[string][]byte // set by the module from root contexts
	exited    bool              // proc_exit was called
	exitCode  uint32

	plugin           []byte        // this VM's plugin configuration
	bufPlugin, bufVM bool          // which configuration buffer is readable now
	callResp         *CallResponse // the callout response being delivered
	netBuf           uint64        // bufDownstreamData or bufUpstreamData while a data callback runs, else 0
	netData          []byte        // that callback's data
	callouts         []*callout    // dispatched, answered after the running call
	nextToken        uint32
	settling         bool // settle is running (stream.go)
	paused           int  // streams whose request is paused (reqPaused)
	// pendingDelete are root contexts that called proxy_done: deleted after
	// the running call, as cpp-host defers it (addAfterVmCallAction).
	pendingDelete []*rootCtx
}

// newVM instantiates cm as worker id (module name) and starts it with the
// plugin configuration plugin.
func newVM(ctx context.Context, h *Host, id int, name string, cm wazero.CompiledModule, plugin []byte) (*vm, error) {
	v := &vm{h: h, id: id, roots: map[uint32]*rootCtx{}, streams: map[uint32]*Stream{}, exports: map[string]api.Function{}, plugin: plugin}
	v.ctx = context.WithValue(context.Background(), vmKey{}, v)
	mc := wazero.NewModuleConfig().WithName(name).WithStartFunctions()
	mod, err := h.rt.InstantiateModule(v.ctx, cm, mc)
	if err != nil {
		return nil, fmt.Errorf("hostsim: worker %d: instantiate: %w", id, err)
	}
	v.mod = mod
	v.allocName = "malloc"
	if v.alloc = mod.ExportedFunction("malloc"); v.alloc == nil {
		v.allocName = "proxy_on_memory_allocate"
		v.alloc = mod.ExportedFunction(v.allocName)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.start(); err != nil {
		return v, err
	}
	return v, nil
}

// start follows cpp-host WasmBase::startVm then Envoy's plugin start:
// _initialize (or _start) under the profile's init allow-list, then the root
// context, proxy_on_vm_start (VM configuration readable) and proxy_on_configure
// (plugin configuration readable, also during the root on_context_create).
func (v *vm) start() error {
	init := "_initialize"
	if v.export(init) == nil {
		init = "_start"
	}
	if v.export(init) != nil {
		v.allowed = v.h.prof.initAllow
		_, err := v.call(init)
		v.allowed = nil
		if err != nil {
			return err
		}
	}
	v.nextID++
	r := &rootCtx{id: v.nextID}
	v.bufPlugin = true
	_, err := v.call("proxy_on_context_create", uint64(r.id), 0)
	v.bufPlugin = false
	if err != nil {
		return err
	}
	v.bufVM = true
	ok, err := v.call("proxy_on_vm_start", uint64(r.id), uint64(len(v.h.cfg.VMConfig)))
	v.bufVM = false
	if err != nil {
		return err
	}
	if v.export("proxy_on_vm_start") != nil && uint32(ok) == 0 {
		return v.fail("proxy_on_vm_start", "proxy_on_vm_start returned false")
	}
	r.config = v.plugin
	v.roots[r.id], v.root = r, r
	if err := v.configure(r, v.plugin); err != nil {
		return v.fail("proxy_on_configure", err.Error())
	}
	return nil
}

func (v *vm) configure(r *rootCtx, config []byte) error {
	v.bufPlugin = true
	ok, err := v.call("proxy_on_configure", uint64(r.id), uint64(len(config)))
	v.bufPlugin = false
	if err != nil {
		return err
	}
	if v.export("proxy_on_configure") != nil && uint32(ok) == 0 {
		return errors.New("proxy_on_configure returned false")
	}
	return nil
}

// reconfigure gives the VM a new plugin configuration as Envoy does for a
// plugin whose VM (vm_id, VM configuration, code) is unchanged: cpp-host
// getOrCreateThreadLocalPlugin finds the worker's VM by its key and calls
// WasmBase::start, which creates a new root context (ContextBase::onStart:
// proxy_on_context_create(id, 0) with the plugin configuration readable, then
// proxy_on_vm_start), then WasmBase::configure (proxy_on_configure). A
// configuration equal to that of a live root context (same plugin key) reuses
// that context and calls nothing. On success the old root context drains:
// Envoy's stream contexts hold its PluginHandle, so it keeps ticking and
// serving its streams, and the handle's destructor (startShutdown) runs
// proxy_on_done, then proxy_on_delete, once the last of them ends (retire).
// A failure deletes the new context and keeps the old one current.
func (v *vm) reconfigure(config []byte) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.dead != nil {
		return v.dead
	}
	old := v.root
	for _, r := range v.roots {
		if !r.done && bytes.Equal(r.config, config) {
			if r != old {
				r.draining, old.draining = false, true
				v.root, v.plugin = r, config
				v.retireIfIdle(old)
			}
			return nil
		}
	}
	v.nextID++
	r := &rootCtx{id: v.nextID, config: config}
	v.roots[r.id] = r
	saved := v.plugin
	v.plugin = config // readable as PluginConfiguration during these calls
	v.bufPlugin = true
	_, err := v.call("proxy_on_context_create", uint64(r.id), 0)
	v.bufPlugin = false
	if err == nil {
		v.bufVM = true
		var ok uint64
		ok, err = v.call("proxy_on_vm_start", uint64(r.id), uint64(len(v.h.cfg.VMConfig)))
		v.bufVM = false
		if err == nil && v.export("proxy_on_vm_start") != nil && uint32(ok) == 0 {
			err = errors.New("proxy_on_vm_start returned false")
		}
	}
	if err == nil {
		err = v.configure(r, config)
	}
	if err != nil {
		delete(v.roots, r.id)
		v.plugin = saved
		if v.dead == nil {
			v.call("proxy_on_delete", uint64(r.id))
		}
		return err
	}
	v.root = r
	old.draining = true
	v.retireIfIdle(old)
	return nil
}

// retireIfIdle retires a draining root context that has no stream left.
func (v *vm) retireIfIdle(r *rootCtx) {
	if r.draining && !r.done && r.streams == 0 {
		v.retire(r)
	}
}

// retire is cpp-host WasmBase::startShutdown(plugin_key): proxy_on_done; when
// it returns true proxy_on_delete follows at once, else the context waits
// (still ticking, as Envoy's timer finds it by id) for the module's
// proxy_done (hostDone).
func (v *vm) retire(r *rootCtx) {
	ok, err := v.call("proxy_on_done", uint64(r.id))
	if err != nil {
		delete(v.roots, r.id)
		return
	}
	if v.export("proxy_on_done") != nil && uint32(ok) == 0 {
		r.done = true
		return
	}
	v.deleteRoot(r)
}

// deleteRoot is ContextBase::onDelete for a root context: proxy_on_delete,
// and its ticks and callouts end with it.
func (v *vm) deleteRoot(r *rootCtx) {
	delete(v.roots, r.id)
	v.call("proxy_on_delete", uint64(r.id))
}

// forget removes a finished stream or connection and retires its root
// context when that was the last one of a draining root.
func (v *vm) forget(s *Stream) {
	if _, ok := v.streams[s.id]; !ok {
		return
	}
	delete(v.streams, s.id)
	if r := v.roots[s.root]; r != nil {
		r.streams--
		if v.dead == nil {
			v.retireIfIdle(r)
		}
	}
}

// fail marks the VM dead with reason (unless it already is) and returns the error.
func (v *vm) fail(call, reason string) error {
	if v.dead == nil {
		v.dead = &TrapError{Worker: v.id, Call: call, Reason: reason}
		v.h.logs.add(v.id, LogCritical, v.dead.Error())
	}
	return v.dead
}

func (v *vm) export(name string) api.Function {
	f, ok := v.exports[name]
	if !ok {
		f = v.mod.ExportedFunction(name)
		v.exports[name] = f
	}
	return f
}

// call runs a top-level export with v.mu held. A missing export is skipped
// (returns 0), as cpp-host does for optional callbacks. The clock is read once
// and held still for the whole call; Advance waits for it.
func (v *vm) call(name string, args ...uint64) (uint64, error) {
	if v.dead != nil {
		return 0, v.dead
	}
	f := v.export(name)
	if f == nil {
		return 0, nil
	}
	v.h.clock.mu.RLock()
	v.now = v.h.clock.read()
	v.effective = 0
	if len(args) > 0 && name != "_initialize" {
		v.cur = uint32(args[0])
	}
	if v.h.cfg.Trace && len(args) > 0 && name != "_initialize" {
		v.enter(name, uint32(args[0]))
	}
	v.phase = name
	res, err := f.Call(v.ctx, args...)
	v.phase = ""
	v.h.clock.mu.RUnlock()
	if err != nil {
		err = v.fail(name, err.Error())
		v.settle() // paused streams get the failure policy
		return 0, err
	}
	v.deliverCallouts()
	v.settle()
	for len(v.pendingDelete) > 0 && v.dead == nil {
		r := v.pendingDelete[0]
		v.pendingDelete = v.pendingDelete[1:]
		v.deleteRoot(r)
	}
	if len(res) == 0 {
		return 0, nil
	}
	return res[0], nil
}

// checkAllowed traps the running call when V8 would refuse name.
func (v *vm) checkAllowed(name string) {
	if v.allowed != nil && !v.allowed[name] {
		panic(restrictedCallback{name})
	}
}

// allocate calls malloc or proxy_on_memory_allocate under the profile's
// allocation allow-list (include/proxy-wasm/wasm.h WasmBase::allocMemory). It
// runs inside a host function, so a failure traps the outer call.
func (v *vm) allocate(size uint32) uint32 {
	if v.h.cfg.Trace {
		v.enter(v.allocName, v.context())
	}
	saved := v.allowed
	v.allowed = v.h.prof.allocAllow
	res, err := v.alloc.Call(v.ctx, uint64(size))
	v.allowed = saved
	if err != nil {
		panic(fmt.Errorf("allocation of %d bytes failed: %w", size, err))
	}
	return uint32(res[0])
}

// mem returns a copy of guest memory [ptr, ptr+size) or ok=false.
func (v *vm) mem(ptr, size uint64) ([]byte, bool) {
	if size == 0 {
		return nil, true
	}
	b, ok := v.mod.Memory().Read(uint32(ptr), uint32(size))
	if !ok {
		return nil, false
	}
	return append([]byte(nil), b...), true
}

// memPair returns copies of the key and the value of a set call's first four
// arguments (key pointer and size, value pointer and size), or ok=false.
func (v *vm) memPair(p []uint64) (key, val []byte, ok bool) {
	if key, ok = v.mem(p[0], p[1]); ok {
		val, ok = v.mem(p[2], p[3])
	}
	return key, val, ok
}

func (v *vm) putU32(ptr uint64, x uint32) bool { return v.mod.Memory().WriteUint32Le(uint32(ptr), x) }
func (v *vm) putU64(ptr uint64, x uint64) bool { return v.mod.Memory().WriteUint64Le(uint32(ptr), x) }

// copyOut allocates guest memory for data and stores its address and size at
// ptrPtr and sizePtr (cpp-host WasmBase::copyToPointerSize): empty data gives 0, 0.
func (v *vm) copyOut(data []byte, ptrPtr, sizePtr uint64) uint64 {
	var p uint32
	if len(data) > 0 {
		// A module's malloc may refuse (0): cpp-host's copyToPointerSize
		// then fails the call with InvalidMemoryAccess, copying nothing
		// (include/proxy-wasm/wasm.h, allocMemory and copyToPointerSize).
		if p = v.allocate(uint32(len(data))); p == 0 {
			return statusInvalidMemoryAccess
		}
		if !v.mod.Memory().Write(p, data) {
			return statusInvalidMemoryAccess
		}
	}
	if !v.putU32(ptrPtr, p) || !v.putU32(sizePtr, uint32(len(data))) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

// context returns the context a host call acts on: the effective context if
// one was set, else the running callback's (cpp-host contextOrEffectiveContext).
func (v *vm) context() uint32 {
	if v.effective != 0 {
		return v.effective
	}
	return v.cur
}

// Status codes of the proxy-wasm ABI (proxy-wasm/spec, WasmResult in cpp-host).
const (
	statusOK                  = 0
	statusNotFound            = 1
	statusBadArgument         = 2
	statusInvalidMemoryAccess = 6
	statusEmpty               = 7
	statusCasMismatch         = 8
	statusUnimplemented       = 12
)

// encodePairs encodes header pairs the way the ABI exchanges them: a u32
// count, then per pair two u32 sizes, then each key and value followed by a
// NUL.
func encodePairs(ps [][2]string) []byte {
	size := 4
	for _, p := range ps {
		size += 8 + len(p[0]) + len(p[1]) + 2
	}
	out := make([]byte, 4+8*len(ps), size)
	binary.LittleEndian.PutUint32(out, uint32(len(ps)))
	for i, p := range ps {
		binary.LittleEndian.PutUint32(out[4+8*i:], uint32(len(p[0])))
		binary.LittleEndian.PutUint32(out[8+8*i:], uint32(len(p[1])))
	}
	for _, p := range ps {
		out = append(append(append(append(out, p[0]...), 0), p[1]...), 0)
	}
	return out
}

// decodePairs is the inverse of encodePairs; malformed input gives ok=false.
func decodePairs(b []byte) ([][2]string, bool) {
	if len(b) == 0 {
		return nil, true
	}
	if len(b) < 4 {
		return nil, false
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n < 0 || 4+8*n > len(b) {
		return nil, false
	}
	data := 4 + 8*n
	out := make([][2]string, n)
	for i := 0; i < n; i++ {
		for j := 0; j < 2; j++ {
			l := int(binary.LittleEndian.Uint32(b[4+8*i+4*j:]))
			if data+l+1 > len(b) {
				return nil, false
			}
			out[i][j] = string(b[data : data+l])
			data += l + 1
		}
	}
	return out, true
}
