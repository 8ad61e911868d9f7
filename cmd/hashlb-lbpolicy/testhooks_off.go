//go:build !hashlb_testhooks

package main

/*
#include "hashlb_abi.h"
*/
import "C"

import "unsafe"

// The shipped module's test switches: off, as constants, so that the
// compiler drops every branch they guard (testhooks.go has the test build's).
const (
	testPanic = ""
	testYield = ""
)

// testChoose is never called: testPanic is empty.
func testChoose(*lbState, unsafe.Pointer, *C.uint32_t, *C.uint32_t) C.bool { return false }
