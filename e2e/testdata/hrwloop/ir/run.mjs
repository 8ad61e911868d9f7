// node --no-liftoff --wasm-max-mem-pages=16384 --single-threaded run.mjs HRWLOOP.wasm N ITERS:
// ITERS decisions of the hrwloop module over N services in V8 (the V8 half of ir.sh).
import { readFileSync } from 'node:fs';
import { WASI } from 'node:wasi';
const [wasmPath, n, iters] = process.argv.slice(2);
const mod = new WebAssembly.Module(readFileSync(wasmPath));
const wasi = new WASI({ version: 'preview1' });
const inst = new WebAssembly.Instance(mod, { wasi_snapshot_preview1: wasi.wasiImport });
wasi.initialize(inst);
if (inst.exports.hrw_setup(+n) !== 0) throw new Error('hrw_setup failed');
inst.exports.hrw_run(+iters);
