package lbcore

// Caps on what one request can make a decision read. Every input is the
// client's: without a cap, one request could make the worker recurse until
// its stack overflows (a trap that kills the VM and every later request of
// the worker), scan for seconds, or grow linear memory for good. A value cut
// by a cap still decides deterministically (the same request, the same key);
// the decision records that a cap was hit (Decision.Capped) and the filter
// counts it (metric hashlb.input_capped). SECURITY.md gives the reasons for
// each figure. They are exported as the documented caps (docs/config.md,
// Input caps; docs/performance.md), whether or not a package outside reads
// one.
const (
	// MaxValueBytes is how much of one expression variable's value is read:
	// a longer header, cookie, query value or URL is cut to its first
	// MaxValueBytes bytes. Envoy's default request header limit is 60 KiB,
	// but an operator can raise it to 8 MiB.
	MaxValueBytes = 16 << 10
	// MaxScanBytes is how many bytes of cookie headers or of the query string
	// are searched for one name; a name beyond them is not found.
	MaxScanBytes = 64 << 10
	// MaxJWTBytes is the longest token jwt() decodes; a longer one gives "".
	MaxJWTBytes = 16 << 10
	// MaxJSONDepth is the deepest nesting of arrays and objects jwt() accepts
	// in a payload; a deeper one gives "". gjson walks nesting recursively,
	// so depth is checked first, without recursion (JSONDepthOK).
	MaxJSONDepth = 32
	// MaxReplaceInput is how much of its value replace() reads; the rest is
	// cut off before replacing. Go's regexp is linear per match, but a match
	// can scan to the end of the input before settling on a short
	// alternative ("a.*b|a"), so replacing every match is quadratic (its
	// cost at 16 KiB: SECURITY.md).
	MaxReplaceInput = 1 << 10
	// MaxReplacements is how many matches replace() replaces; the text after
	// the last one is kept as it is. With MaxReplaceInput it bounds one
	// replace() to MaxReplacements scans of at most MaxReplaceInput bytes.
	MaxReplacements = 32
	// MaxReplaceSteps is how many backtracker steps (one per instruction and
	// position visited, replace.go) all of one decision's replace() calls
	// take together; when they run out the text not yet scanned is kept as
	// it is. It bounds replace()'s CPU per request whatever the patterns.
	MaxReplaceSteps = 1 << 15
	// MaxEvalWork is how many bytes one decision's expressions may read
	// together: each variable's value, each function's input (jwt()'s three
	// times, its decoding costing about that much more), the cookie lines and
	// query strings searched. A pipeline that would go beyond it gives "".
	// With MaxReplaceSteps it bounds an expression's CPU per request
	// whatever the configuration: without it, nine expressions of sixteen
	// functions over 16 KiB values read megabytes (docs/performance.md#figures-behind-lbcores-caps-and-caches).
	MaxEvalWork = 256 << 10
)

// Limits on a configuration's expressions, checked when it is parsed: each
// bounds what one request can make the worker compute, whatever its input.
// SECURITY.md gives the worst case they allow.
const (
	// MaxReplaceInsts is the largest program one replace() pattern may
	// compile to (regexp/syntax instructions; "[a-z]{0,100}" is 202). A
	// scan costs up to instructions × input steps, and the visited set
	// instructions × (MaxReplaceInput + 1) bits.
	MaxReplaceInsts = 512
	// MaxExprFuncs is how many functions one expression may apply, over all
	// its pipelines.
	MaxExprFuncs = 16
	// MaxExprAlts is how many alternatives ("||") one expression may have
	// over all its ${} parts; each reads a value of up to MaxValueBytes.
	MaxExprAlts = 16
	// MaxExprBytes is the longest expression source.
	MaxExprBytes = 4 << 10
)

// JSONDepthOK reports whether the arrays and objects of the JSON text b nest
// at most max deep. It does not validate: it counts brackets outside
// strings, iteratively, so that a hostile payload is refused before any
// recursive parser sees it.
func JSONDepthOK(b []byte, max int) bool {
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte cannot end the string
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			if depth++; depth > max {
				return false
			}
		case ']', '}':
			depth--
		}
	}
	return true
}
