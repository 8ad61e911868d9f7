package fleet

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxFields bounds the fields of a struct type of this package: each
// concern of a worker's protocol (root calls, health, the create budget,
// the sync queue, the known keys, divert) is a type of its own, and the
// Client holds one field per concern.
const maxFields = 15

// TestTypesSmall fails when a struct type of the package (test files
// aside) declares more than maxFields fields, an embedded one counting one.
func TestTypesSmall(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	seen := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := spec.Type.(*ast.StructType)
			if !ok {
				return true
			}
			seen++
			fields := 0
			for _, fl := range st.Fields.List {
				fields += max(len(fl.Names), 1)
			}
			if fields > maxFields {
				t.Errorf("%s: type %s has %d fields, want at most %d: split it by concern", fset.Position(spec.Pos()), spec.Name.Name, fields, maxFields)
			}
			return true
		})
	}
	if seen < 10 {
		t.Fatalf("read %d struct types, want the package's (run from its directory)", seen)
	}
}
