package lbcore

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// jwt() reads a claim with gjson's path syntax. gjson's Get makes a new
// string for every escaped string it returns and for every number it
// reformats, garbage on every request whose token has one; so a path of
// plain keys and array indexes (nearly every claim path: "sub",
// "realm_access.roles.0") is read here, allocation-free, with gjson's
// answers (FuzzJSONPathMatchesGjson). Other paths (wildcards, queries,
// modifiers, escapes) go to gjson.

// simplePath splits a gjson path into its keys when every key is plain:
// letters, digits and _-+/$: only, and an index of at most 9 digits where
// the value is an array. nil otherwise.
func simplePath(path string) []string {
	var parts []string
	start := 0
	for i := 0; i <= len(path); i++ {
		if i < len(path) && path[i] != '.' {
			c := path[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '+' || c == '/' || c == '$' || c == ':') {
				return nil
			}
			continue
		}
		if i == start || i-start > 64 {
			return nil
		}
		parts = append(parts, path[start:i])
		start = i + 1
	}
	return parts
}

// appendJSONPath appends to dst what gjson.Get(doc, path).String() gives
// for path split by simplePath: doc must be valid JSON (gjson.Valid).
func appendJSONPath(dst []byte, doc string, path []string) []byte {
	v := doc[skipJSONSpace(doc, 0):]
	for _, part := range path {
		var ok bool
		switch {
		case v == "":
			return dst
		case v[0] == '{':
			v, ok = jsonMember(v, part)
		case v[0] == '[':
			v, ok = jsonElement(v, part)
		}
		if !ok {
			return dst
		}
	}
	return appendJSONString(dst, v)
}

// appendJSONString appends the JSON value v (exactly one value) as gjson's
// Result.String gives it.
func appendJSONString(dst []byte, v string) []byte {
	if v == "" {
		return dst
	}
	switch c := v[0]; {
	case c == '"':
		return appendUnescaped(dst, v[1:len(v)-1])
	case c == 't':
		return append(dst, "true"...)
	case c == 'f':
		return append(dst, "false"...)
	case c == 'n':
		return dst
	case c == '{' || c == '[':
		return append(dst, v...)
	}
	i := 0
	if v[0] == '-' {
		i++
	}
	for ; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			if jsonNumberOverflows(v) { // ParseFloat's range error would be garbage
				if v[0] == '-' {
					return append(dst, "-Inf"...)
				}
				return append(dst, "+Inf"...)
			}
			f, _ := strconv.ParseFloat(v, 64)
			return strconv.AppendFloat(dst, f, 'f', -1, 64)
		}
	}
	return append(dst, v...)
}

// jsonMember returns the value of the first member key of the object at
// the start of v.
func jsonMember(v, key string) (string, bool) {
	i := 1
	for {
		i = skipJSONSpace(v, i)
		if i >= len(v) || v[i] != '"' {
			return "", false // "}" or not an object
		}
		kend := i + jsonValueEnd(v[i:])
		k := v[i+1 : kend-1]
		i = skipJSONSpace(v, kend)
		i = skipJSONSpace(v, i+1) // past ':'
		vend := i + jsonValueEnd(v[i:])
		if unescapedEquals(k, key) {
			return v[i:vend], true
		}
		i = skipJSONSpace(v, vend)
		if i >= len(v) || v[i] != ',' {
			return "", false
		}
		i++
	}
}

// jsonElement returns element index (decimal) of the array at the start of v.
func jsonElement(v, index string) (string, bool) {
	n := 0
	for i := 0; i < len(index); i++ {
		if index[i] < '0' || index[i] > '9' || i >= 9 {
			return "", false
		}
		n = n*10 + int(index[i]-'0')
	}
	i := skipJSONSpace(v, 1)
	if i < len(v) && v[i] == ']' {
		return "", false
	}
	for k := 0; i < len(v); k++ {
		end := i + jsonValueEnd(v[i:])
		if k == n {
			return v[i:end], true
		}
		i = skipJSONSpace(v, end)
		if i >= len(v) || v[i] != ',' {
			return "", false
		}
		i = skipJSONSpace(v, i+1)
	}
	return "", false
}

func skipJSONSpace(v string, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r') {
		i++
	}
	return i
}

// jsonValueEnd returns the length of the valid JSON value at the start of v.
func jsonValueEnd(v string) int {
	if v == "" {
		return 0
	}
	depth, inString := 0, false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
				if depth == 0 {
					return i + 1
				}
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of a scalar inside its container
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return i
			}
		}
	}
	return len(v)
}

// appendUnescaped appends the JSON string body s, unescaped as gjson does
// (a lone surrogate becomes U+FFFD).
func appendUnescaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		var r rune
		r, i = unescapeAt(s, i)
		dst = utf8.AppendRune(dst, r)
	}
	return dst
}

// unescapeAt decodes the escape at s[i] ('\\') and returns its rune and the
// index of its last byte.
func unescapeAt(s string, i int) (rune, int) {
	i++
	if i >= len(s) {
		return utf8.RuneError, i
	}
	switch s[i] {
	case 'b':
		return '\b', i
	case 'f':
		return '\f', i
	case 'n':
		return '\n', i
	case 'r':
		return '\r', i
	case 't':
		return '\t', i
	case 'u':
		if i+5 > len(s) {
			return utf8.RuneError, len(s)
		}
		r := hex4(s[i+1 : i+5])
		i += 4
		if utf16.IsSurrogate(r) && r < 0xDC00 && i+6 < len(s)+0 && s[i+1] == '\\' && s[i+2] == 'u' {
			if r2 := hex4(s[i+3 : i+7]); 0xDC00 <= r2 && r2 < 0xE000 {
				return utf16.DecodeRune(r, r2), i + 6
			}
		}
		return r, i
	}
	return rune(s[i]), i // \" \\ \/
}

// hex4 is the value of four hex digits (the syntax check made them so).
func hex4(s string) rune {
	var r rune
	for i := 0; i < 4; i++ {
		d, _ := hexDigit(s[i])
		r = r<<4 | rune(d)
	}
	return r
}

// unescapedEquals reports whether the JSON string body k, unescaped, is key.
func unescapedEquals(k, key string) bool {
	j := 0
	var buf [utf8.UTFMax]byte
	for i := 0; i < len(k); i++ {
		if k[i] != '\\' {
			if j >= len(key) || key[j] != k[i] {
				return false
			}
			j++
			continue
		}
		var r rune
		r, i = unescapeAt(k, i)
		n := utf8.EncodeRune(buf[:], r)
		if j+n > len(key) || key[j:j+n] != string(buf[:n]) {
			return false
		}
		j += n
	}
	return j == len(key)
}

// jsonNumberOverflows reports whether the JSON number v is surely beyond
// float64's range (at least 10^309, which ParseFloat reads as ±Inf with an
// error). A number just under that is left to ParseFloat.
func jsonNumberOverflows(v string) bool {
	i := 0
	if i < len(v) && v[i] == '-' {
		i++
	}
	e10, nonzero := 0, false // the decimal exponent of the first non-zero digit
	lead := true
	for ; i < len(v) && ('0' <= v[i] && v[i] <= '9'); i++ {
		if v[i] != '0' {
			nonzero = true
		}
		if nonzero {
			e10++
		}
	}
	if i < len(v) && v[i] == '.' {
		for i++; i < len(v) && ('0' <= v[i] && v[i] <= '9'); i++ {
			if v[i] != '0' {
				nonzero = true
				lead = false
			} else if lead && !nonzero {
				e10--
			}
		}
	}
	if !nonzero || i >= len(v) || v[i] != 'e' && v[i] != 'E' {
		return false
	}
	i++
	neg := false
	if i < len(v) && (v[i] == '+' || v[i] == '-') {
		neg = v[i] == '-'
		i++
	}
	exp := 0
	for ; i < len(v); i++ {
		if exp = exp*10 + int(v[i]-'0'); exp > 1<<20 {
			break
		}
	}
	if neg {
		return false
	}
	return e10+exp > 309
}
