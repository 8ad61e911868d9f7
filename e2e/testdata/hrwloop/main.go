// Command hrwloop is a Wasm module (GOOS=wasip1, c-shared, no proxy-wasm)
// that runs hrw.Loop inside the guest, for R1: the host calls hrw_setup(n)
// once and times hrw_run(iters), one call for many decisions, so the cost of
// crossing into the guest is spread over them.
package main

import "github.com/hashlb/hashlb/e2e/testdata/hrwloop/hrw"

func main() {}

var loop *hrw.Loop

// setup builds the loop over n services; 0 is success.
//
//go:wasmexport hrw_setup
func setup(n uint32) uint32 {
	l, err := hrw.New(int(n))
	if err != nil {
		return 1
	}
	loop = l
	return 0
}

// run makes iters decisions and returns the sum of the chosen indexes.
//
//go:wasmexport hrw_run
func run(iters uint32) uint32 { return uint32(loop.Run(int(iters))) }
