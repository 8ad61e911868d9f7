package hostsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Config describes a host: the plugin it runs and how many workers run it.
type Config struct {
	// Workers is the number of VMs, one per Envoy worker thread (default 1).
	Workers int
	// Profile is the import profile, ProfileEnvoy133 (default) or ProfileEnvoy139.
	Profile string
	// PluginConfig is the plugin configuration handed to proxy_on_configure.
	PluginConfig []byte
	// VMConfig is the VM configuration handed to proxy_on_vm_start.
	VMConfig []byte
	// PluginName, RootID and VMID are the plugin_name, plugin_root_id and
	// plugin_vm_id properties (defaults "hashlb", "", "").
	PluginName, RootID, VMID string
	// Env is the VM's environment, as Envoy's vm_config.environment_variables.
	Env map[string]string
	// LogLevel is what proxy_get_log_level returns and the lowest level kept
	// (default LogTrace: everything is captured).
	LogLevel LogLevel
	// FailOpen makes streams on a dead VM pass through instead of getting a 503.
	FailOpen bool
	// Start is the virtual clock's initial time (default 2026-01-01T00:00:00Z).
	Start time.Time
	// RealTime makes the clock follow the wall clock instead of Advance.
	RealTime bool
	// HTTPCall answers proxy_http_call; nil sends real HTTP to :authority.
	HTTPCall HTTPHandler
	// Clusters maps Envoy cluster names to host:port. A proxy_http_call to one
	// of them is sent as real HTTP/1.1 to that address and answered
	// asynchronously, when its response comes, as Envoy does; calls to other
	// clusters go to HTTPCall.
	Clusters map[string]string
	// Properties are host-wide property values by dotted path ("node.id");
	// per-stream values override them.
	Properties map[string][]byte
	// LogOutput, if set, receives every log line as it is captured.
	LogOutput io.Writer
	// Cache is the wazero compilation cache (default: one shared by the process).
	Cache wazero.CompilationCache
	// Trace records, per stream, every host function the module calls with
	// its key arguments (Stream.Calls) and every call into the module made
	// for the stream: callbacks and allocator re-entries (Stream.Entries).
	Trace bool
	// OnCallout, if set, sees every callout to Config.Clusters as its
	// outcome is handed to the module (a test reads a protocol's story
	// from it). It runs with the calling VM's lock held.
	OnCallout func(CalloutRecord)
}

// Host runs one compiled module in Config.Workers VMs that share shared data,
// metrics, logs and a clock, like the workers of one Envoy process.
type Host struct {
	cfg     Config
	prof    *profile
	abi     abiVersion
	rt      wazero.Runtime
	vms     []*vm
	clock   *clock
	shared  *SharedData
	metrics *metrics
	logs    *logStore
	cfgMu   sync.Mutex // serialises Configure
	plugin  []byte     // current plugin configuration
	props   map[string][]byte
	cm      wazero.CompiledModule
	// canaried holds the canary's verdict per plugin configuration, as
	// cpp-host's plugin_canary_cache_ does; canaries numbers their modules.
	canaried map[string]bool
	canaries int

	// Callouts to Config.Clusters in flight (httpcall.go).
	client      *http.Client
	bgCtx       context.Context
	bgStop      context.CancelFunc
	bg          sync.WaitGroup
	bgMu        sync.Mutex
	pending     int
	calloutLate time.Duration // CalloutLate
	closed      bool
}

var defaultCache = wazero.NewCompilationCache()

// ErrUnknownABI is Envoy's refusal of a module without a recognised ABI marker.
var ErrUnknownABI = errors.New("Missing or unknown Proxy-Wasm ABI version")

// New compiles wasm once and starts cfg.Workers VMs as Envoy does: check the ABI
// marker and the imports, then per VM _initialize (restricted), root
// proxy_on_context_create, proxy_on_vm_start and proxy_on_configure. A start
// failure on any VM is an error.
func New(ctx context.Context, wasm []byte, cfg Config) (*Host, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.PluginName == "" {
		cfg.PluginName = "hashlb"
	}
	cfg.Clusters = maps.Clone(cfg.Clusters) // read by every VM's callouts
	prof, err := newProfile(cfg.Profile)
	if err != nil {
		return nil, err
	}
	cache := cfg.Cache
	if cache == nil {
		cache = defaultCache
	}
	// Envoy runs V8 with --wasm-max-mem-pages=16384: 1 GiB per VM.
	rc := wazero.NewRuntimeConfigCompiler().WithCompilationCache(cache).WithMemoryLimitPages(16384)
	h := &Host{cfg: cfg, prof: prof, rt: wazero.NewRuntimeWithConfig(ctx, rc),
		clock: newClock(cfg.Start, cfg.RealTime), shared: NewSharedData(),
		metrics: newMetrics(), logs: &logStore{min: cfg.LogLevel, out: cfg.LogOutput},
		plugin: cfg.PluginConfig, props: propMap(cfg.Properties),
		// Envoy asks for no compression on a callout; neither does hostsim.
		client: &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16}}}
	h.bgCtx, h.bgStop = context.WithCancel(context.Background())
	if err := h.load(ctx, wasm); err != nil {
		h.Close(ctx)
		return nil, err
	}
	return h, nil
}

func (h *Host) load(ctx context.Context, wasm []byte) error {
	// Envoy checks the marker and the imports before it compiles; the cheap
	// interpreter front end is enough for that, so a refused module never
	// reaches the optimising compiler.
	pre := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer pre.Close(ctx)
	cm, err := pre.CompileModule(ctx, wasm)
	if err != nil {
		return fmt.Errorf("hostsim: compile: %w", err)
	}
	if err := h.readABI(cm); err != nil {
		return err
	}
	mods := h.hostModules()
	if err := checkImports(cm, mods); err != nil {
		return err
	}
	if cm, err = h.rt.CompileModule(ctx, wasm); err != nil {
		return fmt.Errorf("hostsim: compile: %w", err)
	}
	if err := h.instantiateHost(ctx, mods); err != nil {
		return err
	}
	h.cm = cm
	h.canaried = map[string]bool{string(h.plugin): true}
	for i := 0; i < h.cfg.Workers; i++ {
		v, err := newVM(ctx, h, i, fmt.Sprintf("worker-%d", i), cm, h.plugin)
		if err != nil {
			return err
		}
		h.vms = append(h.vms, v)
	}
	return nil
}

// readABI is Envoy's first check of a module: one ABI marker export, which
// sets h.abi, and an allocator.
func (h *Host) readABI(cm wazero.CompiledModule) error {
	// src/wasm.cc WasmBase::load: the ABI version comes from the marker export.
	var found []string
	for name := range cm.ExportedFunctions() {
		if v, ok := abiMarkers[name]; ok {
			h.abi = v
			found = append(found, name)
		}
	}
	if len(found) != 1 {
		sort.Strings(found)
		if len(found) > 1 {
			return fmt.Errorf("%w (several markers: %s)", ErrUnknownABI, strings.Join(found, ", "))
		}
		return ErrUnknownABI
	}
	exports := cm.ExportedFunctions()
	if exports["malloc"] == nil && exports["proxy_on_memory_allocate"] == nil {
		return errors.New("Wasm module is missing malloc function.")
	}
	return nil
}

// checkImports is Envoy's second check: every function import provided by
// mods, the ABI's host functions, with the same type.
func checkImports(cm wazero.CompiledModule, mods map[string]map[string]hostFunc) error {
	// src/v8/v8.cc V8::link: every function import must be provided with the same type.
	for _, imp := range cm.ImportedFunctions() {
		mod, name, _ := imp.Import()
		f, ok := mods[mod][name]
		if !ok {
			return fmt.Errorf("Failed to load Wasm module due to a missing import: %s.%s", mod, name)
		}
		want, got := sigString(imp.ParamTypes())+"->"+sigString(imp.ResultTypes()), f.params+"->"+f.results
		if want != got {
			return fmt.Errorf("Failed to load Wasm module due to an import type mismatch: %s.%s, want: %s, but host exports: %s", mod, name, want, got)
		}
	}
	return nil
}

// instantiateHost instantiates mods, the host's functions, each call
// checked against the profile, its i32 arguments cut to 32 bits, and
// traced when Config.Trace asks.
func (h *Host) instantiateHost(ctx context.Context, mods map[string]map[string]hostFunc) error {
	for mod, fs := range mods {
		b := h.rt.NewHostModuleBuilder(mod)
		for _, f := range fs {
			f := f
			key := mod + "." + f.name
			b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, _ api.Module, stack []uint64) {
				v := ctx.Value(vmKey{}).(*vm)
				v.checkAllowed(key)
				// An i32 argument's upper 32 bits are not guaranteed to be zero.
				for i := 0; i < len(f.params); i++ {
					if f.params[i] == 'i' {
						stack[i] = uint64(uint32(stack[i]))
					}
				}
				if h.cfg.Trace {
					v.trace(mod, f.name, stack)
				}
				r := f.fn(v, stack)
				if f.results != "" {
					stack[0] = r
				}
			}), valueTypes(f.params), valueTypes(f.results)).Export(f.name)
		}
		if _, err := b.Instantiate(ctx); err != nil {
			return fmt.Errorf("hostsim: host module %s: %w", mod, err)
		}
	}
	return nil
}

// hostModules is the profile's import surface: module → name → function.
func (h *Host) hostModules() map[string]map[string]hostFunc {
	mods := map[string]map[string]hostFunc{"env": {}}
	for _, f := range envFuncs(h.abi) {
		mods["env"][f.name] = f
	}
	for _, mod := range wasiModules {
		mods[mod] = map[string]hostFunc{}
		for _, f := range wasiFuncs(h.prof) {
			mods[mod][f.name] = f
		}
	}
	return mods
}

// ErrHostClosed is the result of a paused stream still waiting when its Host closed.
var ErrHostClosed = errors.New("hostsim: host closed")

// Close cancels the callouts in flight and waits for their goroutines (their
// responses are dropped), ends the wait of every paused stream with
// ErrHostClosed, and releases every VM and the runtime. Later calls do nothing.
func (h *Host) Close(ctx context.Context) error {
	h.bgMu.Lock()
	if h.closed {
		h.bgMu.Unlock()
		return nil
	}
	h.closed = true
	h.bgMu.Unlock()
	h.bgStop()
	h.bg.Wait()
	h.client.CloseIdleConnections()
	for _, v := range h.vms {
		v.mu.Lock()
		for _, s := range v.streams {
			if s.req == reqPaused {
				s.resolve(Result{Action: ActionPause, Err: ErrHostClosed})
			}
		}
		v.mu.Unlock()
	}
	return h.rt.Close(ctx)
}

// Workers returns the number of VMs.
func (h *Host) Workers() int { return len(h.vms) }

// Profile returns the name of the import profile in use.
func (h *Host) Profile() string { return h.prof.name }

// Err returns why worker's VM died (a trap, a failed start), or nil if it is alive.
func (h *Host) Err(worker int) error {
	v := h.vms[worker]
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.dead
}

// Exited reports whether worker's module called proc_exit, and with which
// code. Envoy only logs the call; the VM goes on running.
func (h *Host) Exited(worker int) (code uint32, ok bool) {
	v := h.vms[worker]
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.exitCode, v.exited
}

// MemorySize returns the size in bytes of worker's linear memory.
func (h *Host) MemorySize(worker int) uint32 {
	v := h.vms[worker]
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.mod.Memory().Size()
}

// SharedData returns the host's shared-data store, common to all its VMs.
func (h *Host) SharedData() *SharedData { return h.shared }

// Configure applies a new plugin configuration to the running host, as
// Envoy does for a filter configuration update (xDS, ECDS) that keeps the VM
// (same vm_id, VM configuration and code):
//   - first a configuration canary (cpp-host WasmHandleBase::canary, its
//     verdict cached per configuration): a fresh VM of the same code is
//     started and configured with it (_initialize, proxy_on_context_create,
//     proxy_on_vm_start, proxy_on_configure) and thrown away without
//     proxy_on_done; shared data it writes stays. If it refuses the
//     configuration, Configure returns the error and no worker sees it;
//   - then each worker's VM gets a new root context (see vm.reconfigure)
//     while the old one drains: streams already running keep it, it keeps
//     ticking, and proxy_on_done and proxy_on_delete follow when its last
//     stream ends.
//
// The same configuration again changes nothing. A worker whose new root
// context fails keeps its old one, and the joined error names it.
func (h *Host) Configure(config []byte) error {
	h.cfgMu.Lock()
	defer h.cfgMu.Unlock()
	if err := h.canary(config); err != nil {
		return err
	}
	var errs []error
	for _, v := range h.vms {
		if err := v.reconfigure(config); err != nil {
			errs = append(errs, fmt.Errorf("worker %d: %w", v.id, err))
		}
	}
	if len(errs) == 0 {
		h.plugin = config
	}
	return errors.Join(errs...)
}

// errCanaryDone marks a canary VM as gone, so that nothing calls it again.
var errCanaryDone = errors.New("hostsim: configuration canary done")

// canary runs the configuration canary for config unless its verdict is cached.
func (h *Host) canary(config []byte) error {
	if ok, seen := h.canaried[string(config)]; seen {
		if !ok {
			return errors.New("hostsim: configuration canary: proxy_on_configure refused this configuration")
		}
		return nil
	}
	h.canaries++
	ctx := context.Background()
	v, err := newVM(ctx, h, -1, fmt.Sprintf("canary-%d", h.canaries), h.cm, config)
	if v != nil {
		v.mu.Lock()
		v.dead = errCanaryDone
		v.mu.Unlock()
		v.mod.Close(ctx)
	}
	if err != nil {
		var te *TrapError
		if errors.As(err, &te) && te.Call == "proxy_on_configure" {
			h.canaried[string(config)] = false // cpp-host caches only this refusal
		}
		return fmt.Errorf("hostsim: configuration canary: %w", err)
	}
	h.canaried[string(config)] = true
	return nil
}

// RootContexts returns worker's root contexts: the current one, and those
// that a newer configuration replaced and that still wait for their streams
// (or for proxy_done), in creation order.
func (h *Host) RootContexts(worker int) (current uint32, draining []uint32) {
	v := h.vms[worker]
	v.mu.Lock()
	defer v.mu.Unlock()
	for id := range v.roots {
		if id != v.root.id {
			draining = append(draining, id)
		}
	}
	sort.Slice(draining, func(i, j int) bool { return draining[i] < draining[j] })
	return v.root.id, draining
}
