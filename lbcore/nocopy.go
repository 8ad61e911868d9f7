package lbcore

import "unsafe"

// bytesString is b as a string without a copy; b must not change while the
// string is used.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
