package lbcore

import (
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestXXHShort: the persistence table's short-key hash is xxhash's XXH64 for
// every length below a stripe, on random bytes.
func TestXXHShort(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 0; n < 32; n++ {
		for range 200 {
			k := make([]byte, n)
			for i := range k {
				k[i] = byte(rng.Uint32())
			}
			if got, want := xxhShort(string(k)), xxhash.Sum64(k); got != want {
				t.Fatalf("xxhShort(%x) = %#x, xxhash.Sum64 = %#x", k, got, want)
			}
		}
	}
}

// TestXXH64BlocksIdentical: the unrolled short-key hash stands twice in
// shipped code, in decide (inlined by hand: a call costs the Wasm build a
// jump through the function's dispatch) and as xxhShort. The two are the same
// statements, but for decide's assignment to k where xxhShort returns, so
// what TestXXHShort proves of one (and TestXXH64Pieces, under the build tag
// hashlb_inlinehash, of the other) holds for both.
func TestXXH64BlocksIdentical(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	show := func(n ast.Node) string {
		var b strings.Builder
		if err := printer.Fprint(&b, fset, n); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	var short []ast.Stmt
	var inlined [][]ast.Stmt
	for _, f := range pkgs["lbcore"].Files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Name.Name == "xxhShort" && n.Recv == nil {
					short = n.Body.List
				}
			case *ast.IfStmt:
				// decide's block: the one that does not call xxhShort.
				if show(n.Cond) == "inlineHash && len(key) < 32" && !strings.Contains(show(n.Body), "xxhShort(") {
					inlined = append(inlined, n.Body.List)
				}
			}
			return true
		})
	}
	if len(short) == 0 || len(inlined) != 1 {
		t.Fatalf("found xxhShort's body (%d statements) and %d hand-inlined blocks; want both, one block", len(short), len(inlined))
	}
	block := inlined[0]
	if len(block) != len(short) {
		t.Fatalf("decide's block has %d statements, xxhShort %d", len(block), len(short))
	}
	for i := range short[:len(short)-1] {
		if a, b := show(block[i]), show(short[i]); a != b {
			t.Errorf("statement %d differs:\ndecide:\n%s\nxxhShort:\n%s", i+1, a, b)
		}
	}
	ret, ok1 := short[len(short)-1].(*ast.ReturnStmt)
	set, ok2 := block[len(block)-1].(*ast.AssignStmt)
	if !ok1 || !ok2 || len(ret.Results) != 1 || len(set.Rhs) != 1 || show(ret.Results[0]) != show(set.Rhs[0]) {
		t.Errorf("the last statements differ: decide's %s, xxhShort's %s", show(block[len(block)-1]), show(short[len(short)-1]))
	}
}
