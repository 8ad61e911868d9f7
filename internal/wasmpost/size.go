package wasmpost

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// CodeSize is how a module's code section divides among the Go packages
// its functions come from: the bytes V8 compiles, and what Envoy's start-up
// time grows with (docs/performance.md, "The module's size and start-up").
type CodeSize struct {
	Total     int            // bytes of every function body
	Functions int            // functions defined (imports aside)
	ByPackage map[string]int // package (as the name section spells it) → bytes
}

// Sizes reads module's code section and its name section's function names
// (Go's linker writes them unless -ldflags=-s; without them every body
// counts under "?"). A package is a name's part before the first '.' after
// its last path element: Go writes "github.com/x/y.(*T).M" with '/', '(',
// '*' and ')' as '_', so "github.com_x_y".
func Sizes(module []byte) (CodeSize, error) {
	if !bytes.HasPrefix(module, magic) {
		return CodeSize{}, errors.New("wasmpost: not a WebAssembly 1.0 binary module")
	}
	var imported int
	var bodies []int
	names := map[int]string{}
	for p := len(magic); p < len(module); {
		id := module[p]
		size, n, err := uleb(module[p+1:])
		if err != nil {
			return CodeSize{}, fmt.Errorf("wasmpost: section at %d: %w", p, err)
		}
		body := p + 1 + n
		end := body + int(size)
		if end > len(module) || end < body {
			return CodeSize{}, fmt.Errorf("wasmpost: section at %d runs past the end", p)
		}
		r := &reader{b: module[body:end]}
		switch id {
		case 2:
			imported = r.functionImports()
		case 10:
			for range r.u32() {
				if l := r.u32(); r.skip(int(l)) {
					bodies = append(bodies, int(l))
				}
			}
		case 0:
			if string(r.bytes()) == "name" {
				r.functionNames(names)
			}
		}
		if r.err != nil {
			return CodeSize{}, fmt.Errorf("wasmpost: section %d at %d: %w", id, p, r.err)
		}
		p = end
	}
	s := CodeSize{Functions: len(bodies), ByPackage: map[string]int{}}
	for i, l := range bodies {
		s.Total += l
		s.ByPackage[packageOf(names[imported+i])] += l
	}
	return s, nil
}

// packageOf is the package part of a function's name in Go's name section:
// up to the first '.', or for a path under a domain (github.com_x_y.F), up
// to the first '.' after the domain.
func packageOf(name string) string {
	if name == "" {
		return "?"
	}
	i := strings.IndexByte(name, '.')
	if i < 0 {
		return name
	}
	for _, tld := range []string{".com_", ".org_", ".io_", ".in_", ".net_", ".dev_"} {
		if strings.HasPrefix(name[i:], tld) {
			rest := i + len(tld)
			if j := strings.IndexByte(name[rest:], '.'); j >= 0 {
				return name[:rest+j]
			}
			return name
		}
	}
	return name[:i]
}

// reader reads a section's body; the first error sticks and every later
// read returns zero.
type reader struct {
	b   []byte
	p   int
	err error
}

func (r *reader) u32() uint32 {
	if r.err != nil {
		return 0
	}
	x, n, err := uleb(r.b[r.p:])
	if err != nil {
		r.err = err
		return 0
	}
	r.p += n
	return x
}

// skip steps over n bytes, reporting whether they were there.
func (r *reader) skip(n int) bool {
	if r.err == nil && (n < 0 || n > len(r.b)-r.p) {
		r.err = errors.New("a length runs past the section's end")
	}
	if r.err != nil {
		return false
	}
	r.p += n
	return true
}

// bytes reads a length-prefixed byte string (a name).
func (r *reader) bytes() []byte {
	n := int(r.u32())
	start := r.p
	if !r.skip(n) {
		return nil
	}
	return r.b[start:r.p]
}

// functionImports counts the import section's function imports (they
// take the first function indices).
func (r *reader) functionImports() int {
	count := 0
	for range r.u32() {
		r.bytes() // module
		r.bytes() // name
		if !r.skip(1) {
			return 0
		}
		switch kind := r.b[r.p-1]; kind {
		case 0: // function: its type index
			r.u32()
			count++
		case 1: // table: reference type, limits
			r.skip(1)
			r.limits()
		case 2: // memory: limits
			r.limits()
		case 3: // global: value type, mutability
			r.skip(2)
		default:
			if r.err == nil {
				r.err = fmt.Errorf("import of unknown kind %d", kind)
			}
		}
	}
	return count
}

func (r *reader) limits() {
	if !r.skip(1) {
		return
	}
	hasMax := r.b[r.p-1]&1 != 0
	r.u32()
	if hasMax {
		r.u32()
	}
}

// functionNames reads the name section's function names (subsection 1)
// into names by function index.
func (r *reader) functionNames(names map[int]string) {
	for r.err == nil && r.p < len(r.b) {
		if !r.skip(1) {
			return
		}
		sub := r.b[r.p-1]
		size := int(r.u32())
		end := r.p + size
		if sub != 1 {
			r.skip(size)
			continue
		}
		for range r.u32() {
			idx := r.u32()
			names[int(idx)] = string(r.bytes())
		}
		if r.err == nil && r.p != end {
			r.err = errors.New("the function names' subsection's length is not what it holds")
		}
	}
}
