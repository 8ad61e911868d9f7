package main

import (
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/hashlb/hashlb/internal/wasmpost"
)

func main() {
	switch {
	case len(os.Args) == 3 && os.Args[1] == "-size":
		if err := size(os.Args[2]); err != nil {
			fmt.Fprintf(os.Stderr, "wasmpost: %v\n", err)
			os.Exit(1)
		}
		return
	case len(os.Args) != 2:
		fmt.Fprintln(os.Stderr, "usage: wasmpost MODULE.wasm (rewritten in place)\n       wasmpost -size MODULE.wasm (its code by package)")
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

// size prints the module's code by package, the largest first, down to
// the packages under 0.5 % each, summed on the last line.
func size(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s, err := wasmpost.Sizes(b)
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	fmt.Printf("%s: %d bytes of code in %d functions (the module: %d bytes)\n", path, s.Total, s.Functions, len(b))
	pkgs := slices.SortedFunc(maps.Keys(s.ByPackage), func(a, b string) int { return s.ByPackage[b] - s.ByPackage[a] })
	rest, others := 0, 0
	for _, p := range pkgs {
		n := s.ByPackage[p]
		if n*200 < s.Total {
			rest += n
			others++
			continue
		}
		fmt.Printf("%5.1f %% %9d  %s\n", 100*float64(n)/float64(s.Total), n, p)
	}
	if others > 0 {
		fmt.Printf("%5.1f %% %9d  %d other packages\n", 100*float64(rest)/float64(s.Total), rest, others)
	}
	return nil
}
