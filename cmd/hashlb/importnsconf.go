package main

import (
	"fmt"
	"io"
)

// runImportNSConf implements "hashlb import-nsconf" (being written).
func runImportNSConf(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "hashlb import-nsconf: not implemented yet")
	return 2
}
