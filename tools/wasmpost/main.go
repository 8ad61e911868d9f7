package main

import (
	"fmt"
	"os"

	"github.com/hashlb/hashlb/internal/wasmpost"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: wasmpost MODULE.wasm (rewritten in place)")
		os.Exit(2)
	}
	path := os.Args[1]
	in, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "wasmpost: %v\n", err)
		os.Exit(1)
	}
	out, err := wasmpost.Finish(in)
	if err != nil {
		fmt.Fprintf(os.Stderr, "wasmpost: %s: %v\n", path, err)
		os.Exit(1)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "wasmpost: %v\n", err)
		os.Exit(1)
	}
}
