//go:build !hashlb_testhooks

package main

import "github.com/hashlb/hashlb/internal/lbpolicy/abi"

// The shipped module's test switch: off, as a constant, so that the
// compiler drops every branch it guards (testhooks.go has the test build's).
const testPanic = ""

// testChoose is never called: testPanic is empty.
func testChoose(*abi.Hosts, *abi.Context) (int, int, bool) { return 0, 0, false }
