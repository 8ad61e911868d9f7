#!/usr/bin/env node
// hashlbv8.mjs runs a proxy-wasm module in V8 the way Envoy's Wasm host does, and drives request
// corpora through it. Node >= 20, built-in modules only. e2e/v8_test.go (TestV8) runs it in CI.
//
// Usage, with the flags Envoy gives V8 (proxy-wasm-cpp-host src/v8/v8.cc):
//
//   node --no-liftoff --wasm-max-mem-pages=16384 e2e/v8/hashlbv8.mjs MODULE.wasm JOB.json
//
// JOB.json:
//   {"profile": "envoy-1.33" | "envoy-1.39",
//    "config": "<plugin configuration, a JSON text as a string>",
//    "rootId": "hashlb", "pluginName": "hashlb", "vmId": "",
//    "warmup": 200,            requests run at the start of each phase and left out of the timings
//    "repeat": 10000,          measured requests per phase; the phase's list is cycled through
//    "phases": [{"name": "benign", "requests": [REQUEST...]}, {"name": "hostile", ...}],
//    "strings": "latin1",      optional: every string of the job is one character per byte (the
//                              Go test sends bytes that are not UTF-8 this way); default UTF-8
//    "logLevel": 2,            what proxy_get_log_level answers (trace 0 ... critical 5)
//    "requestIntervalMs": 1,   how far the guest's clock moves on between two requests
//    "slowMs": 50,             requests slower than this (after warm-up) are reported one by one
//    "recheckUs": 10000,       a measured request whose module CPU is over this is run again, 3
//                              times at once and up to 7 more times 25 ms apart, and counts its
//                              least: the module's cost repeats, a preemption or a background
//                              thread's burst on a loaded machine does not. The reruns come after
//                              the phase's last request and its linear memory is read: what a
//                              rerun allocates, and how many reruns a busy machine causes, never
//                              reaches the phase's memory
//    "budgetMs": 0,            > 0: a phase stops once it has run this long (reported as "budget")
//    "perRequest": false,      true: one line per measured request as well
//    "finalTick": false,       true: one more proxy_on_tick after the last request of a phase, so
//                              that the module's batched counts reach the host's metrics
//    "filter": "",             "http" or "network": the Envoy filter that runs the plugin, whatever
//                              its filterType says (default: the one filterType names)
//    "etcdClusters": [],       clusters whose calls MiniEtcd answers (below)
//    "etcdAnswers": "etcd",    "hostile": MiniEtcd answers every call with a hostile body instead
//    "env": {"NAME": "value"}, the VM's environment variables (Envoy: vm_config.environment_variables),
//                              what environ_get gives; default none
//    "sessionCookie": "",      a cookie name: the script keeps a cookie jar per client (a request's
//                              x-v8-client header names it): a request of a client with a cookie
//                              carries it ("cookie: NAME=VALUE"), and a Set-Cookie NAME=... the module
//                              adds to the response is stored with the service that served it; the
//                              outcome's "session" says "issued" (a new cookie), "kept" (the cookie's
//                              service served, nothing set), "reissued" (it served and the cookie was
//                              set again) or "moved" (another service served)
//    "reconfigure": {"every": 1000, "window": 50, "configs": ["<config>", ...]}}
//                              optional: every "every" requests (warm-up included) the next of
//                              "configs" (cycled) is applied to the running VM as Envoy applies a
//                              new filter configuration for the same code: a new root context
//                              (proxy_on_context_create with that configuration readable,
//                              proxy_on_vm_start, proxy_on_configure; one "reconfigure" line with
//                              its wall time in ms), then the old root context's proxy_on_done and,
//                              when that returns true, proxy_on_delete (no stream is in flight
//                              here, so it drains at once). The "window" requests after each one
//                              are counted in their own class, "<class> (after reconfigure)".
// With "filterType": "network" in the configuration each REQUEST is a TCP connection instead
// (envoy.filters.network.wasm; Envoy source/extensions/common/wasm/context.cc): its source and
// dest are the connection's addresses, its headers are not used; the outcome is the address the
// module set as the filter state envoy.network.transport_socket.original_dst_address (through the
// foreign function set_envoy_filter_state), whether it paused and whether it closed the connection.
//   REQUEST is the JSON form of Go's hostile.Request (internal/hostile):
//   {"class": "jwt-deep-array", "headers": [["name", "value"], ...], "source": "ip:port", "dest": "ip:port"}
//   "" for source or dest means the host does not have that property.
// A file may also hold several jobs, {"defaults": {...}, "jobs": [{"name": "...", ...}, ...]}: they
// run one after the other in this process, each taking what it does not set (the phases, say)
// from defaults, and every output line of a job carries its "job" name. The module is compiled
// once for all of them, as an Envoy compiles it once for all its VMs; so code V8 compiled lazily
// for one job is ready for the next.
//
// Output: JSON lines on stdout. "load" (ABI, imports, or why the module was refused); per phase
// "start" (VM started, plugin configured, or "configure refused" with the logged errors), "class"
// (per class after warm-up: count; p50/p99/max of the wall time of each request's callbacks, in
// µs, and p50/p99/max of the process's CPU time over them, which a loaded machine does not
// stretch; the largest linear memory; each distinct outcome with its count: the values of the
// upstream and service headers as the request left the filter, or the local reply), "slow",
// "trap" (callback, error, what the module wrote to stderr), "budget", "phase" (requests, linear
// memory after warm-up and at the end, the slowest request, ticks, metrics); last "summary". Exit status 0: ran and nothing trapped; 1: the module was refused, refused its
// configuration or trapped; 2: bad usage or a fault of this script.
//
// Each phase runs in a fresh instance of the compiled module (a new VM, with its own shared data,
// as a separate Envoy would give it): a trap in one phase cannot hide the next, and the linear
// memory at the end of a phase reflects only that phase's requests.
//
// What is emulated, and where it comes from (docs/envoy-host.md has the same facts, with sources):
// - Loading (proxy-wasm-cpp-host src/bytecode_util.cc, src/wasm.cc, src/v8/v8.cc): the first export
//   named proxy_abi_version_0_1_0, 0_2_0 or 0_2_1 sets the ABI, anything else is "Missing or unknown
//   Proxy-Wasm ABI version"; every import must be a host function of the profile with the same
//   signature ("Failed to load Wasm module due to a missing import: MODULE.NAME"); malloc, else
//   proxy_on_memory_allocate, must be exported.
// - WASI, both modules wasi_snapshot_preview1 and wasi_unstable (src/exports.cc): envoy-1.33 is the
//   18 functions of cpp-host at PR #427 (Envoy 1.33 to 1.38), envoy-1.39 the 45 of PR #533, with
//   their return codes: fd_write to fds 1 and 2 logs at info and error, fd_fdstat_get answers fds 1
//   and 2 only, fd_fdstat_set_flags 52, fd_prestat_get 8, path_open 44, proc_exit logs and returns,
//   poll_oneoff 52 in envoy-1.33 and 0 with nevents 0 in envoy-1.39, random_get over 64 KiB 28.
// - Restricted callbacks (src/wasm.cc WasmBase::startVm, include/proxy-wasm/wasm.h allocMemory,
//   enforced in src/v8/v8.cc): while _initialize (and main) run, and while the host calls malloc to
//   hand the module data, only the allow-listed imports may be called; any other traps.
// - The env functions (include/proxy-wasm/exports.h, src/exports.cc, Envoy source/extensions/common/
//   wasm/context.cc), status codes of the proxy-wasm spec (abi-versions/v0.2.1, proxy_status_t: Ok 0,
//   NotFound 1, BadArgument 2, InvalidMemoryAccess 6, CasMismatch 8, Unimplemented 12):
//   header maps with lower-cased names, repeated names kept as separate entries, get returning the
//   first copy, replace removing every copy and adding one, remove taking every copy, a missing
//   header NotFound; request headers unreachable (BadArgument) once proxy_on_request_headers has
//   returned Continue, both maps read-only in proxy_on_log; get_header_map_size in bytes; properties
//   by path segments joined with NUL; shared data with CAS (a set of a missing key always writes);
//   metrics with Envoy's ids (type in the low two bits) and rules; local replies; the tick period;
//   the plugin configuration readable in the root proxy_on_context_create and proxy_on_configure only.
// - Lifecycle: _initialize, root proxy_on_context_create(root, 0), proxy_on_vm_start,
//   proxy_on_configure; per request proxy_on_context_create(id, root), proxy_on_request_headers(id,
//   n, end_of_stream=1), proxy_on_response_headers with a 200 response or with the filter's own local
//   reply (Envoy sends it back through the filter), proxy_on_response_body for a reply body,
//   proxy_on_log, proxy_on_done, proxy_on_delete. proxy_on_tick whenever the guest's clock has moved
//   by a tick period. A trap fails the VM: nothing more runs in it (Envoy fails every later request).
//
// Deliberately different from Envoy:
// - Time: the guest's clocks are real time plus an offset that grows by requestIntervalMs between
//   requests (never during a call), so that ticks come every so many requests.
// - Envoy joins repeated lines of its well-known ("inline") request headers into one value
//   (source/common/http/header_map_impl.cc, HeaderMapImpl::insertByKey); here every line stays a
//   separate entry, the harder case for a module that must see all of them.
// - http_call is accepted (with Envoy's argument checks). A call to a cluster the job names in
//   "etcdClusters" is answered, once the running top-level call has returned, by a small etcd of
//   this script (MiniEtcd: the v3 JSON gateway's txn, range and lease grant, enough for
//   persistence.fleet); any other call is never answered. gRPC, shared queues,
//   set_buffer_bytes and foreign functions return Unimplemented; envoy_resolve_dns BadArgument.
// - Export signatures are not checked; memory imports are supported, table and global imports are
//   refused.
// - Node's V8 is not Envoy's build of V8: limits such as the stack depth at which recursion
//   overflows can differ somewhat. Both use V8's default stack limit.

import { readFileSync } from 'node:fs';
import { randomFillSync } from 'node:crypto';

// Rechecks of a slow request (job.recheckUs): how many in all, and the pause before each after the
// third.
const recheckTries = 10, recheckPauseMs = 25;
const pauseCell = new Int32Array(new SharedArrayBuffer(4));
// pause blocks this thread for ms milliseconds.
function pause(ms) { Atomics.wait(pauseCell, 0, 0, ms); }

const ST = { Ok: 0, NotFound: 1, BadArgument: 2, InvalidMemoryAccess: 6, CasMismatch: 8, Unimplemented: 12 };
const ERRNO = { BADF: 8, NOTDIR: 20, FAULT: 21, INVAL: 28, NOENT: 44, NOSYS: 52, NOTSUP: 58 };

// ---- Profiles -------------------------------------------------------------------------------------

// Signatures as the host declares them (include/proxy-wasm/exports.h: Word is i32, int64_t and
// uint64_t are i64). A number n stands for n i32 parameters and an i32 result.
const sigOf = (s) => (typeof s === 'number' ? `${Array(s).fill('i32').join(' ')} -> i32` : s);
const WASI_PR427 = {
  fd_write: 4, fd_read: 4, fd_seek: 'i32 i64 i32 i32 -> i32', fd_close: 1, fd_fdstat_get: 2,
  fd_fdstat_set_flags: 2, environ_get: 2, environ_sizes_get: 2, args_get: 2, args_sizes_get: 2,
  clock_time_get: 'i32 i64 i32 -> i32', random_get: 2, sched_yield: 0, poll_oneoff: 4, proc_exit: 'i32 -> ',
  path_open: 'i32 i32 i32 i32 i32 i64 i64 i32 i32 -> i32', fd_prestat_get: 2, fd_prestat_dir_name: 3,
};
const WASI_PR533 = {
  fd_fdstat_set_rights: 'i32 i64 i64 -> i32', clock_res_get: 2, fd_advise: 'i32 i64 i64 i32 -> i32',
  fd_allocate: 'i32 i64 i64 -> i32', fd_datasync: 1, fd_filestat_set_size: 'i32 i64 -> i32',
  fd_filestat_set_times: 'i32 i64 i64 i32 -> i32', fd_pread: 'i32 i32 i32 i64 i32 -> i32',
  fd_pwrite: 'i32 i32 i32 i64 i32 -> i32', fd_readdir: 'i32 i32 i32 i64 i32 -> i32', fd_renumber: 2,
  fd_sync: 1, fd_tell: 2, path_create_directory: 3, path_filestat_set_times: 'i32 i32 i32 i32 i64 i64 i32 -> i32',
  path_link: 6, path_readlink: 6, path_remove_directory: 3, path_rename: 6, path_symlink: 4,
  path_unlink_file: 3, sock_accept: 3, sock_recv: 6, sock_send: 5, sock_shutdown: 2, path_filestat_get: 5,
  fd_filestat_get: 2,
};
// FOR_ALL_HOST_FUNCTIONS, the ABI-specific ones (src/wasm.cc registerCallbacks), the two cpp-host
// always registers, and Envoy's own envoy_resolve_dns.
const ENV_ALL = {
  proxy_log: 3, proxy_get_status: 3, proxy_set_property: 4, proxy_get_property: 4, proxy_send_local_response: 8,
  proxy_get_shared_data: 5, proxy_set_shared_data: 5, proxy_register_shared_queue: 3, proxy_resolve_shared_queue: 5,
  proxy_dequeue_shared_queue: 3, proxy_enqueue_shared_queue: 3, proxy_get_header_map_value: 5,
  proxy_add_header_map_value: 5, proxy_replace_header_map_value: 5, proxy_remove_header_map_value: 3,
  proxy_get_header_map_pairs: 3, proxy_set_header_map_pairs: 3, proxy_get_header_map_size: 2,
  proxy_get_buffer_status: 3, proxy_get_buffer_bytes: 5, proxy_set_buffer_bytes: 5, proxy_http_call: 10,
  proxy_grpc_call: 12, proxy_grpc_stream: 9, proxy_grpc_close: 1, proxy_grpc_cancel: 1, proxy_grpc_send: 4,
  proxy_set_tick_period_milliseconds: 1, proxy_get_current_time_nanoseconds: 1, proxy_define_metric: 4,
  proxy_increment_metric: 'i32 i64 -> i32', proxy_record_metric: 'i32 i64 -> i32', proxy_get_metric: 2,
  proxy_set_effective_context: 1, proxy_done: 0, proxy_call_foreign_function: 6,
  pthread_equal: 2, emscripten_notify_memory_growth: 'i32 -> ', envoy_resolve_dns: 3,
};
const ENV_BY_ABI = {
  '0_1_0': { proxy_get_configuration: 2, proxy_continue_request: 0, proxy_continue_response: 0, proxy_clear_route_cache: 0 },
  '0_2_0': { proxy_continue_stream: 1, proxy_close_stream: 1 },
  '0_2_1': { proxy_continue_stream: 1, proxy_close_stream: 1, proxy_get_log_level: 1 },
};
const wasiNames = (...names) => names.flatMap((n) => [`wasi_snapshot_preview1.${n}`, `wasi_unstable.${n}`]);
const INIT_ALLOW_1_33 = ['env.emscripten_notify_memory_growth', 'env.proxy_log', ...wasiNames('fd_write',
  'args_sizes_get', 'args_get', 'environ_sizes_get', 'environ_get', 'fd_prestat_get', 'fd_prestat_dir_name',
  'clock_time_get', 'random_get', 'fd_fdstat_get', 'fd_fdstat_set_flags')];
const PROFILES = {
  'envoy-1.33': {
    wasi: WASI_PR427, pollOneoffWorks: false,
    initAllow: new Set(INIT_ALLOW_1_33),
    mallocAllow: new Set(['env.proxy_log', ...wasiNames('fd_write', 'clock_time_get')]),
  },
  'envoy-1.39': {
    wasi: { ...WASI_PR427, ...WASI_PR533 }, pollOneoffWorks: true,
    // 94091cd: poll_oneoff ("go runtime gc sleep") and every function PR #533 added.
    initAllow: new Set([...INIT_ALLOW_1_33, ...wasiNames('poll_oneoff', ...Object.keys(WASI_PR533))]),
    mallocAllow: new Set(['env.proxy_log', ...wasiNames('fd_write', 'clock_time_get', 'poll_oneoff')]),
  },
};

// ---- Reading the module's imports and exports ----------------------------------------------------

// readWasm lists imports (with function signatures) and exports from the binary: Node's
// WebAssembly.Module.imports does not give types without an experimental flag.
function readWasm(bytes) {
  let p = 8;
  const u = () => { let v = 0, shift = 0, b; do { b = bytes[p++]; v += (b & 0x7f) * 2 ** shift; shift += 7; } while (b & 0x80); return v; };
  const name = () => { const n = u(); const s = Buffer.from(bytes.subarray(p, p + n)).toString('utf8'); p += n; return s; };
  const valType = (b) => ({ 0x7f: 'i32', 0x7e: 'i64', 0x7d: 'f32', 0x7c: 'f64', 0x7b: 'v128', 0x70: 'funcref', 0x6f: 'externref' }[b] ?? `0x${b.toString(16)}`);
  const types = [], imports = [], exports = [];
  while (p < bytes.length) {
    const id = bytes[p++], len = u(), end = p + len;
    if (id === 1) {
      for (let n = u(); n > 0; n--) {
        if (bytes[p++] !== 0x60) break; // not a plain function type (GC proposal): Go never emits one
        const params = []; for (let k = u(); k > 0; k--) params.push(valType(bytes[p++]));
        const results = []; for (let k = u(); k > 0; k--) results.push(valType(bytes[p++]));
        types.push(`${params.join(' ')} -> ${results.join(' ')}`);
      }
    } else if (id === 2) {
      for (let n = u(); n > 0; n--) {
        const module = name(), field = name(), kind = bytes[p++];
        const imp = { module, name: field, kind };
        if (kind === 0) imp.sig = types[u()];
        else if (kind === 1) { p++; const f = bytes[p++]; imp.min = u(); if (f & 1) u(); }
        else if (kind === 2) { const f = bytes[p++]; imp.min = u(); if (f & 1) imp.max = u(); }
        else if (kind === 3) p += 2;
        imports.push(imp);
      }
    } else if (id === 7) {
      for (let n = u(); n > 0; n--) { const nm = name(), kind = bytes[p++]; u(); exports.push({ name: nm, kind }); }
    }
    p = end;
  }
  return { imports, exports };
}

// ---- Memory access ----------------------------------------------------------------------------------

class Mem {
  constructor(memory) { this.memory = memory; this.buf = null; }
  sync() { if (this.buf !== this.memory.buffer) { this.buf = this.memory.buffer; this.u8 = new Uint8Array(this.buf); this.dv = new DataView(this.buf); } }
  has(ptr, n) { this.sync(); return ptr + n <= this.u8.length; }
  bytes(ptr, n) { ptr >>>= 0; n >>>= 0; return this.has(ptr, n) ? this.u8.subarray(ptr, ptr + n) : null; }
  str(ptr, n) { const b = this.bytes(ptr, n); return b && Buffer.from(b.buffer, b.byteOffset, b.length).toString('latin1'); }
  u32(ptr, v) { ptr >>>= 0; if (!this.has(ptr, 4)) return false; this.dv.setUint32(ptr, v >>> 0, true); return true; }
  u16(ptr, v) { ptr >>>= 0; if (!this.has(ptr, 2)) return false; this.dv.setUint16(ptr, v, true); return true; }
  u64(ptr, v) { ptr >>>= 0; if (!this.has(ptr, 8)) return false; this.dv.setBigUint64(ptr, BigInt(v), true); return true; }
  put(ptr, bytes) { const b = this.bytes(ptr, bytes.length); if (!b) return false; b.set(bytes); return true; }
}

// Pairs as cpp-host serialises them (src/pairs_util.cc): u32 count, count × (u32 name length, u32
// value length), then each name and value followed by NUL. Strings here are latin1, one char a byte.
function encodePairs(pairs) {
  let size = 4;
  for (const [k, v] of pairs) size += 8 + k.length + 1 + v.length + 1;
  const b = Buffer.alloc(size);
  b.writeUInt32LE(pairs.length, 0);
  let o = 4;
  for (const [k, v] of pairs) { b.writeUInt32LE(k.length, o); b.writeUInt32LE(v.length, o + 4); o += 8; }
  for (const [k, v] of pairs) { o += b.write(k, o, 'latin1') + 1; o += b.write(v, o, 'latin1') + 1; }
  return b;
}
// decodePairs gives [] for anything malformed, over 1 MiB or over 1024 pairs (PairsUtil::toPairs).
// decodeProto reads a protobuf message (latin1 string) into {field: last value}: varints as
// numbers, length-delimited fields as latin1 strings; null when malformed.
function decodeProto(b) {
  const out = {};
  let i = 0;
  const varint = () => {
    let x = 0, shift = 0;
    for (; i < b.length && shift < 64; shift += 7) {
      const c = b.charCodeAt(i++);
      x += (c & 0x7f) * 2 ** shift;
      if (c < 0x80) return x;
    }
    return null;
  };
  while (i < b.length) {
    const tag = varint();
    if (tag === null || tag < 8) return null;
    const field = Math.floor(tag / 8), wire = tag % 8;
    if (wire === 0) { const x = varint(); if (x === null) return null; out[field] = x; }
    else if (wire === 2) { const n = varint(); if (n === null || i + n > b.length) return null; out[field] = b.slice(i, i + n); i += n; }
    else if (wire === 1 || wire === 5) { i += wire === 1 ? 8 : 4; if (i > b.length) return null; }
    else return null;
  }
  return out;
}

function decodePairs(u8) {
  if (!u8 || u8.length < 4 || u8.length > 1 << 20) return [];
  const b = Buffer.from(u8.buffer, u8.byteOffset, u8.length);
  const n = b.readUInt32LE(0);
  if (n > 1024 || 4 + 8 * n > b.length) return [];
  const out = [];
  let o = 4 + 8 * n;
  for (let i = 0; i < n; i++) {
    const kl = b.readUInt32LE(4 + 8 * i), vl = b.readUInt32LE(8 + 8 * i);
    if (o + kl + 1 > b.length || b[o + kl] !== 0) return [];
    const k = b.toString('latin1', o, o + kl); o += kl + 1;
    if (o + vl + 1 > b.length || b[o + vl] !== 0) return [];
    out.push([k, b.toString('latin1', o, o + vl)]); o += vl + 1;
  }
  return o === b.length ? out : [];
}

// Envoy's Http::LowerCaseString lowers ASCII only.
const asciiLower = (s) => s.replace(/[A-Z]+/g, (m) => m.toLowerCase());
const int64LE = (n) => { const b = Buffer.alloc(8); b.writeBigInt64LE(BigInt(n)); return b.toString('latin1'); };
// portOf is the port property of an "ip:port" address: an int64, or undefined (NotFound).
const portOf = (addr) => { const m = /:(\d{1,5})$/.exec(addr); return m ? int64LE(Number(m[1])) : undefined; };

class Trap extends Error {}
class HarnessFault extends Error {}

// ---- One VM -------------------------------------------------------------------------------------------

// MiniEtcd answers etcd's v3 JSON gateway as etcd does (base64 keys and values, int64 fields as
// strings, fields at their zero value left out): /v3/kv/txn with one compare (CREATE or MOD),
// request_put and request_range operations; /v3/kv/range; /v3/lease/grant and /timetolive. Leases never expire
// here; a put on an unknown lease is refused as etcd refuses it.
//
// With the job's "etcdAnswers": "hostile" every call is answered instead with the next of
// HOSTILE_ETCD: answers nested 10^4 levels deep, and 1 MiB bodies, with status 200 and 400 (an etcd
// that is compromised, or a man in the middle, can send any of them to every proxy of a fleet).
const HOSTILE_ETCD = [
  [200, '['.repeat(10000)], [400, '['.repeat(10000)],
  [200, '{"a":'.repeat(10000)], [400, '{"a":'.repeat(10000)],
  [200, `{"header":{"revision":"2"},"kvs":[{"value":"${'A'.repeat(1 << 20)}","mod_revision":"2"}]}`],
  [200, `{"header":{"revision":"2"},"ID":"${'7'.repeat(1 << 20)}"}`],
  [400, ' '.repeat(1 << 20)],
  [200, '{"a":'.repeat(31) + '1' + '}'.repeat(31)],
].map(([status, body]) => ({ headers: [[':status', String(status)], ['content-type', 'application/json']], body: Buffer.from(body, 'latin1') }));

class MiniEtcd {
  constructor(hostile) { this.kv = new Map(); this.rev = 1; this.leases = new Set(); this.nextLease = 7000; this.requests = 0; this.hostile = hostile; }
  handle(path, body) {
    this.requests++;
    if (this.hostile) return HOSTILE_ETCD[(this.requests - 1) % HOSTILE_ETCD.length];
    let req;
    try { req = JSON.parse(body.toString('latin1')); } catch { return this.error(400, 3, 'invalid JSON'); }
    const hdr = () => ({ revision: String(this.rev) });
    const key = (b) => Buffer.from(b ?? '', 'base64').toString('latin1');
    const range = (k) => {
      const e = this.kv.get(key(k));
      return e ? { header: hdr(), kvs: [{ key: k, create_revision: String(e.create), mod_revision: String(e.mod), version: String(e.version), value: e.value, ...(e.lease ? { lease: String(e.lease) } : {}) }], count: '1' } : { header: hdr() };
    };
    if (path === '/v3/lease/grant') {
      const id = ++this.nextLease;
      this.leases.add(id);
      return this.ok({ header: hdr(), ID: String(id), TTL: String(req.TTL) });
    }
    if (path === '/v3/kv/range') return this.ok(range(req.key));
    if (path === '/v3/lease/timetolive') return this.ok({ header: hdr(), ID: String(req.ID), TTL: this.leases.has(Number(req.ID)) ? '60' : '-1' });
    if (path !== '/v3/kv/txn') return this.error(404, 5, 'Not Found');
    const c = req.compare?.[0];
    const cur = c && this.kv.get(key(c.key));
    let ok = true;
    if (c?.target === 'CREATE') ok = (cur?.create ?? 0) === Number(c.create_revision ?? 0);
    else if (c?.target === 'MOD') ok = (cur?.mod ?? 0) === Number(c.mod_revision ?? 0);
    const ops = (ok ? req.success : req.failure) ?? [];
    const responses = [];
    for (const op of ops) {
      if (op.request_put) {
        const p = op.request_put, lease = Number(p.lease ?? 0);
        if (lease && !this.leases.has(lease)) return this.error(400, 5, 'etcdserver: requested lease not found');
        const k = key(p.key), old = this.kv.get(k);
        this.rev++;
        this.kv.set(k, { value: p.value ?? '', create: old?.create ?? this.rev, mod: this.rev, version: (old?.version ?? 0) + 1, lease });
        responses.push({ response_put: { header: hdr() } });
      } else if (op.request_range) responses.push({ response_range: range(op.request_range.key) });
    }
    return this.ok({ header: hdr(), ...(ok ? { succeeded: true } : {}), responses });
  }
  ok(v) { return { headers: [[':status', '200'], ['content-type', 'application/json']], body: Buffer.from(JSON.stringify(v), 'latin1') }; }
  error(status, code, message) {
    return { headers: [[':status', String(status)], ['content-type', 'application/json']], body: Buffer.from(JSON.stringify({ error: message, code, message }), 'latin1') };
  }
}

class VM {
  constructor(run, compiled) {
    Object.assign(this, { run, compiled, job: run.job, profile: run.profile });
    this.contexts = new Map(); this.nextId = 1;
    this.cur = null; this.effective = null; this.restrict = null;
    this.dead = null; this.stopNext = false;
    this.shared = new Map(); this.cas = 0;
    this.metrics = new Map(); this.metricNames = new Map(); this.metricNext = [0, 1, 2];
    this.hostNs = 0n; this.hostDepth = 0;
    this.tickMs = 0; this.nextTick = 0; this.ticks = 0; this.httpCalls = 0; this.httpToken = 0;
    this.etcd = new MiniEtcd(this.job.etcdAnswers === 'hostile'); this.pendingCalls = []; this.callResp = null;
    this.logs = [0, 0, 0, 0, 0, 0]; this.errorLogs = []; this.stderr = '';
    this.clockOffsetNs = 0n; this.wall0 = BigInt(Date.now()) * 1000000n - process.hrtime.bigint();
  }

  nowNs() { return this.wall0 + process.hrtime.bigint() + this.clockOffsetNs; }
  monoNs() { return process.hrtime.bigint() + this.clockOffsetNs; }

  // ctx is contextOrEffectiveContext() of cpp-host.
  ctx() { return (this.effective !== null && this.contexts.get(this.effective)) || this.cur; }

  addContext(kind, parent) {
    const c = { id: this.nextId++, kind, parent, filterState: new Map(), envoyState: new Map() };
    this.contexts.set(c.id, c);
    return c;
  }

  log(level, msg) {
    this.logs[level]++;
    if (level >= 4 && this.errorLogs.length < 50) this.errorLogs.push(msg.slice(0, 2000));
  }

  start() {
    const imports = this.imports();
    let memory = null;
    for (const imp of this.run.wasm.imports) {
      if (imp.kind === 2) memory = (imports[imp.module] ??= {})[imp.name] = new WebAssembly.Memory({ initial: imp.min, maximum: imp.max });
    }
    this.instance = new WebAssembly.Instance(this.compiled, imports);
    this.ex = this.instance.exports;
    this.mem = new Mem(memory ?? this.ex.memory);
    this.malloc = this.ex.malloc ?? this.ex.proxy_on_memory_allocate;
    this.mallocName = this.ex.malloc ? 'malloc' : 'proxy_on_memory_allocate';
    this.vmContext = { id: 0, kind: 'vm', filterState: new Map() };
    this.contexts.set(0, this.vmContext);
    // WasmBase::startVm: the reactor's _initialize, then main if exported (1.39: or __main_void).
    this.restrict = { during: '_initialize', allow: this.profile.initAllow };
    if (this.ex._initialize) {
      this.call(this.vmContext, '_initialize');
      this.restrict.during = 'main';
      if (this.ex.main) this.call(this.vmContext, 'main', 0, 0);
      else if (this.ex.__main_void && this.job.profile === 'envoy-1.39') this.call(this.vmContext, '__main_void');
    } else if (this.ex._start) this.call(this.vmContext, '_start');
    this.restrict = null;
  }

  // call runs an export on behalf of context c. A trap (any exception) fails the VM for good.
  call(c, name, ...args) {
    const f = this.ex[name];
    if (this.dead) return undefined;
    if (!f) return null;
    const saved = [this.cur, this.effective];
    this.cur = c; this.effective = null;
    try {
      const r = f(...args);
      if (saved[0] === null) this.deliverCalls(); // answers arrive once the top-level call returned
      return r === undefined ? 0 : r >>> 0;
    } catch (e) {
      if (e instanceof HarnessFault) throw e;
      this.dead = { callback: name, error: e instanceof Trap ? e.message : `${e?.name ?? 'Error'}: ${e?.message ?? e}` };
      return undefined;
    } finally {
      [this.cur, this.effective] = saved;
    }
  }

  // deliverCalls answers the pending calls to the job's etcd clusters through
  // proxy_on_http_call_response(root, token, headers, body size, trailers) on the calling root
  // context; the answer is readable during the callback as header map 6 and buffer 4.
  deliverCalls() {
    while (this.pendingCalls.length > 0 && !this.dead) {
      const call = this.pendingCalls.shift();
      const root = this.contexts.get(call.root);
      if (!root) continue;
      const resp = this.etcd.handle(call.path, call.body);
      this.callResp = resp;
      try {
        this.call(root, 'proxy_on_http_call_response', root.id, call.token, resp.headers.length, resp.body.length, 0);
      } finally {
        this.callResp = null;
      }
    }
  }

  // alloc is WasmBase::allocMemory: the module's malloc, run with the malloc allow-list in force.
  alloc(n) {
    const saved = [this.restrict, this.cur, this.effective];
    this.restrict = { during: `${this.mallocName} (called by the host)`, allow: this.profile.mallocAllow };
    this.cur = this.vmContext; this.effective = null;
    try {
      const p = this.malloc(n) >>> 0;
      return p !== 0 && this.mem.has(p, n) ? p : 0;
    } finally {
      [this.restrict, this.cur, this.effective] = saved;
    }
  }

  // copyOut is WasmBase::copyToPointerSize: "" is (0, 0) without a malloc.
  copyOut(s, ptrPtr, sizePtr) {
    let p = 0;
    if (s.length > 0) {
      p = this.alloc(s.length);
      if (!p || !this.mem.put(p, typeof s === 'string' ? Buffer.from(s, 'latin1') : s)) return false;
    }
    return this.mem.u32(ptrPtr, p) && this.mem.u32(sizePtr, s.length);
  }

  // Header maps: Envoy Context::getConstMap (reads) and getMap (writes).
  headerMap(type, write) {
    if ((type === 6 || type === 7) && this.callResp) return write ? null : type === 6 ? this.callResp.headers : [];
    const c = this.ctx();
    if (c.kind !== 'stream') return null;
    if (c.logPhase) return write ? null : type === 0 ? c.req : type === 2 ? c.resp : null;
    if (type === 0 && c.reqOpen) return c.req;
    if (type === 2 && c.respOpen) return c.resp;
    return null;
  }

  property(path) {
    const job = this.job;
    if (path === 'plugin_root_id') return job.rootId;
    if (path === 'plugin_name') return job.pluginName;
    if (path === 'plugin_vm_id') return job.vmId;
    const c = this.ctx();
    if (c.kind !== 'stream') return undefined;
    if (c.filterState.has(path)) return c.filterState.get(path);
    const first = (name) => c.req.find(([k]) => k === name)?.[1];
    const target = first(':path');
    switch (path) {
      case 'source\0address': return c.source || undefined;
      case 'destination\0address': return c.dest || undefined;
      case 'source\0port': return portOf(c.source);
      case 'destination\0port': return portOf(c.dest);
      case 'request\0path': return target;
      case 'request\0url_path': return target?.split('?')[0];
      case 'request\0query': return target === undefined ? undefined : target.includes('?') ? target.slice(target.indexOf('?') + 1) : '';
      case 'request\0host': return first(':authority');
      case 'request\0method': return first(':method');
      case 'request\0scheme': return first(':scheme');
      case 'request\0protocol': return 'HTTP/1.1';
      case 'connection\0mtls': return '\0';
      case 'response\0code': return c.status ? int64LE(c.status) : undefined;
      case 'response\0code_details': return c.status ? (c.localReplies.length ? c.localReplies[0].details : 'via_upstream') : undefined;
    }
    return undefined;
  }

  imports() {
    const vm = this, m = () => vm.mem;
    const fd12 = (fd) => fd === 1 || fd === 2;
    const writev = (fd, iovs, n) => { // exports.cc writevImpl
      if (!fd12(fd)) return { errno: ERRNO.BADF };
      let s = '';
      for (let i = 0; i < n >>> 0; i++) {
        const iov = m().bytes(iovs + 8 * i, 8);
        if (!iov) return { errno: ERRNO.FAULT };
        const dv = new DataView(iov.buffer, iov.byteOffset, 8), len = dv.getUint32(4, true);
        if (len === 0) continue;
        const part = m().str(dv.getUint32(0, true), len);
        if (part === null) return { errno: ERRNO.FAULT };
        s += part;
      }
      if (s.length) {
        if (fd === 2 && vm.stderr.length < 16384) vm.stderr += s;
        vm.log(fd === 1 ? 2 : 4, s.endsWith('\n') ? s.slice(0, -1) : s);
      }
      return { errno: 0, n: s.length };
    };
    const write = (fd, iovs, n, out) => { const r = writev(fd, iovs, n); return r.errno || (m().u32(out, r.n) ? 0 : ERRNO.FAULT); };
    const pwrite = (fd, iovs, n, _off, out) => write(fd, iovs, n, out);
    const onStdio = (ok, fail = ERRNO.BADF) => (fd) => (fd12(fd) ? ok : fail);
    const wasi = {
      args_get: () => 0,
      args_sizes_get: (argc, size) => (m().u32(argc, 0) && m().u32(size, 0) ? 0 : ERRNO.FAULT),
      // The job's variables, NAME=value NUL-terminated (cpp-host src/exports.cc wasi_unstable_environ_get).
      environ_get: (environ, buf) => {
        let o = buf >>> 0;
        for (const [i, e] of vm.job.env.entries()) {
          const b = Buffer.from(e + '\0', 'latin1');
          if (!m().u32(environ + 4 * i, o) || !m().put(o, b)) return ERRNO.FAULT;
          o += b.length;
        }
        return 0;
      },
      environ_sizes_get: (count, size) => (m().u32(count, vm.job.env.length) &&
        m().u32(size, vm.job.env.reduce((n, e) => n + e.length + 1, 0)) ? 0 : ERRNO.FAULT),
      clock_time_get: (id, _precision, out) => {
        if (id !== 0 && id !== 1) return ERRNO.NOTSUP;
        return m().u64(out, id === 0 ? vm.nowNs() : vm.monoNs()) ? 0 : ERRNO.FAULT;
      },
      random_get: (ptr, n) => {
        n >>>= 0;
        if (n > 65536) return ERRNO.INVAL;
        if (n === 0) return 0;
        const b = m().bytes(ptr, n);
        if (!b) return ERRNO.FAULT;
        randomFillSync(b);
        return 0;
      },
      fd_write: write,
      fd_read: () => ERRNO.NOSYS,
      fd_seek: () => 0,
      fd_close: () => 0,
      fd_fdstat_get: (fd, out) => { // {filetype 0, flags 0, rights_base FD_WRITE}, three u64 words
        if (!fd12(fd)) return ERRNO.BADF;
        m().put(out, new Uint8Array(new BigUint64Array([0n, 64n, 0n]).buffer));
        return 0;
      },
      fd_fdstat_set_flags: () => ERRNO.NOSYS,
      fd_prestat_get: () => ERRNO.BADF,
      fd_prestat_dir_name: () => ERRNO.NOSYS,
      path_open: () => ERRNO.NOENT,
      proc_exit: (code) => { vm.log(4, `proc_exit(${code})`); },
      sched_yield: () => 0,
      poll_oneoff: (_in, _out, _n, nevents) => {
        if (!vm.profile.pollOneoffWorks) return ERRNO.NOSYS;
        return m().u32(nevents, 0) ? 0 : ERRNO.FAULT;
      },
      // PR #533 (envoy-1.39)
      fd_filestat_get: () => ERRNO.BADF,
      path_filestat_get: () => ERRNO.NOTSUP,
      clock_res_get: (id, out) => (id !== 0 && id !== 1 ? ERRNO.NOTSUP : m().u64(out, 1) ? 0 : ERRNO.FAULT),
      fd_advise: () => 0,
      fd_allocate: onStdio(0), fd_datasync: onStdio(0), fd_fdstat_set_rights: onStdio(0),
      fd_filestat_set_size: onStdio(0), fd_filestat_set_times: onStdio(0), fd_sync: onStdio(0),
      fd_pread: () => ERRNO.NOSYS,
      fd_pwrite: pwrite,
      fd_readdir: (_fd, _buf, _len, _cookie, out) => (m().u32(out, 0) ? ERRNO.NOTDIR : ERRNO.FAULT),
      fd_renumber: (fd, to) => (fd12(fd) && fd12(to) ? ERRNO.NOTSUP : ERRNO.BADF),
      fd_tell: (fd, out) => (!fd12(fd) ? ERRNO.BADF : m().u64(out, 0) ? 0 : ERRNO.FAULT),
      path_readlink: (_fd, _p, _pl, _b, _bl, out) => (m().u32(out, 0) ? ERRNO.NOTSUP : ERRNO.FAULT),
      sock_accept: (_fd, _flags, out) => (m().u64(out, 0) ? ERRNO.NOTSUP : ERRNO.FAULT),
      sock_recv: (_fd, _d, _l, _f, out0, out1) => (m().u32(out0, 0) && m().u16(out1, 0) ? ERRNO.NOTSUP : ERRNO.FAULT),
      sock_send: (_fd, _d, _l, _f, out) => (m().u32(out, 0) ? ERRNO.NOTSUP : ERRNO.FAULT),
    };
    for (const n of ['path_create_directory', 'path_filestat_set_times', 'path_link', 'path_remove_directory',
      'path_rename', 'path_symlink', 'path_unlink_file', 'sock_shutdown']) wasi[n] = () => ERRNO.NOTSUP;

    const S = ST;
    const readStr = (p, n) => m().str(p, n);
    const env = {
      proxy_log: (level, p, n) => {
        if (level >>> 0 > 5) return S.BadArgument;
        const s = readStr(p, n);
        if (s === null) return S.InvalidMemoryAccess;
        vm.log(level, s);
        return S.Ok;
      },
      proxy_get_log_level: (out) => (m().u32(out, vm.job.logLevel) ? S.Ok : S.InvalidMemoryAccess),
      proxy_get_status: (code, pp, sp) => (m().u32(code, 0) && vm.copyOut('', pp, sp) ? S.Ok : S.InvalidMemoryAccess),
      proxy_get_property: (pp, pn, vpp, vsp) => {
        const path = readStr(pp, pn);
        if (path === null) return S.InvalidMemoryAccess;
        const v = vm.property(path);
        if (v === undefined) return S.NotFound;
        return vm.copyOut(v, vpp, vsp) ? S.Ok : S.InvalidMemoryAccess;
      },
      proxy_set_property: (kp, kn, vp, vn) => {
        const k = readStr(kp, kn), v = readStr(vp, vn);
        if (k === null || v === null) return S.InvalidMemoryAccess;
        const c = vm.ctx();
        if (c.kind !== 'stream') return S.NotFound;
        c.filterState.set(k, v);
        return S.Ok;
      },
      proxy_send_local_response: (code, dp, dn, bp, bn, hp, hn, grpc) => {
        const details = readStr(dp, dn), body = readStr(bp, bn), hdrs = m().bytes(hp, hn);
        if (details === null || body === null || hdrs === null) return S.InvalidMemoryAccess;
        const c = vm.ctx();
        if (c.kind === 'stream' && !c.conn) c.localReplies.push({ status: code >>> 0, body, details, headers: decodePairs(hdrs), grpc });
        vm.stopNext = true;
        return S.Ok;
      },
      proxy_get_shared_data: (kp, kn, vpp, vsp, casp) => {
        const k = readStr(kp, kn);
        if (k === null) return S.InvalidMemoryAccess;
        const e = vm.shared.get(k);
        if (!e) return S.NotFound;
        return vm.copyOut(e.value, vpp, vsp) && m().u32(casp, e.cas) ? S.Ok : S.InvalidMemoryAccess;
      },
      proxy_set_shared_data: (kp, kn, vp, vn, cas) => { // src/shared_data.cc SharedData::set
        const k = readStr(kp, kn), v = readStr(vp, vn);
        if (k === null || v === null) return S.InvalidMemoryAccess;
        const e = vm.shared.get(k);
        cas >>>= 0;
        if (e && cas !== 0 && cas !== e.cas) return S.CasMismatch;
        vm.cas = (vm.cas + 1) >>> 0 || 1;
        vm.shared.set(k, { value: v, cas: vm.cas });
        return S.Ok;
      },
      proxy_get_header_map_value: (type, kp, kn, vpp, vsp) => {
        if (type >>> 0 > 7) return S.BadArgument;
        const k = readStr(kp, kn);
        if (k === null) return S.InvalidMemoryAccess;
        const map = vm.headerMap(type, false);
        if (!map) return vm.ctx().logPhase ? S.NotFound : S.BadArgument;
        const key = asciiLower(k), e = map.find(([name]) => name === key);
        if (!e) return vm.run.abi === '0_1_0' ? (vm.copyOut('', vpp, vsp) ? S.Ok : S.InvalidMemoryAccess) : S.NotFound;
        return vm.copyOut(e[1], vpp, vsp) ? S.Ok : S.InvalidMemoryAccess;
      },
      proxy_get_header_map_pairs: (type, pp, sp) => {
        if (type >>> 0 > 7) return S.BadArgument;
        const map = vm.headerMap(type, false) ?? [];
        return vm.copyOut(map.length ? encodePairs(map) : '', pp, sp) ? S.Ok : S.InvalidMemoryAccess;
      },
      proxy_get_header_map_size: (type, out) => {
        if (type >>> 0 > 7) return S.BadArgument;
        const map = vm.headerMap(type, true);
        if (!map) return S.BadArgument;
        return m().u32(out, map.reduce((n, [k, v]) => n + k.length + v.length, 0)) ? S.Ok : S.InvalidMemoryAccess;
      },
      proxy_add_header_map_value: (type, kp, kn, vp, vn) => editMap(type, kp, kn, vp, vn, (map, k, v) => map.push([k, v])),
      proxy_replace_header_map_value: (type, kp, kn, vp, vn) => editMap(type, kp, kn, vp, vn, (map, k, v) => { removeAll(map, k); map.push([k, v]); }),
      proxy_remove_header_map_value: (type, kp, kn) => editMap(type, kp, kn, 0, 0, (map, k) => removeAll(map, k)),
      proxy_set_header_map_pairs: (type, p, n) => {
        if (type >>> 0 > 7) return S.BadArgument;
        const b = m().bytes(p, n);
        if (!b) return S.InvalidMemoryAccess;
        const map = vm.headerMap(type, true);
        if (!map) return S.BadArgument;
        map.length = 0;
        for (const [k, v] of decodePairs(b)) map.push([asciiLower(k), v]);
        return S.Ok;
      },
      proxy_get_buffer_status: (type, lenp, flagsp) => {
        const b = buffer(type);
        if (b === undefined) return S.BadArgument;
        if (b === null) return S.NotFound;
        return m().u32(lenp, b.length) && m().u32(flagsp, 0) ? S.Ok : S.InvalidMemoryAccess;
      },
      proxy_get_buffer_bytes: (type, start, length, pp, sp) => {
        const b = buffer(type);
        if (b === undefined) return S.BadArgument;
        if (b === null) return S.NotFound;
        start >>>= 0; length >>>= 0;
        if (start + length > 0xffffffff) return S.BadArgument;
        const s = b.slice(Math.min(start, b.length), Math.min(start + length, b.length));
        return vm.copyOut(s, pp, sp) ? S.Ok : S.InvalidMemoryAccess;
      },
      proxy_set_buffer_bytes: () => S.Unimplemented,
      proxy_http_call: (up, un, hp, hn, bp, bn, tp, tn, timeout, tokenp) => {
        const cluster = readStr(up, un), hdrs = m().bytes(hp, hn), body = m().bytes(bp, bn), trailers = m().bytes(tp, tn);
        if (cluster === null || !hdrs || !body || !trailers || !m().u32(tokenp, 0)) return S.InvalidMemoryAccess;
        const names = new Set(decodePairs(hdrs).map(([k]) => asciiLower(k)));
        if (timeout < 0 || cluster === '' || !names.has(':path') || !names.has(':method') || !names.has(':authority')) return S.BadArgument;
        vm.httpCalls++;
        vm.httpToken++;
        m().u32(tokenp, vm.httpToken);
        if (vm.job.etcdClusters.includes(cluster)) {
          // cpp-host http_call: the call belongs to the root context of the calling one.
          let c = vm.ctx();
          while (c && c.kind === 'stream') c = vm.contexts.get(c.parent);
          const path = decodePairs(hdrs).find(([k]) => asciiLower(k) === ':path')?.[1] ?? '';
          vm.pendingCalls.push({ root: c?.id ?? 0, token: vm.httpToken, path, body: Buffer.from(body) });
        }
        return S.Ok; // other clusters: never answered
      },
      proxy_set_tick_period_milliseconds: (ms) => { vm.tickMs = ms >>> 0; vm.nextTick = Number(vm.clockOffsetNs / 1000000n) + vm.tickMs; return S.Ok; },
      proxy_get_current_time_nanoseconds: (out) => (m().u64(out, vm.nowNs()) ? S.Ok : S.InvalidMemoryAccess),
      proxy_define_metric: (type, np, nn, idp) => {
        type >>>= 0;
        if (type > 2) return S.BadArgument;
        const name = readStr(np, nn);
        if (name === null) return S.InvalidMemoryAccess;
        const id = (vm.metricNext[type] += 4); // Envoy Wasm: the metric type in the two low bits
        if (!vm.metrics.has(name)) vm.metrics.set(name, { type, value: 0 });
        vm.metricNames.set(id, name);
        return m().u32(idp, id) ? S.Ok : S.InvalidMemoryAccess;
      },
      proxy_increment_metric: (id, offset) => {
        const metric = vm.metrics.get(vm.metricNames.get(id >>> 0));
        if ((id & 3) > 1) return S.BadArgument;
        if (!metric) return S.NotFound;
        if ((id & 3) === 0 && offset <= 0n) return S.BadArgument;
        metric.value += Number(offset);
        return S.Ok;
      },
      proxy_record_metric: (id, value) => {
        const metric = vm.metrics.get(vm.metricNames.get(id >>> 0));
        if (!metric) return S.NotFound;
        if ((id & 3) === 1) metric.value = Number(BigInt.asUintN(64, value)); else metric.value += Number(BigInt.asUintN(64, value));
        return S.Ok;
      },
      proxy_get_metric: (id, out) => {
        if ((id & 3) > 1) return S.BadArgument;
        const metric = vm.metrics.get(vm.metricNames.get(id >>> 0));
        if (!metric) return S.NotFound;
        return m().u64(out, BigInt.asUintN(64, BigInt(metric.value))) ? S.Ok : S.InvalidMemoryAccess;
      },
      proxy_set_effective_context: (id) => {
        if (!vm.contexts.has(id >>> 0)) return S.BadArgument;
        vm.effective = id >>> 0;
        return S.Ok;
      },
      proxy_done: () => S.NotFound,
      proxy_continue_stream: (type) => { const c = vm.ctx(); if (c.kind === 'stream' && type === 0) c.continued++; return S.Ok; },
      proxy_close_stream: () => { const c = vm.ctx(); if (c.kind === 'stream') c.closed++; return S.Ok; },
      // Envoy foreign.cc: the registered functions by name; cpp-host src/exports.cc answers NotFound
      // for a name no one registered. Only set_envoy_filter_state is emulated.
      proxy_call_foreign_function: (np, nn, ap, an) => {
        const name = readStr(np, nn), args = readStr(ap, an);
        if (name === null || args === null) return S.InvalidMemoryAccess;
        if (name !== 'set_envoy_filter_state') return S.NotFound;
        return setEnvoyFilterState(args);
      },
      proxy_continue_request: () => env.proxy_continue_stream(0),
      proxy_continue_response: () => S.Ok,
      proxy_clear_route_cache: () => S.Ok,
      proxy_get_configuration: (pp, sp) => (vm.ctx().pluginConfigReadable ? (vm.copyOut(vm.ctx().pluginConfig ?? vm.run.config, pp, sp) ? S.Ok : S.InvalidMemoryAccess) : S.NotFound),
      pthread_equal: (a, b) => (a === b ? 1 : 0),
      emscripten_notify_memory_growth: () => {},
      envoy_resolve_dns: () => S.BadArgument,
    };
    for (const n of ['proxy_register_shared_queue', 'proxy_resolve_shared_queue', 'proxy_dequeue_shared_queue',
      'proxy_enqueue_shared_queue', 'proxy_grpc_call', 'proxy_grpc_stream', 'proxy_grpc_close', 'proxy_grpc_cancel',
      'proxy_grpc_send']) env[n] = () => S.Unimplemented;

    // set_envoy_filter_state (Envoy foreign.cc, Context::setEnvoyFilterState in context.cc): the
    // argument is the protobuf SetEnvoyFilterStateArguments {path = 1, value = 2, span = 3}; one
    // that does not parse is BadArgument, a key without a registered object factory NotFound, a
    // value the factory refuses BadArgument, a context without a stream NotFound.
    function setEnvoyFilterState(b) {
      const f = decodeProto(b);
      if (!f) return S.BadArgument;
      const path = f[1] ?? '', value = f[2] ?? '';
      const factories = {
        'envoy.network.transport_socket.original_dst_address': (v) => /^(\d{1,3}(\.\d{1,3}){3}|\[[0-9a-fA-F:.]+\]):\d{1,5}$/.test(v),
        'envoy.tcp_proxy.cluster': () => true,
      };
      if (!factories[path]) return S.NotFound;
      if (!factories[path](value)) return S.BadArgument;
      const c = vm.ctx();
      if (c.kind !== 'stream') return S.NotFound;
      c.envoyState.set(path, { value, span: Number(f[3] ?? 0) });
      return S.Ok;
    }

    function removeAll(map, k) { let j = 0; for (const e of map) if (e[0] !== k) map[j++] = e; map.length = j; }
    function editMap(type, kp, kn, vp, vn, edit) {
      if (type >>> 0 > 7) return S.BadArgument;
      const k = readStr(kp, kn), v = readStr(vp, vn);
      if (k === null || v === null) return S.InvalidMemoryAccess;
      const map = vm.headerMap(type, true);
      if (!map) return S.BadArgument;
      edit(map, asciiLower(k), v);
      return S.Ok;
    }
    // Envoy Context::getBuffer: undefined = unknown type, null = not available now.
    function buffer(type) {
      type >>>= 0;
      const c = vm.ctx();
      if (type > 8) return undefined;
      if (type === 4) return vm.callResp ? vm.callResp.body : null;
      if (type === 7) return c.pluginConfigReadable ? c.pluginConfig ?? vm.run.config : null;
      if (type === 6) return ''; // the VM configuration: none
      if (type === 1) return c.kind === 'stream' && c.responseBody !== undefined ? c.responseBody : '';
      if (type === 0) return '';
      return null;
    }

    // Every import is wrapped: counted against the restricted-callback allow-list, and kept apart
    // from faults of this script, which must never pass for the module's traps.
    const wrap = (mod, name, fn) => {
      const full = `${mod}.${name}`;
      return (...args) => {
        if (vm.restrict && !vm.restrict.allow.has(full)) throw new Trap(`restricted_callback: ${full} called during ${vm.restrict.during}`);
        // Time in host functions (this script's JS, Envoy's C++) is kept apart from the module's.
        const outer = vm.hostDepth++ === 0, t0 = outer ? process.hrtime.bigint() : 0n;
        try {
          return fn(...args);
        } catch (e) {
          if (e instanceof Trap || e instanceof HarnessFault) throw e;
          if (e instanceof RangeError && /call stack/.test(e.message)) throw e; // the module's recursion, not ours
          throw new HarnessFault(`fault in host function ${full}: ${e?.stack ?? e}`);
        } finally {
          vm.hostDepth--;
          if (outer) vm.hostNs += process.hrtime.bigint() - t0;
        }
      };
    };
    const out = { env: {}, wasi_snapshot_preview1: {}, wasi_unstable: {} };
    const envNames = { ...ENV_ALL, ...ENV_BY_ABI[vm.run.abi] };
    for (const n of Object.keys(envNames)) out.env[n] = wrap('env', n, env[n]);
    for (const n of Object.keys(vm.profile.wasi)) for (const mod of ['wasi_snapshot_preview1', 'wasi_unstable']) out[mod][n] = wrap(mod, n, wasi[n]);
    return out;
  }
}

// ---- Running a job ----------------------------------------------------------------------------------

let jobName = ''; // every line of a named job carries its name
const emit = (o) => process.stdout.write(`${JSON.stringify(jobName ? { job: jobName, ...o } : o)}\n`);

function usage(msg) {
  process.stderr.write(`hashlbv8: ${msg}\nusage: node --no-liftoff --wasm-max-mem-pages=16384 hashlbv8.mjs MODULE.wasm JOB.json\n`);
  process.exit(2);
}

// loadJobs reads a job, or {"defaults": {...}, "jobs": [...]}: jobs run one after the other, each
// taking what it does not set from defaults (the request phases, typically, given once).
function loadJobs(path) {
  const parsed = JSON.parse(readFileSync(path, 'utf8'));
  const jobs = Array.isArray(parsed.jobs) ? parsed.jobs.map((j) => ({ ...parsed.defaults, ...j })) : [parsed];
  const phases = new Map(); // the phases of defaults are converted once, not once per job
  return jobs.map((j) => loadJob(j, phases));
}

function loadJob(job, phaseCache) {
  // Strings travel as latin1 (one char a byte) or UTF-8; inside, every string is latin1.
  const bytes = job.strings === 'latin1' ? (s) => s : (s) => Buffer.from(s, 'utf8').toString('latin1');
  if (!PROFILES[job.profile]) usage(`unknown profile ${JSON.stringify(job.profile)} (envoy-1.33 or envoy-1.39)`);
  if (typeof job.config !== 'string') usage('"config" must be the plugin configuration as a JSON string');
  if (!Array.isArray(job.phases) || job.phases.length === 0) usage('"phases" is missing');
  return {
    name: typeof job.name === 'string' ? job.name : '', profile: job.profile, config: bytes(job.config),
    rootId: bytes(job.rootId ?? 'hashlb'), pluginName: bytes(job.pluginName ?? job.rootId ?? 'hashlb'), vmId: bytes(job.vmId ?? ''),
    warmup: job.warmup ?? 0, repeat: job.repeat ?? 1, logLevel: job.logLevel ?? 2,
    intervalNs: BigInt(Math.round((job.requestIntervalMs ?? 1) * 1e6)), slowUs: (job.slowMs ?? 50) * 1000,
    budgetMs: job.budgetMs ?? 0, recheckUs: job.recheckUs ?? 0, perRequest: !!job.perRequest, finalTick: !!job.finalTick,
    filter: job.filter === 'http' || job.filter === 'network' ? job.filter : '',
    reconfigure: job.reconfigure && Array.isArray(job.reconfigure.configs) && job.reconfigure.configs.length > 0 && job.reconfigure.every > 0
      ? { every: job.reconfigure.every, window: job.reconfigure.window ?? 0, configs: job.reconfigure.configs.map(bytes) } : null,
    etcdClusters: Array.isArray(job.etcdClusters) ? job.etcdClusters.map(bytes) : [],
    etcdAnswers: job.etcdAnswers === 'hostile' ? 'hostile' : 'etcd',
    env: job.env && typeof job.env === 'object' ? Object.entries(job.env).map(([k, v]) => bytes(k) + '=' + bytes(String(v))) : [],
    sessionCookie: typeof job.sessionCookie === 'string' ? bytes(job.sessionCookie) : '',
    phases: job.phases.map((ph) => {
      const key = `${job.strings}`;
      if (!phaseCache.has(ph)) phaseCache.set(ph, new Map());
      const cached = phaseCache.get(ph);
      if (!cached.has(key)) {
        cached.set(key, {
          name: ph.name,
          requests: (ph.requests ?? []).map((r) => ({
            class: r.class ?? '', source: bytes(r.source ?? ''), dest: bytes(r.dest ?? ''),
            headers: (r.headers ?? []).map(([k, v]) => [asciiLower(bytes(k)), bytes(v)]),
          })),
        });
      }
      return cached.get(key);
    }),
  };
}

// The headers hashlb sets, by the configuration's names (defaults as lbcore's).
function outcomeHeaders(configText) {
  let c = {};
  try { c = JSON.parse(Buffer.from(configText, 'latin1').toString('utf8')) ?? {}; } catch { /* the module will say */ }
  const up = typeof c.upstreamHeader === 'string' ? c.upstreamHeader : 'x-envoy-original-dst-host';
  const svc = typeof c.serviceHeader === 'string' ? c.serviceHeader : 'x-hashlb-service';
  return { up: asciiLower(up), svc: asciiLower(svc), network: c.filterType === 'network' };
}

const pct = (sorted, q) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] : 0);
const show = (s) => Buffer.from(s, 'latin1').toString('utf8'); // for JSON output
const MAX_OUTCOMES = 64;

class ClassStats {
  constructor(name) { this.name = name; this.us = []; this.cpu = []; this.guest = []; this.maxMemory = 0; this.outcomes = new Map(); this.otherOutcomes = 0; this.otherSample = null; }
  add(us, cpuUs, memory, outcome, measured, guestUs) {
    if (measured) { this.us.push(us); this.cpu.push(cpuUs); this.guest.push(guestUs); }
    this.maxMemory = Math.max(this.maxMemory, memory);
    const key = JSON.stringify(outcome);
    const o = this.outcomes.get(key);
    if (o) o.count++;
    else if (this.outcomes.size < MAX_OUTCOMES) this.outcomes.set(key, { count: 1, ...outcome });
    else { this.otherOutcomes++; this.otherSample ??= outcome; }
  }
  line(phase) {
    const s = Float64Array.from(this.us).sort(), cpu = Float64Array.from(this.cpu).sort(), guest = Float64Array.from(this.guest).sort();
    const r = (x) => Math.round(x * 10) / 10;
    return {
      type: 'class', phase, class: this.name, count: s.length, p50Us: r(pct(s, 0.5)), p99Us: r(pct(s, 0.99)),
      maxUs: r(pct(s, 1)), cpuP50Us: r(pct(cpu, 0.5)), cpuP99Us: r(pct(cpu, 0.99)), cpuMaxUs: r(pct(cpu, 1)),
      guestCpuP99Us: r(pct(guest, 0.99)), guestCpuMaxUs: r(pct(guest, 1)),
      maxMemory: this.maxMemory, outcomes: [...this.outcomes.values()],
      otherOutcomes: this.otherOutcomes, ...(this.otherSample ? { otherSample: this.otherSample } : {}),
    };
  }
}

// request runs one stream through the VM and returns its outcome; null after a trap.
function request(vm, root, req, names) {
  const c = vm.addContext('stream', root.id);
  const jarName = vm.job.sessionCookie, client = jarName ? req.headers.find(([k]) => k === 'x-v8-client')?.[1] : undefined;
  const held = client !== undefined ? (vm.jar ??= new Map()).get(client) : undefined;
  const headers = req.headers.map((h) => h.slice());
  if (held) headers.push(['cookie', `${jarName}=${held.value}`]);
  Object.assign(c, { req: headers, resp: null, source: req.source, dest: req.dest,
    reqOpen: false, respOpen: false, logPhase: false, localReplies: [], continued: 0, closed: 0, status: 0 });
  try {
    vm.call(c, 'proxy_on_context_create', c.id, root.id);
    c.reqOpen = true;
    vm.stopNext = false;
    const action = vm.call(c, 'proxy_on_request_headers', c.id, c.req.length, 1);
    if (vm.dead) return null;
    const paused = vm.stopNext || (action !== null && action !== 0);
    if (!paused) c.reqOpen = false; // Envoy lets go of the request headers on Continue
    const copies = (n) => (n === '' ? [] : c.req.filter(([k]) => k === n).map(([, v]) => show(v)));
    const outcome = {};
    const reply = c.localReplies[0];
    if (reply) {
      outcome.local = { status: reply.status, body: show(reply.body) };
      if (c.localReplies.length > 1) outcome.localReplies = c.localReplies.length;
      c.resp = [[':status', String(reply.status)]];
      for (const [k, v] of reply.headers) c.resp.push([asciiLower(k), v]);
      if (reply.body.length) {
        c.resp.push(['content-length', String(reply.body.length)]);
        if (!c.resp.some(([k]) => k === 'content-type')) c.resp.push(['content-type', 'text/plain']);
      }
      c.status = reply.status;
    } else {
      outcome.action = paused ? (c.continued ? 'paused-then-continued' : 'paused') : 'continue';
      outcome.upstream = copies(names.up);
      outcome.service = copies(names.svc);
      c.resp = [[':status', '200'], ['content-length', '0']];
      c.status = 200;
    }
    if (c.closed) outcome.closed = c.closed;
    c.respOpen = true;
    vm.stopNext = false;
    const bodyFollows = reply && reply.body.length > 0;
    const raction = vm.call(c, 'proxy_on_response_headers', c.id, c.resp.length, bodyFollows ? 0 : 1);
    if (!vm.stopNext && (raction === 0 || raction === null)) c.respOpen = false;
    if (bodyFollows && !vm.dead) { c.responseBody = reply.body; vm.call(c, 'proxy_on_response_body', c.id, reply.body.length, 1); }
    c.reqOpen = c.respOpen = false;
    c.logPhase = true;
    vm.call(c, 'proxy_on_log', c.id);
    c.logPhase = false;
    vm.call(c, 'proxy_on_done', c.id);
    vm.call(c, 'proxy_on_delete', c.id);
    if (client !== undefined && !vm.dead) {
      const set = c.resp.filter(([k, v]) => k === 'set-cookie' && v.startsWith(jarName + '=')).map(([, v]) => v.slice(jarName.length + 1).split(';')[0]);
      const served = outcome.service?.[0];
      if (!held) outcome.session = set.length ? 'issued' : 'none';
      else if (served !== held.service) outcome.session = 'moved';
      else outcome.session = set.length ? 'reissued' : 'kept';
      if (set.length) vm.jar.set(client, { value: set[set.length - 1], service: served });
    }
    return vm.dead ? null : outcome;
  } finally {
    vm.contexts.delete(c.id);
  }
}

// connection runs one TCP connection through the VM as Envoy's network filter does and returns
// its outcome; null after a trap. Envoy (context.cc): the context is created and
// proxy_on_new_connection called when the connection is accepted; then the data callbacks; the
// end of upstream data signals proxy_on_upstream_connection_close (peer unknown); the downstream
// close event proxy_on_downstream_connection_close, then proxy_on_done, proxy_on_log and
// proxy_on_delete (Context::onCloseTCP).
function connection(vm, root, req, i) {
  const c = vm.addContext('stream', root.id);
  Object.assign(c, { conn: true, req: [], resp: null, source: req.source, dest: req.dest, reqOpen: false, respOpen: false,
    logPhase: false, localReplies: [], continued: 0, closed: 0, status: 0 });
  try {
    vm.call(c, 'proxy_on_context_create', c.id, root.id);
    vm.stopNext = false;
    const action = vm.call(c, 'proxy_on_new_connection', c.id);
    if (vm.dead) return null;
    const fs = c.envoyState.get('envoy.network.transport_socket.original_dst_address');
    const outcome = { action: action === 0 || action === null ? 'continue' : 'paused', upstream: fs ? [show(fs.value)] : [], service: [] };
    if (fs && fs.span !== 2) outcome.span = fs.span;
    if (c.closed) outcome.closed = c.closed;
    if (outcome.action === 'continue' && !c.closed) {
      vm.call(c, 'proxy_on_downstream_data', c.id, 5, 0);
      if (i % 2 === 0) { // the upstream ends first, else the client closes (or resets) first
        vm.call(c, 'proxy_on_upstream_data', c.id, 3, 1);
        vm.call(c, 'proxy_on_upstream_connection_close', c.id, 0);
      }
    }
    vm.call(c, 'proxy_on_downstream_connection_close', c.id, c.closed || i % 2 === 0 ? 1 : 2);
    vm.call(c, 'proxy_on_done', c.id);
    c.logPhase = true;
    vm.call(c, 'proxy_on_log', c.id);
    c.logPhase = false;
    vm.call(c, 'proxy_on_delete', c.id);
    return vm.dead ? null : outcome;
  } finally {
    vm.contexts.delete(c.id);
  }
}

// startVM starts a VM of run's module as cpp-host does and configures the plugin; it emits the
// "start" line, or the trap, and returns { vm, root }, or { vm: null, result } when it did not start.
function startVM(run, compiled, phase) {
  const vm = new VM(run, compiled);
  const t0 = process.hrtime.bigint();
  const trapLine = (extra) => ({ type: 'trap', phase: phase.name, ...extra, callback: vm.dead.callback, error: vm.dead.error, stderr: vm.stderr.slice(-4000), errorLogs: vm.errorLogs.slice(-5) });
  try {
    vm.start();
  } catch (e) {
    if (e instanceof HarnessFault) throw e;
    emit({ type: 'start', phase: phase.name, ok: false, error: `Failed to create new Wasm instance: ${e.message}` });
    return { vm: null, result: { ok: false, trapped: false } };
  }
  if (vm.dead) {
    emit(trapLine({ class: '(start)', request: -1 }));
    return { vm: null, result: { ok: false, trapped: true } };
  }
  const root = vm.addContext('root', 0);
  const { vmStart, configure } = startRoot(vm, root, run.config.length);
  const initMs = Number(process.hrtime.bigint() - t0) / 1e6;
  if (vm.dead) { emit(trapLine({ class: '(configure)', request: -1 })); return { vm: null, result: { ok: false, trapped: true } }; }
  if (vmStart === 0 || configure === 0) {
    emit({ type: 'start', phase: phase.name, ok: false, error: vmStart === 0 ? 'vm start refused' : 'configure refused',
      logs: vm.errorLogs.map(show), stderr: show(vm.stderr.slice(-4000)) });
    return { vm: null, result: { ok: false, trapped: false } };
  }
  emit({ type: 'start', phase: phase.name, ok: true, initMs: Math.round(initMs), memory: vm.mem.memory.buffer.byteLength });
  return { vm, root };
}

// startRoot starts and configures a new root context as ContextBase::onStart and onConfigure do:
// the plugin configuration (configLength bytes) is readable in proxy_on_context_create and in
// proxy_on_configure, not in proxy_on_vm_start; proxy_on_configure is called only when
// proxy_on_vm_start did not refuse (configure is null then).
function startRoot(vm, root, configLength) {
  root.pluginConfigReadable = true;
  vm.call(root, 'proxy_on_context_create', root.id, 0);
  root.pluginConfigReadable = false;
  const vmStart = vm.call(root, 'proxy_on_vm_start', root.id, 0);
  let configure = null;
  if (!vm.dead && vmStart !== 0) {
    root.pluginConfigReadable = true;
    configure = vm.call(root, 'proxy_on_configure', root.id, configLength);
    root.pluginConfigReadable = false;
  }
  return { vmStart, configure };
}

// reconfigure applies config to the running VM as a new root context (cpp-host WasmBase::start
// and configure: ContextBase::onStart, onConfigure), then shuts the old one down
// (WasmBase::startShutdown: proxy_on_done, then proxy_on_delete when it returned true). It emits
// a "reconfigure" line and returns the new root, or null when the configuration was refused or
// the VM trapped (the old root stays current, as it does for Envoy's rejected update).
function reconfigure(vm, old, config, phase, at) {
  const root = vm.addContext('root', 0);
  root.pluginConfig = config;
  const t = process.hrtime.bigint();
  const { vmStart, configure } = startRoot(vm, root, config.length);
  const ms = Number(process.hrtime.bigint() - t) / 1e6;
  const ok = !vm.dead && vmStart !== 0 && configure !== 0;
  if (!ok) {
    if (!vm.dead) vm.call(root, 'proxy_on_delete', root.id);
    vm.contexts.delete(root.id);
    emit({ type: 'reconfigure', phase: phase.name, request: at, ok: false, ms: Math.round(ms * 100) / 100, logs: vm.errorLogs.slice(-5).map(show) });
    return null;
  }
  const done = vm.call(old, 'proxy_on_done', old.id);
  if (done !== 0) { vm.call(old, 'proxy_on_delete', old.id); vm.contexts.delete(old.id); }
  emit({ type: 'reconfigure', phase: phase.name, request: at, ok: true, ms: Math.round(ms * 100) / 100, memory: vm.mem.memory.buffer.byteLength });
  return root;
}

function runPhase(run, compiled, phase) {
  const job = run.job;
  const t0 = process.hrtime.bigint();
  const started = startVM(run, compiled, phase);
  if (!started.vm) return started.result;
  const { vm } = started;
  let { root } = started;
  const rc = job.reconfigure;
  let reconfigured = 0, lastReconfigure = -Infinity;
  const trapLine = (extra) => ({ type: 'trap', phase: phase.name, ...extra, callback: vm.dead.callback, error: vm.dead.error, stderr: vm.stderr.slice(-4000), errorLogs: vm.errorLogs.slice(-5) });

  const names = outcomeHeaders(run.config);
  if (job.filter) names.network = job.filter === 'network';
  const stats = new Map();
  const total = job.warmup + job.repeat, reqs = phase.requests;
  let ran = 0, slow = 0, memoryAfterWarmup = 0, stopped = null, slowest = null;
  const rechecks = []; // the measured requests over job.recheckUs, run again after the last one
  for (let i = 0; i < total && reqs.length > 0; i++) {
    const req0 = reqs[i % reqs.length], measured = i >= job.warmup;
    if (rc && i > 0 && i % rc.every === 0) {
      const next = reconfigure(vm, root, rc.configs[reconfigured++ % rc.configs.length], phase, i);
      if (vm.dead) { emit(trapLine({ class: '(reconfigure)', request: i })); break; }
      if (next) { root = next; lastReconfigure = i; }
    }
    const req = i - lastReconfigure < (rc?.window ?? 0) ? { ...req0, class: `${req0.class} (after reconfigure)` } : req0;
    if (vm.tickMs > 0) {
      const nowMs = Number(vm.clockOffsetNs / 1000000n);
      if (nowMs >= vm.nextTick) { vm.nextTick = nowMs + vm.tickMs; vm.ticks++; vm.call(root, 'proxy_on_tick', root.id); }
      if (vm.dead) { emit(trapLine({ class: '(tick)', request: i })); break; }
    }
    const t = process.hrtime.bigint(), cpu0 = process.cpuUsage(), host0 = vm.hostNs;
    const outcome = names.network ? connection(vm, root, req, i) : request(vm, root, req, names);
    const us = Number(process.hrtime.bigint() - t) / 1000, cpu1 = process.cpuUsage(cpu0), cpuUs = cpu1.user + cpu1.system;
    // The module's share: less the time spent in host functions, whose JS (building header maps,
    // copying 1 MiB values, this script's own garbage) Envoy runs as C++. Of the process's CPU
    // (which counts V8's background threads, marking this script's heap) and the wall time
    // (which counts preemption), the smaller.
    const hostUs = Number(vm.hostNs - host0) / 1000;
    const guestUs = Math.max(0, Math.min(cpuUs, us) - hostUs);
    vm.clockOffsetNs += job.intervalNs;
    if (outcome === null) { emit(trapLine({ class: req.class, request: i, warmup: !measured })); break; }
    ran++;
    const memory = vm.mem.memory.buffer.byteLength;
    if (!stats.has(req.class)) stats.set(req.class, new ClassStats(req.class));
    const cs = stats.get(req.class);
    if (measured && job.recheckUs > 0 && guestUs > job.recheckUs) rechecks.push({ req, i, cs, at: cs.guest.length });
    cs.add(us, cpuUs, memory, outcome, measured, guestUs);
    if (i + 1 === job.warmup) memoryAfterWarmup = memory;
    if (!slowest || us > slowest.us) slowest = { class: req.class, request: i, us: Math.round(us), cpuUs, warmup: !measured };
    if (measured && us > job.slowUs && slow++ < 20) emit({ type: 'slow', phase: phase.name, class: req.class, request: i, us: Math.round(us), cpuUs });
    if (job.perRequest && measured) emit({ type: 'request', phase: phase.name, class: req.class, request: i, us: Math.round(us * 10) / 10, outcome });
    if (job.budgetMs > 0 && Number(process.hrtime.bigint() - t0) / 1e6 > job.budgetMs) { stopped = 'budget'; break; }
  }
  if (stopped) emit({ type: 'budget', phase: phase.name, requests: ran, budgetMs: job.budgetMs, slowest });
  if (job.finalTick && vm.tickMs > 0 && !vm.dead) {
    vm.ticks++;
    vm.call(root, 'proxy_on_tick', root.id);
    if (vm.dead) emit(trapLine({ class: '(tick)', request: ran }));
  }
  const memory = vm.mem.memory.buffer.byteLength;
  const rerun = recheck(vm, root, names, rechecks);
  if (rerun) emit(trapLine(rerun));
  for (const s of stats.values()) emit(s.line(phase.name));
  const metrics = {};
  for (const [k, v] of vm.metrics) if (v.value !== 0) metrics[show(k)] = v.value;
  emit({
    type: 'phase', phase: phase.name, requests: ran, planned: total, warmup: job.warmup, trapped: !!vm.dead,
    memoryAfterWarmup, memory, ms: Math.round(Number(process.hrtime.bigint() - t0) / 1e6),
    slowest, rechecked: rechecks.length, ticks: vm.ticks, httpCalls: vm.httpCalls, sharedKeys: vm.shared.size, logs: vm.logs, metrics,
    errorLogs: vm.errorLogs.map(show),
  });
  return { ok: !vm.dead && !stopped, trapped: !!vm.dead };
}

// recheck runs each slow request of a phase again (job.recheckUs), up to recheckTries times while
// it stays over the bound, and keeps its least module CPU in its class's samples. A rerun that
// traps ends them all; its trap line's fields are returned (null when none trapped). A VM that
// trapped during the phase is not entered again.
function recheck(vm, root, names, rechecks) {
  const job = vm.job;
  if (vm.dead) return null;
  for (const { req, i, cs, at } of rechecks) {
    for (let k = 0; cs.guest[at] > job.recheckUs && k < recheckTries; k++) {
      if (k >= 3) pause(recheckPauseMs); // a burst of load lasts longer than three runs in a row
      const t = process.hrtime.bigint(), c = process.cpuUsage(), h = vm.hostNs;
      const outcome = names.network ? connection(vm, root, req, i) : request(vm, root, req, names);
      if (outcome === null) return { class: `${req.class} (rerun)`, request: i };
      const us = Number(process.hrtime.bigint() - t) / 1000, cu = process.cpuUsage(c);
      cs.guest[at] = Math.min(cs.guest[at], Math.max(0, Math.min(cu.user + cu.system, us) - Number(vm.hostNs - h) / 1000));
    }
  }
  return null;
}

// pairMain is the benchmark's interleaved mode (e2e/bench_ratios_test.go, R2):
//
//   node --no-liftoff --wasm-max-mem-pages=16384 hashlbv8.mjs --pair A.wasm A.json B.wasm B.json BLOCKS
//
// A.json and B.json list the same jobs by name, in the same order. Per job, one VM of module A
// (A.json's job) and one of module B (B.json's) live side by side in this process; after each
// one's warm-up, BLOCKS blocks of repeat/BLOCKS requests (the first phase's list, cycled)
// alternate between them, A B then B A, so that a machine whose load comes and goes stretches both
// alike. Ticks run as in a phase, untimed. One "pair" line per job: the median over the blocks
// of the ratio of the p50 µs per request, A ÷ B, each side's median p50 and its p99 over all
// blocks. A trap ends the run (exit status 1).
function pairMain(argv) {
  if (argv.length !== 5) usage('--pair: A.wasm A.json B.wasm B.json BLOCKS expected');
  const sides = [[argv[0], argv[1]], [argv[2], argv[3]]].map(([wasmPath, jobPath]) => {
    const bytes = readFileSync(wasmPath);
    return { bytes, wasm: readWasm(new Uint8Array(bytes)), jobs: loadJobs(jobPath), compiled: null };
  });
  const blocks = Number(argv[4]);
  const med = (v) => pct(Float64Array.from(v).sort(), 0.5);
  for (let j = 0; j < sides[0].jobs.length; j++) {
    jobName = sides[0].jobs[j].name;
    const vms = sides.map((sd, k) => {
      const job = sd.jobs[j];
      const r = load(job, sd.bytes, sd.wasm, sd.compiled);
      if (typeof r === 'string') throw new HarnessFault(`--pair: module ${k ? 'B' : 'A'} refused: ${r}`);
      if (!sd.compiled) emit({ type: 'load', ok: true, side: k ? 'B' : 'A', profile: job.profile, abi: r.abi, compileMs: r.compileMs });
      sd.compiled = r.compiled;
      const run = { job, profile: PROFILES[job.profile], abi: r.abi, wasm: sd.wasm, config: job.config };
      const phase = job.phases[0];
      const started = startVM(run, sd.compiled, phase);
      if (!started.vm) throw new HarnessFault(`--pair: job ${job.name}: module ${k ? 'B' : 'A'} did not start`);
      return { ...started, job, phase, names: outcomeHeaders(run.config), next: 0, us: [] };
    });
    const step = (v, n, times) => {
      const reqs = v.phase.requests;
      for (let c = 0; c < n; c++) {
        if (v.vm.tickMs > 0) {
          const nowMs = Number(v.vm.clockOffsetNs / 1000000n);
          if (nowMs >= v.vm.nextTick) { v.vm.nextTick = nowMs + v.vm.tickMs; v.vm.ticks++; v.vm.call(v.root, 'proxy_on_tick', v.root.id); }
        }
        const req = reqs[v.next++ % reqs.length];
        const t = process.hrtime.bigint();
        const outcome = request(v.vm, v.root, req, v.names);
        const us = Number(process.hrtime.bigint() - t) / 1000;
        v.vm.clockOffsetNs += v.job.intervalNs;
        if (outcome === null || v.vm.dead) {
          emit({ type: 'trap', side: v === vms[0] ? 'A' : 'B', callback: v.vm.dead?.callback, error: v.vm.dead?.error, stderr: v.vm.stderr.slice(-4000) });
          return false;
        }
        if (times) times.push(us);
      }
      return true;
    };
    if (!vms.every((v) => step(v, v.job.warmup, null))) return 1;
    const n = Math.max(1, Math.floor(vms[0].job.repeat / blocks));
    const ratios = [], p50 = [[], []];
    for (let k = 0; k < blocks; k++) {
      const t = [[], []];
      const order = k % 2 === 0 ? [0, 1] : [1, 0];
      for (const i of order) if (!step(vms[i], n, t[i])) return 1;
      for (const i of [0, 1]) { p50[i].push(med(t[i])); vms[i].us.push(...t[i]); }
      ratios.push(p50[0][k] / p50[1][k]);
    }
    const r = (x) => Math.round(x * 1000) / 1000;
    emit({
      type: 'pair', blocks, block: n, ratio: r(med(ratios)), ratioMin: r(Math.min(...ratios)), ratioMax: r(Math.max(...ratios)),
      aP50Us: r(med(p50[0])), bP50Us: r(med(p50[1])),
      aP99Us: r(pct(Float64Array.from(vms[0].us).sort(), 0.99)), bP99Us: r(pct(Float64Array.from(vms[1].us).sort(), 0.99)),
    });
  }
  return 0;
}

function main(argv) {
  if (argv[0] === '--pair') return pairMain(argv.slice(1));
  if (argv.length !== 2) usage('two arguments expected');
  const [wasmPath, jobPath] = argv;
  const jobs = loadJobs(jobPath);
  const bytes = readFileSync(wasmPath);
  const wasm = bytes.length >= 8 && bytes.readUInt32BE(0) === 0x0061736d ? readWasm(new Uint8Array(bytes)) : null;
  let compiled = null, status = 0;
  for (const job of jobs) {
    jobName = job.name;
    // One compilation serves every job of the file, as one Envoy compiles a module once for
    // all its VMs; the imports are checked against each job's profile.
    const r = load(job, bytes, wasm, compiled);
    if (typeof r === 'string') {
      emit({ type: 'load', ok: false, profile: job.profile, error: r });
      emit({ type: 'summary', ok: false, profile: job.profile, error: r });
      status = 1;
      continue;
    }
    compiled = r.compiled;
    emit({ type: 'load', ok: true, profile: job.profile, abi: r.abi, imports: wasm.imports.length, compileMs: r.compileMs });
    const run = { job, profile: PROFILES[job.profile], abi: r.abi, wasm, config: job.config };
    let ok = true, traps = 0;
    for (const phase of job.phases) {
      const p = runPhase(run, compiled, phase);
      ok &&= p.ok;
      if (p.trapped) traps++;
    }
    emit({ type: 'summary', ok, profile: job.profile, abi: r.abi, phases: job.phases.length, traps });
    if (!ok) status = 1;
  }
  return status;
}

// load checks the module as cpp-host does before it instantiates it, and compiles it once; a
// string is the reason it is refused.
function load(job, bytes, wasm, compiled) {
  if (!wasm) return 'not a Wasm binary';
  const abiExport = wasm.exports.find((e) => e.kind === 0 && /^proxy_abi_version_(0_1_0|0_2_0|0_2_1)$/.test(e.name));
  if (!abiExport) return 'Missing or unknown Proxy-Wasm ABI version';
  const abi = abiExport.name.slice('proxy_abi_version_'.length);
  const wasi = PROFILES[job.profile].wasi;
  const hostSigs = { env: { ...ENV_ALL, ...ENV_BY_ABI[abi] }, wasi_snapshot_preview1: wasi, wasi_unstable: wasi };
  for (const imp of wasm.imports) {
    const full = `${imp.module}.${imp.name}`;
    if (imp.kind === 2) continue; // cpp-host makes the memory the module asks for
    const host = imp.kind === 0 ? hostSigs[imp.module]?.[imp.name] : undefined;
    if (host === undefined) return `Failed to load Wasm module due to a missing import: ${full}`;
    if (sigOf(host) !== imp.sig) return `Failed to load Wasm module due to an import type mismatch: ${full}, want: ${imp.sig}, but host exports: ${sigOf(host)}`;
  }
  const names = new Set(wasm.exports.map((e) => e.name));
  if (!names.has('malloc') && !names.has('proxy_on_memory_allocate')) return 'Wasm module is missing malloc function.';
  const t = process.hrtime.bigint();
  if (!compiled) {
    try { compiled = new WebAssembly.Module(bytes); } catch (e) { return `Failed to compile Wasm code: ${e.message}`; }
  }
  return { abi, compiled, compileMs: Math.round(Number(process.hrtime.bigint() - t) / 1e6) };
}

try {
  process.exitCode = main(process.argv.slice(2));
} catch (e) {
  process.stderr.write(`hashlbv8: ${e instanceof HarnessFault ? e.message : e?.stack ?? e}\n`);
  process.exitCode = 2;
}
