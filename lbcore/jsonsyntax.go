package lbcore

import (
	"fmt"
	"unicode/utf8"
)

// jsonSyntaxError says where data, which gjson found not to be valid JSON,
// first breaks the grammar (RFC 8259): "line L, column C: problem", columns
// counted in characters from 1. It returns "" if it finds no error.
func jsonSyntaxError(data []byte) string {
	p := &jsonScan{b: data}
	p.ws()
	if p.value(0) {
		p.ws()
		if p.i < len(p.b) {
			p.fail("%s after the end of the JSON value", p.what())
		}
	}
	if p.err == "" {
		return ""
	}
	line, col := 1, 1
	start := 0
	for j := 0; j < p.at && j < len(p.b); j++ {
		if p.b[j] == '\n' {
			line, start = line+1, j+1
		}
	}
	col += utf8.RuneCount(p.b[start:min(p.at, len(p.b))])
	return fmt.Sprintf("line %d, column %d: %s", line, col, p.err)
}

// jsonScan is a recursive-descent JSON checker that stops at the first error.
type jsonScan struct {
	b   []byte
	i   int
	err string
	at  int // the offset err is about
}

func (p *jsonScan) fail(format string, args ...any) bool {
	if p.err == "" {
		p.err, p.at = fmt.Sprintf(format, args...), p.i
	}
	return false
}

// what names the byte at p.i for an error message.
func (p *jsonScan) what() string {
	if p.i >= len(p.b) {
		return "end of input"
	}
	if c := p.b[p.i]; c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", p.b[p.i])
}

func (p *jsonScan) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// value checks one value at p.i; depth bounds the recursion.
func (p *jsonScan) value(depth int) bool {
	if depth > maxConfigDepth {
		return p.fail("nested deeper than %d levels", maxConfigDepth)
	}
	if p.i >= len(p.b) {
		return p.fail("unexpected end of input, want a value")
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		return p.str()
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	}
	return p.fail("unexpected %s, want a value", p.what())
}

func (p *jsonScan) object(depth int) bool {
	p.i++ // {
	p.ws()
	if p.eat('}') {
		return true
	}
	for {
		p.ws()
		if !p.is('"') {
			if p.is('}') {
				return p.fail("unexpected '}' after ',' (a trailing comma?)")
			}
			return p.fail("unexpected %s, want a quoted field name", p.what())
		}
		if !p.str() {
			return false
		}
		p.ws()
		if !p.eat(':') {
			return p.fail("unexpected %s, want ':' after the field name", p.what())
		}
		p.ws()
		if !p.value(depth + 1) {
			return false
		}
		if more, ok := p.afterItem('}', "an object"); !more {
			return ok
		}
	}
}

func (p *jsonScan) array(depth int) bool {
	p.i++ // [
	p.ws()
	if p.eat(']') {
		return true
	}
	for {
		p.ws()
		if p.is(']') {
			return p.fail("unexpected ']' after ',' (a trailing comma?)")
		}
		if !p.value(depth + 1) {
			return false
		}
		if more, ok := p.afterItem(']', "an array"); !more {
			return ok
		}
	}
}

// is reports whether the next byte is c.
func (p *jsonScan) is(c byte) bool { return p.i < len(p.b) && p.b[p.i] == c }

// eat steps over the next byte when it is c.
func (p *jsonScan) eat(c byte) bool {
	if p.is(c) {
		p.i++
		return true
	}
	return false
}

// afterItem reads what follows an item of an object or an array (in names
// which, for the error) and white space: a ',' (more), the closing byte
// (done, ok) or anything else (a failure).
func (p *jsonScan) afterItem(closing byte, in string) (more, ok bool) {
	p.ws()
	if p.eat(',') {
		return true, true
	}
	if p.eat(closing) {
		return false, true
	}
	return false, p.fail("unexpected %s, want ',' or '%c' in %s", p.what(), closing, in)
}

func (p *jsonScan) str() bool {
	start := p.i
	p.i++ // "
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			return true
		case c == '\\':
			p.i++
			if p.i >= len(p.b) {
				break
			}
			switch p.b[p.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i++
			case 'u':
				for k := 1; k <= 4; k++ {
					if p.i+k >= len(p.b) || !isHex(p.b[p.i+k]) {
						p.i += k
						return p.fail("\\u wants four hex digits")
					}
				}
				p.i += 5
			default:
				return p.fail("unknown escape \\%c in a string", p.b[p.i])
			}
		case c < 0x20:
			return p.fail("a control character (byte 0x%02x) in a string; write it escaped", c)
		default:
			p.i++
		}
	}
	p.i = start
	return p.fail("a string that never ends")
}

func (p *jsonScan) digits() int {
	n := 0
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

func (p *jsonScan) number() bool {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
		if p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i = start
			return p.fail("a number with a leading zero")
		}
	case p.digits() == 0:
		return p.fail("unexpected %s in a number", p.what())
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return p.fail("unexpected %s, want a digit after '.'", p.what())
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return p.fail("unexpected %s, want a digit in the exponent", p.what())
		}
	}
	return true
}

func (p *jsonScan) literal(word string) bool {
	for k := 0; k < len(word); k++ {
		if p.i >= len(p.b) || p.b[p.i] != word[k] {
			return p.fail("unexpected %s, want %s", p.what(), word)
		}
		p.i++
	}
	return true
}
