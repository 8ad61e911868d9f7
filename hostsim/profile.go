package hostsim

import (
	"fmt"
	"strings"

	"github.com/tetratelabs/wazero/api"
)

// Profile names accepted by Config.Profile.
const (
	// ProfileEnvoy133 is Envoy 1.33–1.38: cpp-host after PR #427 (c4d7bb0), 18 WASI
	// functions, poll_oneoff → 52 ENOSYS. It is the default.
	ProfileEnvoy133 = "envoy-1.33"
	// ProfileEnvoy139 is Envoy 1.39 and later: cpp-host after PR #533 (94091cd), 45 WASI
	// functions, poll_oneoff → 0 with nevents = 0.
	ProfileEnvoy139 = "envoy-1.39"
)

// Profiles returns the names of the import profiles hostsim provides.
func Profiles() []string { return []string{ProfileEnvoy133, ProfileEnvoy139} }

// hostFunc is one host function: its import name, its Wasm signature written as
// letters ('i' = i32, 'I' = i64) and its implementation. fn receives the call's
// parameters and returns the single result (ignored when results is empty).
type hostFunc struct {
	name    string
	params  string
	results string
	fn      func(v *vm, p []uint64) uint64
}

// abiVersion is the Proxy-Wasm ABI version selected by the module's marker export.
type abiVersion int

const (
	abi010 abiVersion = iota + 1
	abi020
	abi021
)

// abiMarkers maps the marker exports cpp-host recognises (src/bytecode_util.cc,
// getAbiVersion) to their version. Anything else, including the Higress SDK's
// proxy_abi_version_0_2_100, is unknown.
var abiMarkers = map[string]abiVersion{
	"proxy_abi_version_0_1_0": abi010,
	"proxy_abi_version_0_2_0": abi020,
	"proxy_abi_version_0_2_1": abi021,
}

// profile is the set of imports a host offers plus V8's restricted-callback
// allow-lists (include/proxy-wasm/wasm.h allocMemory, src/wasm.cc startVm).
type profile struct {
	name       string
	wasi       map[string]bool // WASI function names provided
	pollOK     bool            // poll_oneoff succeeds with zero events
	initAllow  map[string]bool // "module.name" callable during _initialize
	allocAllow map[string]bool // "module.name" callable during malloc/proxy_on_memory_allocate
}

// wasi133 is cpp-host c4d7bb0's FOR_ALL_WASI_FUNCTIONS (Envoy 1.33–1.38).
var wasi133 = []string{
	"args_get", "args_sizes_get", "environ_get", "environ_sizes_get", "clock_time_get",
	"random_get", "fd_write", "fd_read", "fd_seek", "fd_close", "fd_fdstat_get",
	"fd_fdstat_set_flags", "fd_prestat_get", "fd_prestat_dir_name", "path_open",
	"proc_exit", "sched_yield", "poll_oneoff",
}

// wasi139Extra are the functions PR #533 (94091cd) added: all of preview1 but proc_raise.
var wasi139Extra = []string{
	"clock_res_get", "fd_advise", "fd_allocate", "fd_datasync", "fd_fdstat_set_rights",
	"fd_filestat_get", "fd_filestat_set_size", "fd_filestat_set_times", "fd_pread",
	"fd_pwrite", "fd_readdir", "fd_renumber", "fd_sync", "fd_tell", "path_create_directory",
	"path_filestat_get", "path_filestat_set_times", "path_link", "path_readlink",
	"path_remove_directory", "path_rename", "path_symlink", "path_unlink_file",
	"sock_accept", "sock_recv", "sock_send", "sock_shutdown",
}

// wasiModules are the two module names cpp-host registers every WASI function under.
var wasiModules = []string{"wasi_snapshot_preview1", "wasi_unstable"}

func set(mods []string, names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		if strings.HasPrefix(n, "env.") {
			m[n] = true
			continue
		}
		for _, mod := range mods {
			m[mod+"."+n] = true
		}
	}
	return m
}

func newProfile(name string) (*profile, error) {
	switch name {
	case "", ProfileEnvoy133:
		p := &profile{name: ProfileEnvoy133, wasi: map[string]bool{}}
		for _, n := range wasi133 {
			p.wasi[n] = true
		}
		// src/wasm.cc startVm at c4d7bb0.
		p.initAllow = set(wasiModules, "env.proxy_log", "fd_write", "args_sizes_get", "args_get",
			"environ_sizes_get", "environ_get", "fd_prestat_get", "fd_prestat_dir_name",
			"clock_time_get", "random_get", "fd_fdstat_get", "fd_fdstat_set_flags")
		// include/proxy-wasm/wasm.h allocMemory at c4d7bb0.
		p.allocAllow = set(wasiModules, "env.proxy_log", "fd_write", "clock_time_get")
		return p, nil
	case ProfileEnvoy139:
		p := &profile{name: ProfileEnvoy139, pollOK: true, wasi: map[string]bool{}}
		for _, n := range append(append([]string{}, wasi133...), wasi139Extra...) {
			p.wasi[n] = true
		}
		// src/wasm.cc startVm after 94091cd: everything but sched_yield, fd_read,
		// fd_seek, fd_close, path_open and proc_exit.
		init := []string{"env.emscripten_notify_memory_growth", "env.proxy_log", "fd_write",
			"args_sizes_get", "args_get", "environ_sizes_get", "environ_get", "clock_time_get",
			"clock_res_get", "random_get", "poll_oneoff", "fd_fdstat_get", "fd_fdstat_set_flags"}
		for _, n := range wasi139Extra {
			if n != "clock_res_get" {
				init = append(init, n)
			}
		}
		init = append(init, "fd_prestat_dir_name", "fd_prestat_get")
		p.initAllow = set(wasiModules, init...)
		// wasm.h allocMemory after 94091cd: "go runtime gc sleep" adds poll_oneoff.
		p.allocAllow = set(wasiModules, "env.proxy_log", "fd_write", "clock_time_get", "poll_oneoff")
		return p, nil
	}
	return nil, fmt.Errorf("hostsim: unknown profile %q (want one of %s)", name, strings.Join(Profiles(), ", "))
}

// envFuncs returns the env module for an ABI version, as cpp-host's
// WasmBase::registerCallbacks builds it (src/wasm.cc), plus Envoy's
// envoy_resolve_dns (source/extensions/common/wasm/wasm.cc).
func envFuncs(abi abiVersion) []hostFunc {
	var fs []hostFunc
	for _, group := range [][]hostFunc{logFuncs, headerFuncs, bufferFuncs, propertyFuncs,
		sharedDataFuncs, timerFuncs, httpCallFuncs, metricFuncs, streamFuncs, stubFuncs} {
		fs = append(fs, group...)
	}
	switch abi {
	case abi010:
		fs = append(fs, abi010Funcs...)
	case abi020:
		fs = append(fs, abi02Funcs...)
	case abi021:
		fs = append(fs, abi02Funcs...)
		fs = append(fs, logLevelFunc)
	}
	return fs
}

func valueTypes(sig string) []api.ValueType {
	out := make([]api.ValueType, len(sig))
	for i, c := range sig {
		if c == 'I' {
			out[i] = api.ValueTypeI64
		} else {
			out[i] = api.ValueTypeI32
		}
	}
	return out
}

func sigString(ts []api.ValueType) string {
	var b strings.Builder
	for _, t := range ts {
		if t == api.ValueTypeI64 {
			b.WriteByte('I')
		} else if t == api.ValueTypeI32 {
			b.WriteByte('i')
		} else {
			b.WriteString(api.ValueTypeName(t))
		}
	}
	return b.String()
}
