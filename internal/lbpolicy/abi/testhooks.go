//go:build hashlb_testhooks

package abi

// The binding's test switch, compiled in only with the build tag
// hashlb_testhooks (internal/envoyrun.BuildLBPolicy adds it to a build that
// sets one); the shipped module has the constant of testhooks_off.go
// instead.

// testYield, set by a test build (-ldflags -X with this package's path,
// .testYield=off), stops the workers' yields (goruntime.go), to measure
// what they save.
var testYield string
