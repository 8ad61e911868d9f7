// Command wasmpost rewrites a module go build wrote into the one hashlb
// ships (internal/wasmpost.Finish), in place; ./build.sh wasm runs it on
// dist/hashlb.wasm:
//
//	go run ./tools/wasmpost dist/hashlb.wasm   # from the repository root
//
// With -size it rewrites nothing and prints the module's code section by
// package, the largest first (internal/wasmpost.Sizes):
//
//	go run ./tools/wasmpost -size dist/hashlb.wasm
//
// The command is main.go.
package main
