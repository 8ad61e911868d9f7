package lbcore

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"unicode/utf8"
)

// replace() matches with its own backtracker over the program regexp/syntax
// compiles, not with regexp's Find functions: those return new slices for
// every match, garbage on every request and so GC cycles (their cost in V8:
// docs/performance.md#figures-behind-lbcores-caps-and-caches). The backtracker keeps a visited bit per (instruction,
// position), as regexp's own backtracker does, so one scan costs at most
// instructions × (input + 1) steps, and it gives the leftmost-first matches
// and submatches regexp gives (FuzzReplaceMatchesRegexp). Its state lives in
// the evaluation context, reused across decisions: no allocation once warm.

// replaceProg is a compiled replace() pattern.
type replaceProg struct {
	re   *regexp.Regexp // the same pattern, for ExpandString and String
	prog *syntax.Prog
	// anchored: the program can match only at the start of the input.
	anchored bool
}

// compileReplace compiles pattern as regexp.Compile does (Perl syntax,
// simplified) and refuses a program over MaxReplaceInsts instructions.
func compileReplace(pattern string) (*replaceProg, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	sre, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, err
	}
	prog, err := syntax.Compile(sre.Simplify())
	if err != nil {
		return nil, err
	}
	if n := len(prog.Inst); n > MaxReplaceInsts {
		return nil, fmt.Errorf("compiles to %d instructions, more than the limit of %d (MaxReplaceInsts)", n, MaxReplaceInsts)
	}
	return &replaceProg{re: re, prog: prog, anchored: prog.StartCond()&syntax.EmptyBeginText != 0}, nil
}

// matcher is the backtracker's state, kept in the evaluation context.
type matcher struct {
	visited []uint32 // bit pos·len(prog.Inst)+pc; all clear between scans
	stack   []btJob
	caps    []int // the path's capture positions
	match   []int // the match found, as regexp's submatch indexes
	out     []byte
	steps   int // steps taken in this decision (MaxReplaceSteps)
}

// btJob is a thread to resume (restore false) or a capture to restore.
type btJob struct {
	pc      uint32
	restore bool
	pos     int
}

// replaceAll is replace("re", "repl") on in: in's first MaxReplacements
// non-overlapping leftmost-first matches replaced by repl expanded as
// regexp.Expand does, as regexp.ReplaceAllString would. The result is m.out,
// valid until the next call. capped is true when a limit cut the result:
// MaxReplacements, the decision's MaxReplaceSteps, or an output over
// MaxValueBytes.
func (m *matcher) replaceAll(p *replaceProg, in string, repl string) (out []byte, capped bool) {
	m.out = m.out[:0]
	last := 0
	prevEnd := -1
	for pos, n := 0, 0; pos <= len(in); {
		found, ok := m.find(p, in, pos)
		if !ok {
			capped = true // the step budget ran out: the rest is kept as it is
			break
		}
		if !found {
			break
		}
		accept := true
		start, end := m.match[0], m.match[1]
		if end == pos { // an empty match: never right after the previous match
			accept = start != prevEnd
			if pos < len(in) {
				_, w := utf8.DecodeRuneInString(in[pos:])
				pos += w
			} else {
				pos = len(in) + 1
			}
		} else {
			pos = end
		}
		prevEnd = end
		if !accept {
			continue
		}
		if n == MaxReplacements {
			capped = true
			break
		}
		n++
		m.out = append(m.out, in[last:start]...)
		m.out = p.re.ExpandString(m.out, repl, in, m.match)
		last = end
		if len(m.out) > MaxValueBytes {
			m.out = m.out[:MaxValueBytes]
			return m.out, true
		}
	}
	m.out = append(m.out, in[last:]...)
	if len(m.out) > MaxValueBytes {
		m.out, capped = m.out[:MaxValueBytes], true
	}
	return m.out, capped
}

// find looks for the leftmost-first match of p in in at or after from and
// leaves its submatch indexes in m.match. ok is false when the decision's
// step budget ran out first.
func (m *matcher) find(p *replaceProg, in string, from int) (found, ok bool) {
	prog := p.prog
	ninst := len(prog.Inst)
	if words := (ninst*(len(in)+1) + 31) / 32; len(m.visited) < words {
		m.visited = make([]uint32, words)
	}
	if cap(m.caps) < prog.NumCap {
		m.caps, m.match = make([]int, prog.NumCap), make([]int, prog.NumCap)
	}
	m.caps, m.match = m.caps[:prog.NumCap], m.match[:prog.NumCap]
	maxPos := from
	found, ok = m.search(p, in, from, &maxPos)
	m.clear(from, maxPos, ninst)
	return found, ok
}

// search is find's scan; *maxPos is the furthest position it visited.
func (m *matcher) search(p *replaceProg, in string, from int, maxPos *int) (found, ok bool) {
	prog := p.prog
	ninst := len(prog.Inst)
	for pos := from; pos <= len(in); {
		if p.anchored && pos > 0 {
			return false, true
		}
		for i := range m.caps {
			m.caps[i] = -1
		}
		m.caps[0] = pos // the whole match's bounds are implicit in the program
		m.stack = append(m.stack[:0], btJob{pc: uint32(prog.Start), pos: pos})
		for len(m.stack) > 0 {
			j := m.stack[len(m.stack)-1]
			m.stack = m.stack[:len(m.stack)-1]
			if j.restore {
				m.caps[j.pc] = j.pos
				continue
			}
			pc, at := j.pc, j.pos
		thread:
			for {
				bit := at*ninst + int(pc)
				if m.visited[bit/32]&(1<<(bit%32)) != 0 {
					break
				}
				m.visited[bit/32] |= 1 << (bit % 32)
				*maxPos = max(*maxPos, at)
				if m.steps++; m.steps > MaxReplaceSteps {
					return false, false
				}
				inst := &prog.Inst[pc]
				switch inst.Op {
				case syntax.InstFail:
					break thread
				case syntax.InstAlt, syntax.InstAltMatch:
					m.stack = append(m.stack, btJob{pc: inst.Arg, pos: at})
					pc = inst.Out
				case syntax.InstNop:
					pc = inst.Out
				case syntax.InstCapture:
					if int(inst.Arg) < len(m.caps) {
						m.stack = append(m.stack, btJob{pc: inst.Arg, restore: true, pos: m.caps[inst.Arg]})
						m.caps[inst.Arg] = at
					}
					pc = inst.Out
				case syntax.InstEmptyWidth:
					if syntax.EmptyOp(inst.Arg)&^emptyAt(in, at) != 0 {
						break thread
					}
					pc = inst.Out
				case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
					if at >= len(in) {
						break thread
					}
					r, w := rune(in[at]), 1
					if r >= utf8.RuneSelf {
						r, w = utf8.DecodeRuneInString(in[at:])
					}
					switch inst.Op {
					case syntax.InstRuneAnyNotNL:
						if r == '\n' {
							break thread
						}
					case syntax.InstRune, syntax.InstRune1:
						if !inst.MatchRune(r) {
							break thread
						}
					}
					at += w
					pc = inst.Out
				case syntax.InstMatch:
					m.caps[1] = at
					copy(m.match, m.caps)
					return true, true
				default:
					break thread
				}
			}
		}
		if pos == len(in) {
			break
		}
		_, w := utf8.DecodeRuneInString(in[pos:])
		pos += w
	}
	return false, true
}

// clear resets the visited bits of positions from..to, all a scan can have set.
func (m *matcher) clear(from, to, ninst int) {
	lo, hi := from*ninst/32, min(((to+1)*ninst+31)/32, len(m.visited))
	if lo < hi {
		clear(m.visited[lo:hi])
	}
}

// emptyAt is the empty-width context at position pos of in, as regexp reads
// it: the runes on either side, -1 beyond the ends.
func emptyAt(in string, pos int) syntax.EmptyOp {
	r1, r2 := rune(-1), rune(-1)
	if pos > 0 {
		r1 = rune(in[pos-1])
		if r1 >= utf8.RuneSelf {
			r1, _ = utf8.DecodeLastRuneInString(in[:pos])
		}
	}
	if pos < len(in) {
		r2 = rune(in[pos])
		if r2 >= utf8.RuneSelf {
			r2, _ = utf8.DecodeRuneInString(in[pos:])
		}
	}
	return syntax.EmptyOpContext(r1, r2)
}
