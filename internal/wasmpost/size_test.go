package wasmpost

import (
	"os"
	"path/filepath"
	"testing"
)

// namedModule is tinyModule with one function import before its three
// functions and a name section naming them.
func namedModule(names ...string) []byte {
	m := tinyModule("a")
	// An import section (id 2) must come before the function section (3):
	// after the type section, which tinyModule writes first.
	typeEnd := len(magic) + 2 + 4
	imp := []byte{1, 3, 'e', 'n', 'v', 1, 'f', 0, 0} // env.f, a function of type 0
	out := append([]byte(nil), m[:typeEnd]...)
	out = append(appendUleb(append(out, 2), uint32(len(imp))), imp...)
	out = append(out, m[typeEnd:]...)
	var sub []byte
	sub = appendUleb(sub, uint32(len(names)))
	for i, n := range names {
		sub = appendUleb(sub, uint32(i+1)) // function indices after the import
		sub = append(appendUleb(sub, uint32(len(n))), n...)
	}
	body := append(appendUleb(nil, 4), "name"...)
	body = append(appendUleb(append(body, 1), uint32(len(sub))), sub...)
	return append(appendUleb(append(out, 0), uint32(len(body))), body...)
}

func TestSizes(t *testing.T) {
	s, err := Sizes(namedModule("runtime.mallocgc", "github.com_x_y.__T_.M", "github.com_x_y.F"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Total != 6 || s.Functions != 3 { // three bodies of 2 bytes
		t.Errorf("total %d bytes in %d functions, want 6 in 3", s.Total, s.Functions)
	}
	if s.ByPackage["runtime"] != 2 || s.ByPackage["github.com_x_y"] != 4 || len(s.ByPackage) != 2 {
		t.Errorf("by package %v, want runtime 2 and github.com_x_y 4", s.ByPackage)
	}
	s, err = Sizes(tinyModule("a"))
	if err != nil || s.ByPackage["?"] != 6 {
		t.Errorf("a module without names: %v, %v; want its 6 bytes under ?", s.ByPackage, err)
	}
	// Cut anywhere: an error, or (at a section's end) the sections before
	// the cut; never a panic, never more code than the whole module has.
	full := namedModule("runtime.f", "runtime.g", "runtime.h")
	errs := 0
	for cut := len(magic) + 1; cut < len(full); cut++ {
		s, err := Sizes(full[:cut])
		if err != nil {
			errs++
		} else if s.Total > 6 {
			t.Errorf("a module cut at %d of %d bytes: %d bytes of code", cut, len(full), s.Total)
		}
	}
	if errs < len(full)/2 {
		t.Errorf("only %d of %d cuts of a module were errors", errs, len(full)-len(magic)-1)
	}
}

// TestSizesOfTheModule: the shipped module's code is mostly the Go runtime
// and hashlb's own packages, as docs/performance.md says, when it is built.
func TestSizesOfTheModule(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "dist", "hashlb.wasm"))
	if err != nil {
		if os.Getenv("CI") == "true" { // ./build.sh test built it first
			t.Fatal(err)
		}
		t.Skip("no dist/hashlb.wasm (./build.sh wasm)")
	}
	s, err := Sizes(b)
	if err != nil {
		t.Fatal(err)
	}
	if s.ByPackage["runtime"] == 0 || s.ByPackage["github.com_hashlb_hashlb_lbcore"] == 0 || s.ByPackage["?"] != 0 {
		t.Errorf("packages of the module: runtime %d, lbcore %d, unnamed %d bytes", s.ByPackage["runtime"], s.ByPackage["github.com_hashlb_hashlb_lbcore"], s.ByPackage["?"])
	}
}
