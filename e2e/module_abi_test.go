package e2e

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/internal/wasmpost"
	"github.com/tetratelabs/wazero"
)

// envoy133Imports is what Envoy 1.33's proxy-wasm host (proxy-wasm-cpp-host
// at PR #427, src/exports.cc and src/wasm.cc) registers: 18 WASI functions
// and the env module. A module importing anything else is refused with
// "Failed to load Wasm module due to a missing import". Written out here,
// independently of hostsim's profile, so that neither can hide the other's
// mistake.
var envoy133Imports = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range []string{"args_get", "args_sizes_get", "environ_get", "environ_sizes_get", "clock_time_get",
		"random_get", "fd_write", "fd_read", "fd_seek", "fd_close", "fd_fdstat_get", "fd_fdstat_set_flags",
		"fd_prestat_get", "fd_prestat_dir_name", "path_open", "proc_exit", "sched_yield", "poll_oneoff"} {
		m["wasi_snapshot_preview1."+f] = true
		m["wasi_unstable."+f] = true
	}
	for _, f := range []string{"proxy_log", "proxy_get_status", "proxy_set_property", "proxy_get_property",
		"proxy_send_local_response", "proxy_get_shared_data", "proxy_set_shared_data", "proxy_register_shared_queue",
		"proxy_resolve_shared_queue", "proxy_dequeue_shared_queue", "proxy_enqueue_shared_queue",
		"proxy_get_header_map_value", "proxy_add_header_map_value", "proxy_replace_header_map_value",
		"proxy_remove_header_map_value", "proxy_get_header_map_pairs", "proxy_set_header_map_pairs",
		"proxy_get_header_map_size", "proxy_get_buffer_status", "proxy_get_buffer_bytes", "proxy_set_buffer_bytes",
		"proxy_http_call", "proxy_grpc_call", "proxy_grpc_stream", "proxy_grpc_close", "proxy_grpc_cancel",
		"proxy_grpc_send", "proxy_set_tick_period_milliseconds", "proxy_get_current_time_nanoseconds",
		"proxy_define_metric", "proxy_increment_metric", "proxy_record_metric", "proxy_get_metric",
		"proxy_set_effective_context", "proxy_done", "proxy_call_foreign_function", "proxy_continue_stream",
		"proxy_close_stream", "proxy_get_log_level", "envoy_resolve_dns", "pthread_equal",
		"emscripten_notify_memory_growth"} {
		m["env."+f] = true
	}
	return m
}()

// TestModuleABI reads the built module's exports and imports: it carries the
// ABI marker upstream Envoy recognises, and imports nothing Envoy 1.33 lacks
// (the SDK declares Higress-only host functions such as
// proxy_set_upstream_override_host; Go links them only if called).
func TestModuleABI(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	cm, err := r.CompileModule(ctx, module(t))
	if err != nil {
		t.Fatalf("compiling the module: %v", err)
	}
	exports := cm.ExportedFunctions()
	if _, ok := exports["proxy_abi_version_0_2_1"]; !ok {
		t.Error("the module does not export proxy_abi_version_0_2_1: Envoy refuses it (Missing or unknown Proxy-Wasm ABI version)")
	}
	for _, name := range []string{"_initialize", "proxy_on_context_create", "proxy_on_vm_start", "proxy_on_configure",
		"proxy_on_request_headers", "proxy_on_response_headers", "proxy_on_done", "proxy_on_delete", "proxy_on_tick",
		"proxy_on_http_call_response", "proxy_on_memory_allocate"} {
		if _, ok := exports[name]; !ok {
			t.Errorf("the module does not export %s", name)
		}
	}
	for _, name := range wasmpost.Unhandled {
		if _, ok := exports[name]; ok {
			t.Errorf("the module exports %s, which it does not handle: Envoy calls into the module for it on every stream (./build.sh wasm drops it)", name)
		}
	}
	var imports []string
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		imports = append(imports, mod+"."+name)
	}
	sort.Strings(imports)
	for _, imp := range imports {
		if !envoy133Imports[imp] {
			t.Errorf("the module imports %s, which Envoy 1.33 does not provide: Envoy would refuse to load it", imp)
		}
	}
	if len(imports) == 0 {
		t.Fatal("the module imports nothing: this is not the filter")
	}
	t.Logf("%d imports: %v", len(imports), imports)
}

// unhandledHooks are the SDK's names behind wasmpost.Unhandled's callbacks:
// the methods a context would implement, the calls that register a queue or
// a Redis call.
var unhandledHooks = []string{"OnHttpRequestBody", "OnHttpRequestTrailers", "OnHttpResponseBody",
	"OnHttpResponseTrailers", "OnQueueReady", "RegisterSharedQueue", "ResolveSharedQueue", "DispatchRedisCall", "RedisInit"}

// TestUnhandledCallbacksStayUnhandled fails when the filter starts to use a
// callback the shipped module no longer exports (wasmpost.Unhandled): the
// host would never call it. Handling one means taking it off that list.
func TestUnhandledCallbacksStayUnhandled(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "filter")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && slices.Contains(unhandledHooks, id.Name) {
				t.Errorf("%s: the filter uses %s, whose callback ./build.sh wasm no longer exports (internal/wasmpost.Unhandled)", fset.Position(id.Pos()), id.Name)
			}
			return true
		})
	}
}
