package wasmpost

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
)

// Unhandled are the callbacks the proxy-wasm Go SDK exports that hashlb
// handles nowhere: the SDK's defaults answer them with Continue or nothing.
// A host calls a callback only when the module exports it
// (docs/envoy-host.md#loading), so without these exports Envoy skips them:
// proxy_on_response_body is a call into the module on every response with
// a body, for nothing. e2e's TestUnhandledCallbacksStayUnhandled fails when
// the filter starts handling one of them.
var Unhandled = []string{
	"proxy_on_request_body", "proxy_on_request_trailers",
	"proxy_on_response_body", "proxy_on_response_trailers",
	"proxy_on_queue_ready", "proxy_on_redis_call_response",
}

const exportSection = 7

var magic = []byte{0, 'a', 's', 'm', 1, 0, 0, 0}

// DropExports returns module without the function exports named in names
// (their code stays, unexported). It fails on a module that is not
// WebAssembly 1.0 binary or whose export section does not parse, and when
// one of names is not exported: a name that has drifted (an SDK renamed its
// callback) must not pass unnoticed.
func DropExports(module []byte, names []string) ([]byte, error) {
	if !bytes.HasPrefix(module, magic) {
		return nil, errors.New("wasmpost: not a WebAssembly 1.0 binary module")
	}
	for p := len(magic); p < len(module); {
		start := p
		id := module[p]
		size, n, err := uleb(module[p+1:])
		if err != nil {
			return nil, fmt.Errorf("wasmpost: section at %d: %w", start, err)
		}
		body := p + 1 + n
		end := body + int(size)
		if end > len(module) || end < body {
			return nil, fmt.Errorf("wasmpost: section at %d runs past the end", start)
		}
		if id != exportSection {
			p = end
			continue
		}
		kept, err := dropFromSection(module[body:end], names)
		if err != nil {
			return nil, err
		}
		out := append([]byte(nil), module[:start]...)
		out = append(out, exportSection)
		out = appendUleb(out, uint32(len(kept)))
		out = append(out, kept...)
		return append(out, module[end:]...), nil
	}
	return nil, errors.New("wasmpost: the module has no export section")
}

// dropFromSection re-encodes an export section's body without the function
// exports named in names.
func dropFromSection(sec []byte, names []string) ([]byte, error) {
	count, p, err := uleb(sec)
	if err != nil {
		return nil, fmt.Errorf("wasmpost: export count: %w", err)
	}
	var kept []byte
	keptCount := uint32(0)
	found := map[string]bool{}
	for i := uint32(0); i < count; i++ {
		start := p
		nameLen, n, err := uleb(sec[p:])
		if err != nil {
			return nil, fmt.Errorf("wasmpost: export %d: %w", i, err)
		}
		p += n
		if int(nameLen) > len(sec)-p-1 {
			return nil, fmt.Errorf("wasmpost: export %d runs past its section", i)
		}
		name := string(sec[p : p+int(nameLen)])
		p += int(nameLen)
		kind := sec[p]
		p++
		if _, n, err = uleb(sec[p:]); err != nil {
			return nil, fmt.Errorf("wasmpost: export %q: %w", name, err)
		}
		p += n
		if kind == 0 && slices.Contains(names, name) {
			found[name] = true
			continue
		}
		kept = append(kept, sec[start:p]...)
		keptCount++
	}
	if p != len(sec) {
		return nil, fmt.Errorf("wasmpost: %d bytes after the last export", len(sec)-p)
	}
	for _, name := range names {
		if !found[name] {
			return nil, fmt.Errorf("wasmpost: the module does not export function %s", name)
		}
	}
	return append(appendUleb(nil, keptCount), kept...), nil
}

// uleb decodes an unsigned LEB128 u32 at the start of b, returning it and
// the bytes it took.
func uleb(b []byte) (uint32, int, error) {
	var x uint64
	for i := 0; i < 5; i++ {
		if i >= len(b) {
			return 0, 0, errors.New("truncated LEB128")
		}
		x |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			if x > 1<<32-1 {
				return 0, 0, errors.New("LEB128 over 32 bits")
			}
			return uint32(x), i + 1, nil
		}
	}
	return 0, 0, errors.New("LEB128 over 5 bytes")
}

// appendUleb appends x as unsigned LEB128.
func appendUleb(b []byte, x uint32) []byte {
	for x >= 0x80 {
		b = append(b, byte(x)|0x80)
		x >>= 7
	}
	return append(b, byte(x))
}
