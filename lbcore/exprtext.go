package lbcore

import "bytes"

// The text functions that cut a value at a separator or an offset:
// before("s"), after("s") and substr(start, length). Each works in place on
// the value, allocates nothing and reads it once.
//
//   - before("s"): the text before the first "s"; the whole value when it
//     has no "s" (everything is before a separator that never comes).
//   - after("s"): the text after the first "s"; "" when it has no "s".
//   - substr(start, length): length bytes from byte start (0-based); what
//     there is when the value is shorter; "" when it has start bytes or fewer.
//
// With these, the jsessionid key of a URL, "/app;jsessionid=A1?x=1", is
// ${request.url | before("?") | after(";jsessionid=")}: "A1", and "" for a
// URL without ";jsessionid=", so a || alternative decides.

// maxSeparator bounds before's and after's argument: NetScaler's string
// arguments stop at 255 characters, and a longer separator is a mistake.
const maxSeparator = 255

func textFunc(name string) (exprFuncKind, string) {
	switch name {
	case "before":
		return fnBefore, "s"
	case "after":
		return fnAfter, "s"
	}
	return fnSubstr, "ii"
}

// textArgs checks and stores the arguments of before, after and substr.
func (p *exprParser) textArgs(f *exprFunc, name string, args []exprArg) error {
	if f.kind == fnSubstr {
		f.n, f.m = args[0].n, args[1].n
		if f.n < 0 || f.n > maxAffix {
			return p.errorf(args[0].pos, "substr start %d is out of range [0, %d]", f.n, maxAffix)
		}
		if f.m < 1 || f.m > maxAffix {
			return p.errorf(args[1].pos, "substr length %d is out of range [1, %d]", f.m, maxAffix)
		}
		return nil
	}
	f.s = args[0].s
	if f.s == "" || len(f.s) > maxSeparator {
		return p.errorf(args[0].pos, "%s separator must be 1 to %d bytes, got %d", name, maxSeparator, len(f.s))
	}
	f.sep = []byte(f.s)
	return nil
}

// cutText moves the result of before, after or substr to the start of v and
// returns its length.
func (f *exprFunc) cutText(v []byte) int {
	switch f.kind {
	case fnBefore:
		if i := bytes.Index(v, f.sep); i >= 0 {
			return i
		}
		return len(v)
	case fnAfter:
		i := bytes.Index(v, f.sep)
		if i < 0 {
			return 0
		}
		return copy(v, v[i+len(f.sep):])
	}
	if f.n >= len(v) {
		return 0
	}
	return copy(v, v[f.n:min(len(v), f.n+f.m)])
}
