//go:build !hashlb_testhooks

package abi

// The shipped module's test switch: off, as a constant, so that the
// compiler drops the branch it guards (testhooks.go has the test build's).
const testYield = ""
