package main

import (
	"fmt"
	"io"
)

// runExplain implements "hashlb explain" (being written).
func runExplain(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "hashlb explain: not implemented yet")
	return 2
}
