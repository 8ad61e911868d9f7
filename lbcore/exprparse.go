package lbcore

import (
	"fmt"
	"regexp"
	"strings"
)

type exprParser struct {
	src  string
	pos  int // next byte to read
	open int // offset of the "${" being parsed
}

func (p *exprParser) errorf(pos int, format string, args ...any) error {
	return fmt.Errorf("col %d: %s", pos+1, fmt.Sprintf(format, args...))
}

func (p *exprParser) unterminated() error {
	return p.errorf(p.open, `unterminated "${"`)
}

func (p *exprParser) skipSpace() {
	for p.pos < len(p.src) && isExprSpace(p.src[p.pos]) {
		p.pos++
	}
}

func isExprSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// choice parses pipelines up to and including the closing "}".
func (p *exprParser) choice() ([]exprPipeline, error) {
	var alts []exprPipeline
	for {
		pl, err := p.pipeline()
		if err != nil {
			return nil, err
		}
		alts = append(alts, pl)
		p.skipSpace()
		switch {
		case p.pos >= len(p.src):
			return nil, p.unterminated()
		case p.src[p.pos] == '}':
			p.pos++
			return alts, nil
		case strings.HasPrefix(p.src[p.pos:], "||"):
			p.pos += 2
		default:
			return nil, p.errorf(p.pos, `unexpected %q, want "|", "||" or "}"`, p.src[p.pos:p.pos+1])
		}
	}
}

func (p *exprParser) pipeline() (exprPipeline, error) {
	var pl exprPipeline
	p.skipSpace()
	start := p.pos
	for p.pos < len(p.src) && !isExprSpace(p.src[p.pos]) && p.src[p.pos] != '|' && p.src[p.pos] != '}' {
		p.pos++
	}
	if p.pos >= len(p.src) {
		return pl, p.unterminated()
	}
	if p.pos == start {
		return pl, p.errorf(start, "empty pipeline")
	}
	v, err := p.variable(start, p.src[start:p.pos])
	if err != nil {
		return pl, err
	}
	pl.v = v
	for {
		p.skipSpace()
		if p.pos >= len(p.src) || p.src[p.pos] != '|' || strings.HasPrefix(p.src[p.pos:], "||") {
			return pl, nil
		}
		bar := p.pos
		p.pos++
		p.skipSpace()
		start := p.pos
		for p.pos < len(p.src) && (isLowerAlnum(p.src[p.pos]) || p.src[p.pos] == '_') {
			p.pos++
		}
		if p.pos >= len(p.src) {
			return pl, p.unterminated()
		}
		if p.pos == start {
			return pl, p.errorf(bar, `missing function after "|"`)
		}
		f, err := p.function(start, p.src[start:p.pos])
		if err != nil {
			return pl, err
		}
		pl.fns = append(pl.fns, f)
	}
}

func isLowerAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

func (p *exprParser) variable(pos int, name string) (exprVar, error) {
	switch name {
	case "client.ip":
		return exprVar{kind: varClientIP}, nil
	case "client.port":
		return exprVar{kind: varClientPort}, nil
	case "server.ip":
		return exprVar{kind: varServerIP}, nil
	case "server.port":
		return exprVar{kind: varServerPort}, nil
	case "request.host":
		return exprVar{kind: varHost}, nil
	case "request.path":
		return exprVar{kind: varPath}, nil
	case "request.url":
		return exprVar{kind: varURL}, nil
	case "request.method":
		return exprVar{kind: varMethod}, nil
	case "sip.callid":
		return exprVar{kind: varCallID}, nil
	}
	for _, f := range [...]struct {
		prefix string
		kind   exprVarKind
	}{{"request.header.", varHeader}, {"request.cookie.", varCookie}, {"request.query.", varQuery}} {
		arg, ok := strings.CutPrefix(name, f.prefix)
		if !ok {
			continue
		}
		what := f.prefix[len("request.") : len(f.prefix)-1]
		if arg == "" {
			return exprVar{}, p.errorf(pos, "%s needs a %s name", name, what)
		}
		bad := strings.IndexFunc(arg, func(c rune) bool { return !isTchar(c) })
		if f.kind == varQuery {
			bad = strings.IndexAny(arg, "&=#")
		}
		if bad >= 0 {
			return exprVar{}, p.errorf(pos+len(f.prefix)+bad, "bad %s name %q", what, arg)
		}
		if f.kind == varHeader {
			arg = strings.ToLower(arg)
		}
		return exprVar{kind: f.kind, name: arg}, nil
	}
	return exprVar{}, p.errorf(pos, "unknown variable %q", name)
}

// isTchar reports whether c may appear in an HTTP token (RFC 9110 tchar),
// the syntax of header and cookie names.
func isTchar(c rune) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c < 0x80 && strings.IndexByte("!#$%&'*+-.^_`|~", byte(c)) >= 0
}

// exprArg is one parsed function argument.
type exprArg struct {
	pos   int
	isInt bool
	n     int
	s     string
}

// function parses the arguments of the function called name, found at pos,
// and checks them.
func (p *exprParser) function(pos int, name string) (exprFunc, error) {
	var args []exprArg
	p.skipSpace()
	if p.pos < len(p.src) && p.src[p.pos] == '(' {
		var err error
		if args, err = p.args(); err != nil {
			return exprFunc{}, err
		}
	}
	var f exprFunc
	var sig string // one letter per argument: i integer, s string
	switch name {
	case "lower":
		f.kind = fnLower
	case "upper":
		f.kind = fnUpper
	case "hash":
		f.kind = fnHash
	case "prefix":
		f.kind, sig = fnPrefix, "i"
	case "suffix":
		f.kind, sig = fnSuffix, "i"
	case "mask":
		f.kind, sig = fnMask, "i"
	case "jwt":
		f.kind, sig = fnJWT, "s"
	case "replace":
		f.kind, sig = fnReplace, "ss"
	case "default":
		f.kind, sig = fnDefault, "s"
	case "before", "after", "substr":
		f.kind, sig = textFunc(name)
	default:
		return f, p.errorf(pos, "unknown function %q", name)
	}
	if len(args) != len(sig) {
		switch len(sig) {
		case 0:
			return f, p.errorf(pos, "%s takes no arguments, got %d", name, len(args))
		case 1:
			return f, p.errorf(pos, "%s takes 1 argument, got %d", name, len(args))
		default:
			return f, p.errorf(pos, "%s takes %d arguments, got %d", name, len(sig), len(args))
		}
	}
	for i, a := range args {
		if want := sig[i] == 'i'; a.isInt != want {
			kind := "a string"
			if want {
				kind = "an integer"
			}
			return f, p.errorf(a.pos, "%s argument %d must be %s", name, i+1, kind)
		}
	}
	switch f.kind {
	case fnPrefix, fnSuffix:
		if f.n = args[0].n; f.n < 1 || f.n > maxAffix {
			return f, p.errorf(args[0].pos, "%s %d is out of range [1, %d]", name, f.n, maxAffix)
		}
	case fnMask:
		if f.n = args[0].n; f.n < 0 || f.n > 128 {
			return f, p.errorf(args[0].pos, "mask %d is out of range [0, 128]", f.n)
		}
	case fnJWT:
		if f.s = args[0].s; f.s == "" {
			return f, p.errorf(args[0].pos, "jwt path is empty")
		}
	case fnReplace:
		re, err := regexp.Compile(args[0].s)
		if err != nil {
			return f, p.errorf(args[0].pos, "bad regexp: %v", err)
		}
		f.re, f.repl = re, args[1].s
	case fnDefault:
		f.s = args[0].s
	case fnBefore, fnAfter, fnSubstr:
		if err := p.textArgs(&f, name, args); err != nil {
			return f, err
		}
	}
	return f, nil
}

// args parses "(" [arg ("," arg)*] ")"; p.pos is at "(".
func (p *exprParser) args() ([]exprArg, error) {
	var args []exprArg
	p.pos++
	p.skipSpace()
	if p.pos < len(p.src) && p.src[p.pos] == ')' {
		p.pos++
		return nil, nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.src) {
			return nil, p.unterminated()
		}
		a, err := p.arg()
		if err != nil {
			return nil, err
		}
		args = append(args, a)
		p.skipSpace()
		if p.pos >= len(p.src) {
			return nil, p.unterminated()
		}
		switch p.src[p.pos] {
		case ',':
			p.pos++
		case ')':
			p.pos++
			return args, nil
		default:
			return nil, p.errorf(p.pos, `unexpected %q in arguments, want "," or ")"`, p.src[p.pos:p.pos+1])
		}
	}
}

// arg parses one string or integer argument at p.pos.
func (p *exprParser) arg() (exprArg, error) {
	a := exprArg{pos: p.pos}
	c := p.src[p.pos]
	if c == '"' {
		var sb strings.Builder
		for i := p.pos + 1; i < len(p.src); i++ {
			switch c := p.src[i]; {
			case c == '"':
				p.pos = i + 1
				a.s = sb.String()
				return a, nil
			case c == '\\' && i+1 < len(p.src) && (p.src[i+1] == '"' || p.src[i+1] == '\\'):
				i++
				sb.WriteByte(p.src[i])
			default:
				sb.WriteByte(c)
			}
		}
		return a, p.errorf(a.pos, "unterminated string")
	}
	neg := c == '-'
	i := p.pos
	if neg {
		i++
	}
	digits := i
	for i < len(p.src) && '0' <= p.src[i] && p.src[i] <= '9' {
		if i-digits >= 9 {
			return a, p.errorf(a.pos, "integer too large")
		}
		a.n = a.n*10 + int(p.src[i]-'0')
		i++
	}
	if i == digits {
		return a, p.errorf(a.pos, "want a string or an integer argument, got %q", p.src[a.pos:a.pos+1])
	}
	if neg {
		a.n = -a.n
	}
	a.isInt = true
	p.pos = i
	return a, nil
}
