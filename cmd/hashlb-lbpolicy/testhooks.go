//go:build hashlb_testhooks

package main

// The test switches, compiled in only with the build tag hashlb_testhooks
// (internal/envoyrun.BuildLBPolicy adds it to a build that sets one); the
// shipped module has the constants of testhooks_off.go instead, and none of
// this code.

/*
#include "hashlb_abi.h"
*/
import "C"

import (
	"time"
	"unsafe"
)

// testPanic, set by a test build (-ldflags -X main.testPanic=choose),
// makes every choice panic, to show that a panic stays in the module;
// -X main.testPanic=floor makes every choice the Go floor of the paired
// benchmark instead of lbcore's (goFloor).
var testPanic string

// testYield, set by a test build (-ldflags -X main.testYield=off), stops
// the workers' yields (goruntime.go), to measure what they save.
var testYield string

// testChoose is a choice of a test build: testPanic's panic or floor.
func testChoose(st *lbState, ctx unsafe.Pointer, priority, index *C.uint32_t) C.bool {
	if testPanic == "choose" {
		panic("the test build's panic")
	}
	return goFloor(st, ctx, priority, index)
}

// goFloor is e2e/envoy/testdata/lbfloor's choice in Go, through the
// module's own callbacks and Go runtime measures (the paired benchmark's Go
// floor row): the request's :path, FNV-1a, modulo the healthy hosts.
func goFloor(st *lbState, ctx unsafe.Pointer, priority, index *C.uint32_t) C.bool {
	st.ctx.ctx = C.uintptr_t(uintptr(ctx))
	n := st.hosts.HealthyCount(0)
	path, _ := st.ctx.Header(":path", 0)
	st.ctx.ctx = 0
	st.entries.enter(time.Now())
	if n == 0 {
		return false
	}
	h := uint64(14695981039346656037)
	for i := 0; i < len(path); i++ {
		h = (h ^ uint64(path[i])) * 1099511628211
	}
	*priority, *index = 0, C.uint32_t(h%uint64(n))
	return true
}
