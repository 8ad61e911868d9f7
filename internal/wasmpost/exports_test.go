package wasmpost

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
)

// tinyModule is a module of three functions () -> (), exported as names
// (function i as names[i]), and a memory exported as "memory".
func tinyModule(names ...string) []byte {
	m := append([]byte(nil), magic...)
	section := func(id byte, body []byte) { m = append(appendUleb(append(m, id), uint32(len(body))), body...) }
	section(1, []byte{1, 0x60, 0, 0}) // one type: () -> ()
	section(3, []byte{3, 0, 0, 0})    // three functions of it
	section(5, []byte{1, 0, 1})       // one memory, min 1 page
	exp := appendUleb(nil, uint32(len(names)+1))
	for i, n := range names {
		exp = append(appendUleb(exp, uint32(len(n))), n...)
		exp = append(exp, 0, byte(i))
	}
	exp = append(appendUleb(exp, 6), "memory"...)
	exp = append(exp, 2, 0)
	section(7, exp)
	section(10, []byte{3, 2, 0, 0x0b, 2, 0, 0x0b, 2, 0, 0x0b}) // three empty bodies
	return m
}

func TestDropExports(t *testing.T) {
	in := tinyModule("keep", "proxy_on_response_body", "also_kept")
	out, err := DropExports(in, []string{"proxy_on_response_body"})
	if err != nil {
		t.Fatalf("DropExports = %v", err)
	}
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	cm, err := r.CompileModule(ctx, out)
	if err != nil {
		t.Fatalf("the rewritten module does not compile: %v", err)
	}
	var got []string
	for name := range cm.ExportedFunctions() {
		got = append(got, name)
	}
	if strings.Join(slices.Sorted(slices.Values(got)), ",") != "also_kept,keep" {
		t.Errorf("DropExports left functions %v exported, want also_kept, keep", got)
	}
	if _, ok := cm.ExportedMemories()["memory"]; !ok {
		t.Error("DropExports dropped the memory's export")
	}
}

func TestDropExportsRefuses(t *testing.T) {
	good := tinyModule("keep", "drop")
	tests := []struct {
		name   string
		module []byte
		names  []string
		want   string
	}{
		{"not wasm", []byte("\x7fELF"), nil, "not a WebAssembly 1.0 binary"},
		{"name not exported", good, []string{"proxy_on_queue_ready"}, "does not export function proxy_on_queue_ready"},
		{"memory is not a function", good, []string{"memory"}, "does not export function memory"},
		{"truncated", good[:len(good)-14], []string{"drop"}, "runs past"},
		{"no exports", tinyModule()[:8], []string{"drop"}, "no export section"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DropExports(tt.module, tt.names)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("DropExports = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// FuzzDropExports: no input panics, and from a module it accepts the name
// is gone (a second drop finds no such export).
func FuzzDropExports(f *testing.F) {
	f.Add(tinyModule("a", "drop", "b"))
	f.Add(tinyModule("drop"))
	f.Fuzz(func(t *testing.T, module []byte) {
		out, err := DropExports(module, []string{"drop"})
		if err != nil {
			return
		}
		if _, err := DropExports(out, []string{"drop"}); err == nil || !strings.Contains(err.Error(), "does not export function drop") {
			t.Errorf("DropExports(DropExports(m)) = %v, want: does not export function drop", err)
		}
	})
}
