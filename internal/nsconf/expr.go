package nsconf

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/hashlb/hashlb/lbcore"
)

// This file translates the NetScaler default-syntax ("advanced") expressions
// that TOKEN load balancing and RULE persistence use in practice into hashlb
// key expressions (docs/config.md, "Key expressions"). Only the subset below is
// translated; anything else is an error naming the part not understood, never
// a guess. The meanings come from the Citrix NetScaler Policy Configuration
// and Reference Guide (9.2), "HTTP Expression Prefixes that Return Text" and
// "Expressions for Extracting Segments of URLs"
// (https://manualsdump.com/en/manuals/citrix_systems-9.2/122114/81,
// .../122114/83, .../122114/144, http://manualsbrain.com/en/manuals/793341/?page=82):
//
//	HTTP.REQ.HEADER("n")          request.header.n     the header's value
//	HTTP.REQ.COOKIE.VALUE("n")    request.cookie.n     the cookie's value
//	HTTP.REQ.URL.QUERY.VALUE("n") request.query.n      the query parameter's value
//	HTTP.REQ.URL.PATH.GET(n)      request.path | replace(…)
//	                              the n-th element of the path split at "/":
//	                              for /dir1/dir2/x.html, GET(1) is "dir1" and
//	                              GET(2) "dir2"; element 0 is the empty text
//	                              before the first "/", and an empty element
//	                              (//) counts (the guide's PATH.IGNORE_EMPTY_ELEMENTS
//	                              exists to skip them); past the last element, "".
//	HTTP.REQ.URL.PATH             request.path         the path without query
//	HTTP.REQ.HOSTNAME             request.host         the host of the URL, else
//	                              of the Host header (hashlb's has no port)
//	HTTP.REQ.URL                  request.url          path and query
//	CLIENT.IP.SRC                 client.ip            the client's address
//	… .TO_LOWER / .TO_UPPER       | lower / | upper
//	a ALT b                       a || b               b when a is empty
//
// A bare word naming an "add policy expression" is replaced by that
// expression.

// exprError is an expression the translator does not understand: Part is
// the text not understood, Why says what was expected.
type exprError struct {
	Part string
	Why  string
}

func (e *exprError) Error() string {
	if e.Part == "" {
		return e.Why
	}
	return fmt.Sprintf("%q not understood (%s)", e.Part, e.Why)
}

// exprTok is one token of a NetScaler expression.
type exprTok struct {
	kind byte // 'i' identifier, 's' string, 'n' number, or the punctuation itself: . ( ) ,
	text string
	pos  int // byte offset in the source
	end  int
}

func lexExpr(src string) ([]exprTok, error) {
	var toks []exprTok
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '.' || c == '(' || c == ')' || c == ',':
			toks = append(toks, exprTok{kind: c, text: string(c), pos: i, end: i + 1})
			i++
		case c == '"' || c == '\'':
			var b strings.Builder
			j := i + 1
			for ; j < len(src) && src[j] != c; j++ {
				if src[j] == '\\' && j+1 < len(src) {
					j++
				}
				b.WriteByte(src[j])
			}
			if j >= len(src) {
				return nil, &exprError{Part: src[i:], Why: "unterminated string"}
			}
			toks = append(toks, exprTok{kind: 's', text: b.String(), pos: i, end: j + 1})
			i = j + 1
		case '0' <= c && c <= '9':
			j := i
			for j < len(src) && '0' <= src[j] && src[j] <= '9' {
				j++
			}
			toks = append(toks, exprTok{kind: 'n', text: src[i:j], pos: i, end: j})
			i = j
		case c == '_' || 'a' <= c|0x20 && c|0x20 <= 'z':
			j := i
			for j < len(src) && (src[j] == '_' || 'a' <= src[j]|0x20 && src[j]|0x20 <= 'z' || '0' <= src[j] && src[j] <= '9') {
				j++
			}
			toks = append(toks, exprTok{kind: 'i', text: src[i:j], pos: i, end: j})
			i = j
		default:
			end := strings.IndexAny(src[i:], " \t")
			if end < 0 {
				end = len(src) - i
			}
			return nil, &exprError{Part: src[i : i+end], Why: "operators and comparisons are not part of the translated subset"}
		}
	}
	return toks, nil
}

// call is one element of a chain: NAME or NAME(args).
type call struct {
	name     string // upper-case
	args     []exprTok
	hasArgs  bool
	pos, end int
}

// pipeline is one translated alternative: a hashlb variable and functions.
type pipeline struct {
	v   string
	fns []string
}

// exprTranslator translates expressions; named holds the policy expressions
// of the file (name → source), used names what it replaced.
type exprTranslator struct {
	named map[string]string
	used  []string
	depth int
}

// translate returns the hashlb key expression for the NetScaler expression
// src, or an *exprError.
func (x *exprTranslator) translate(src string) (string, error) {
	alts, err := x.alternatives(src)
	if err != nil {
		return "", err
	}
	parts := make([]string, len(alts))
	for i, p := range alts {
		parts[i] = strings.Join(append([]string{p.v}, p.fns...), " | ")
	}
	out := "${" + strings.Join(parts, " || ") + "}"
	if _, err := lbcore.ParseExpr(out); err != nil {
		return "", &exprError{Part: src, Why: fmt.Sprintf("it translates to %s, which hashlb refuses: %v", out, err)}
	}
	return out, nil
}

// alternatives parses src as chain (ALT chain)*.
func (x *exprTranslator) alternatives(src string) ([]pipeline, error) {
	toks, err := lexExpr(src)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, &exprError{Why: "empty expression"}
	}
	var out []pipeline
	for i := 0; ; {
		chain, next, err := parseChain(src, toks, i)
		if err != nil {
			return nil, err
		}
		ps, err := x.chain(src, chain)
		if err != nil {
			return nil, err
		}
		out = append(out, ps...)
		i = next
		if i == len(toks) {
			return out, nil
		}
		if toks[i].kind != 'i' || !strings.EqualFold(toks[i].text, "ALT") {
			return nil, &exprError{Part: src[toks[i].pos:], Why: "only ALT may join two expressions"}
		}
		if i++; i == len(toks) {
			return nil, &exprError{Part: src[toks[i-1].pos:], Why: "ALT needs an expression after it"}
		}
	}
}

// parseChain reads NAME[(args)] (. NAME[(args)])* from toks[i:].
func parseChain(src string, toks []exprTok, i int) ([]call, int, error) {
	var out []call
	for {
		if i >= len(toks) || toks[i].kind != 'i' {
			part := src[toks[len(toks)-1].end:]
			if i < len(toks) {
				part = src[toks[i].pos:]
			}
			return nil, i, &exprError{Part: part, Why: "want a name such as HTTP.REQ.HEADER"}
		}
		c := call{name: strings.ToUpper(toks[i].text), pos: toks[i].pos, end: toks[i].end}
		i++
		if i < len(toks) && toks[i].kind == '(' {
			c.hasArgs = true
			i++
			for i < len(toks) && toks[i].kind != ')' {
				if toks[i].kind != 's' && toks[i].kind != 'n' && toks[i].kind != 'i' {
					return nil, i, &exprError{Part: src[c.pos:], Why: "arguments must be strings, numbers or words"}
				}
				c.args = append(c.args, toks[i])
				i++
				if i < len(toks) && toks[i].kind == ',' {
					i++
				}
			}
			if i >= len(toks) {
				return nil, i, &exprError{Part: src[c.pos:], Why: "unbalanced parenthesis"}
			}
			c.end = toks[i].end
			i++
		}
		out = append(out, c)
		if i >= len(toks) || toks[i].kind != '.' {
			return out, i, nil
		}
		i++
	}
}

// chain translates one chain: a prefix naming a value, then operations.
func (x *exprTranslator) chain(src string, cs []call) ([]pipeline, error) {
	// A bare word is a named expression.
	if len(cs) == 1 && !cs[0].hasArgs {
		if body, ok := x.lookup(src[cs[0].pos:cs[0].end]); ok {
			if x.depth >= 8 {
				return nil, &exprError{Part: src[cs[0].pos:cs[0].end], Why: "named expressions nest too deeply"}
			}
			x.depth++
			defer func() { x.depth-- }()
			return x.alternatives(body)
		}
	}
	var p pipeline
	n, err := prefix(src, cs, &p)
	if err != nil {
		return nil, err
	}
	ignoreCase := false
	for k := n; k < len(cs); k++ {
		fn, skip, err := operation(src, cs, k, &ignoreCase)
		if err != nil {
			return nil, err
		}
		if fn != "" {
			p.fns = append(p.fns, fn)
		}
		k += skip
	}
	return []pipeline{p}, nil
}

func (x *exprTranslator) lookup(name string) (string, bool) {
	v, ok := x.named[name]
	if ok {
		x.used = append(x.used, name)
	}
	return v, ok
}

// prefixes are the value prefixes translated, longest first within each
// start. arg is 's' for one string argument, 'n' for one number, 0 for none.
var prefixes = []struct {
	names []string
	arg   byte
	build func(arg string) (pipeline, error)
}{
	{[]string{"HTTP", "REQ", "HEADER"}, 's', func(a string) (pipeline, error) {
		return pipeline{v: "request.header." + strings.ToLower(a)}, nil
	}},
	{[]string{"HTTP", "REQ", "COOKIE", "VALUE"}, 's', func(a string) (pipeline, error) {
		return pipeline{v: "request.cookie." + a}, nil
	}},
	{[]string{"HTTP", "REQ", "URL", "QUERY", "VALUE"}, 's', func(a string) (pipeline, error) {
		return pipeline{v: "request.query." + a}, nil
	}},
	{[]string{"HTTP", "REQ", "URL", "PATH", "GET"}, 'n', func(a string) (pipeline, error) {
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 || n > 1000 {
			return pipeline{}, fmt.Errorf("GET(%s): the element must be 1 to 1000 (element 0 is always empty)", a)
		}
		return pipeline{v: "request.path", fns: []string{pathElement(n)}}, nil
	}},
	{[]string{"HTTP", "REQ", "URL", "PATH"}, 0, func(string) (pipeline, error) { return pipeline{v: "request.path"}, nil }},
	{[]string{"HTTP", "REQ", "URL"}, 0, func(string) (pipeline, error) { return pipeline{v: "request.url"}, nil }},
	{[]string{"HTTP", "REQ", "HOSTNAME"}, 0, func(string) (pipeline, error) { return pipeline{v: "request.host"}, nil }},
	{[]string{"CLIENT", "IP", "SRC"}, 0, func(string) (pipeline, error) { return pipeline{v: "client.ip"}, nil }},
}

// pathElement is the replace() that keeps the n-th element of a path split at
// "/" (element 0 being the text before the first "/"), or "" when the path
// has fewer elements: the second alternative matches any path the first does
// not, and leaves $1 empty.
func pathElement(n int) string {
	skip := ""
	if n > 1 {
		skip = fmt.Sprintf("(?:/[^/]*){%d}", n-1)
	}
	return fmt.Sprintf(`replace("(?s)^[^/]*%s/([^/]*).*$|^.*$", "$1")`, skip)
}

// prefix matches the start of cs against prefixes, fills p and returns how
// many calls it used.
func prefix(src string, cs []call, p *pipeline) (int, error) {
	for _, pf := range prefixes {
		if len(cs) < len(pf.names) {
			continue
		}
		match := true
		for i, n := range pf.names {
			c := cs[i]
			last := i == len(pf.names)-1
			if c.name != n || (!last && c.hasArgs) {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		last := cs[len(pf.names)-1]
		var arg string
		if pf.arg == 0 && last.hasArgs {
			return 0, &exprError{Part: src[cs[0].pos:last.end], Why: last.name + " takes no arguments"}
		}
		if pf.arg != 0 {
			if len(last.args) != 1 || last.args[0].kind != pf.arg {
				want := "one string"
				if pf.arg == 'n' {
					want = "one number"
				}
				return 0, &exprError{Part: src[cs[0].pos:last.end], Why: last.name + " takes " + want}
			}
			arg = last.args[0].text
		}
		v, err := pf.build(arg)
		if err != nil {
			return 0, &exprError{Part: src[cs[0].pos:last.end], Why: err.Error()}
		}
		*p = v
		return len(pf.names), nil
	}
	return 0, &exprError{Part: src[cs[0].pos:cs[len(cs)-1].end],
		Why: "the translated values are HTTP.REQ.HEADER, HTTP.REQ.COOKIE.VALUE, HTTP.REQ.URL.QUERY.VALUE, HTTP.REQ.URL.PATH.GET, HTTP.REQ.URL.PATH, HTTP.REQ.URL, HTTP.REQ.HOSTNAME and CLIENT.IP.SRC"}
}

// The text operations translated, from the guide's "Basic Operations on a
// Portion of a String" and "Operations on Case Sensitivity of Text" (9.2,
// https://manualsdump.com/en/manuals/citrix_systems-9.2/122114/104 and
// .../122114/101) and the HTTP header operations (…/122114/138):
//
//	.BEFORE_STR("s")      | before("s")    the text before the first s
//	.AFTER_STR("s")       | after("s")     the text after the first s
//	.SUBSTR(start, n)     | substr(start, n)
//	.PREFIX(n)            | prefix(n)      the first n characters (all if fewer)
//	.SUFFIX(n)            | suffix(n)      the last n characters (all if fewer)
//	.SKIP(n)              | substr(n, …)   what follows the first n characters
//	.TYPECAST_TEXT_T      (nothing)        the value as text: it already is
//	.TYPECAST_NVLIST_T('=', ';').VALUE("n")
//	                      | replace(…)     the value of n in a name=value list
//	.SET_TEXT_MODE(IGNORECASE)             later searches ignore case: the
//	                      | lower          value is lower-cased and so are the
//	                                       strings searched for
//	.SET_TEXT_MODE(NOIGNORECASE)           the default: nothing
//
// The guides do not say what BEFORE_STR and AFTER_STR give when the string
// is absent. hashlb's before() keeps the whole value then and after() gives
// "": for the common jsessionid rule, URL.BEFORE_STR("?").AFTER_STR(";jsessionid=")
// reads the session of "/app;jsessionid=A1" (no query) and nothing from a URL
// without ";jsessionid=", where ALT moves on. SUBSTR("s") (the s itself when
// present) is a constant, never a key, and PREFIX(c, n) / TRUNCATE are not
// translated.
func operation(src string, cs []call, k int, ignoreCase *bool) (fn string, skip int, err error) {
	c := cs[k]
	bad := func(why string) (string, int, error) {
		return "", 0, &exprError{Part: src[c.pos:cs[len(cs)-1].end], Why: why}
	}
	str := func() (string, bool) {
		if len(c.args) != 1 || c.args[0].kind != 's' || c.args[0].text == "" {
			return "", false
		}
		s := c.args[0].text
		if *ignoreCase {
			s = strings.ToLower(s)
		}
		return s, true
	}
	nums := func(want int) ([]int, bool) {
		if len(c.args) != want {
			return nil, false
		}
		var out []int
		for _, a := range c.args {
			n, err := strconv.Atoi(a.text)
			if a.kind != 'n' || err != nil || n > 1<<20 {
				return nil, false
			}
			out = append(out, n)
		}
		return out, true
	}
	switch c.name {
	case "TO_LOWER", "TO_UPPER":
		if c.hasArgs {
			return bad(c.name + " takes no arguments")
		}
		return strings.ToLower(c.name[3:]), 0, nil
	case "BEFORE_STR", "AFTER_STR":
		s, ok := str()
		if !ok {
			return bad(c.name + " takes one non-empty string")
		}
		return fmt.Sprintf("%s(%s)", strings.ToLower(strings.TrimSuffix(c.name, "_STR")), strconv.Quote(s)), 0, nil
	case "SUBSTR":
		if n, ok := nums(2); ok && n[1] > 0 {
			return fmt.Sprintf("substr(%d, %d)", n[0], n[1]), 0, nil
		}
		return bad(`SUBSTR(start, length) is translated; SUBSTR("text") gives the text itself, a constant and never a key`)
	case "PREFIX", "SUFFIX":
		if n, ok := nums(1); ok && n[0] > 0 {
			return fmt.Sprintf("%s(%d)", strings.ToLower(c.name), n[0]), 0, nil
		}
		return bad(c.name + "(n) with n > 0 is translated; " + c.name + "(character, count) is not")
	case "SKIP":
		if n, ok := nums(1); ok {
			if n[0] == 0 {
				return "", 0, nil
			}
			return fmt.Sprintf("substr(%d, %d)", n[0], 1<<20), 0, nil
		}
		return bad("SKIP takes one number")
	case "TYPECAST_TEXT_T":
		if c.hasArgs {
			return bad("TYPECAST_TEXT_T takes no arguments")
		}
		return "", 0, nil
	case "TYPECAST_NVLIST_T":
		// ('=', ';') then .VALUE("name"): the value after name= up to the
		// next separator, spaces around the separator allowed.
		if len(c.args) != 2 || c.args[0].kind != 's' || c.args[1].kind != 's' || c.args[0].text == "" || c.args[1].text == "" ||
			k+1 >= len(cs) || cs[k+1].name != "VALUE" || len(cs[k+1].args) != 1 || cs[k+1].args[0].kind != 's' {
			return bad(`TYPECAST_NVLIST_T('=', ';').VALUE("name") is translated; other list operations are not`)
		}
		eq, sep, name := regexp.QuoteMeta(c.args[0].text), regexp.QuoteMeta(c.args[1].text), regexp.QuoteMeta(cs[k+1].args[0].text)
		flags := "(?s)"
		if *ignoreCase {
			flags = "(?is)"
		}
		re := fmt.Sprintf(`%s^(?:.*?%s)?\s*%s\s*%s([^%s]*).*$|^.*$`, flags, sep, name, eq, sep)
		if len(c.args[1].text) > 1 {
			return bad("TYPECAST_NVLIST_T with a separator longer than one character is not translated")
		}
		return fmt.Sprintf("replace(%s, %s)", strconv.Quote(re), strconv.Quote("$1")), 1, nil
	case "SET_TEXT_MODE":
		if len(c.args) != 1 || c.args[0].kind != 'i' {
			return bad("SET_TEXT_MODE takes IGNORECASE or NOIGNORECASE")
		}
		switch strings.ToUpper(c.args[0].text) {
		case "IGNORECASE":
			if *ignoreCase {
				return "", 0, nil
			}
			*ignoreCase = true
			return "lower", 0, nil
		case "NOIGNORECASE":
			if *ignoreCase {
				return bad("SET_TEXT_MODE(NOIGNORECASE) after IGNORECASE: the value is lower-cased already")
			}
			return "", 0, nil
		}
		return bad("SET_TEXT_MODE takes IGNORECASE or NOIGNORECASE")
	}
	return bad("the operations translated are TO_LOWER, TO_UPPER, BEFORE_STR, AFTER_STR, SUBSTR(start, length), PREFIX(n), SUFFIX(n), SKIP(n), TYPECAST_TEXT_T, TYPECAST_NVLIST_T(…).VALUE(…) and SET_TEXT_MODE")
}
