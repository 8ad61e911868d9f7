//go:build hashlb_testhooks

package main

// The policy's test switches, compiled in only with the build tag
// hashlb_testhooks (internal/envoyrun.BuildLBPolicy adds it to a build that
// sets one); the shipped module has the constants of testhooks_off.go
// instead, and none of this code.

import "github.com/hashlb/hashlb/internal/lbpolicy/abi"

// testPanic, set by a test build (-ldflags -X main.testPanic=choose),
// makes every choice panic, to show that a panic stays in the module;
// -X main.testPanic=floor makes every choice the Go floor of the paired
// benchmark instead of lbcore's (goFloor). Either way the choice cache is
// off (config.CacheKey).
var testPanic string

// testChoose is a choice of a test build: testPanic's panic or floor.
func testChoose(hosts *abi.Hosts, ctx *abi.Context) (int, int, bool) {
	if testPanic == "choose" {
		panic("the test build's panic")
	}
	return goFloor(hosts, ctx)
}

// goFloor is e2e/envoy/testdata/lbfloor's choice in Go, through the
// module's own binding and its Go runtime measures (the paired benchmark's
// Go floor row): the request's :path, FNV-1a, modulo the healthy hosts.
func goFloor(hosts *abi.Hosts, ctx *abi.Context) (int, int, bool) {
	n := hosts.HealthyCount(0)
	path, _ := ctx.Header(":path", 0)
	if n == 0 {
		return 0, 0, false
	}
	h := uint64(14695981039346656037)
	for i := 0; i < len(path); i++ {
		h = (h ^ uint64(path[i])) * 1099511628211
	}
	return 0, int(h % uint64(n)), true
}
