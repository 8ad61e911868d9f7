package main

import (
	"fmt"
	"io"
)

// runCheck implements "hashlb check" (being written).
func runCheck(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "hashlb check: not implemented yet")
	return 2
}
