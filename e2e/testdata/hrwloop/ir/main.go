// Command ir makes ITERS decisions of hrw.Loop over N services natively:
// the native half of ir.sh, which counts instructions per decision (R1 as
// instruction counts, which a shared machine does not move).
//
//	go run ./e2e/testdata/hrwloop/ir N ITERS
package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/hashlb/hashlb/e2e/testdata/hrwloop/hrw"
)

func main() {
	n, err1 := strconv.Atoi(os.Args[1])
	iters, err2 := strconv.Atoi(os.Args[2])
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "usage: ir N ITERS")
		os.Exit(2)
	}
	l, err := hrw.New(n)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	l.Run(iters)
}
