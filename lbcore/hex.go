package lbcore

// hexDigit is the value of the hex digit c (either case); ok is false for
// any other byte.
func hexDigit(c byte) (v byte, ok bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// isHex reports whether c is a hex digit.
func isHex(c byte) bool { _, ok := hexDigit(c); return ok }

// appendHashHex appends h as 16 lower-case hex digits.
func appendHashHex(dst []byte, h uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, digits[h>>shift&0xf])
	}
	return dst
}
