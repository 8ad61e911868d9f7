package e2e

// Every package's map of its files: the package comment of doc.go (or, with
// no doc.go, of the file carrying "// Package …" or "// Command …") names
// every other non-test .go file of the directory, so a file added without a
// word on what it holds fails here. It covers the root module and the nested
// ones under it (cmd/hashlb-controller and any other), and skips testdata,
// dist and hidden directories.

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDocMapNamesEveryFile(t *testing.T) {
	root := repoRoot(t)
	dirs := map[string][]string{} // directory → its non-test .go files
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (name == "testdata" || name == "dist" || name == "node_modules" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") &&
			!strings.HasPrefix(name, ".") && !strings.HasPrefix(name, "_") {
			dir := filepath.Dir(p)
			dirs[dir] = append(dirs[dir], name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no Go files found under", root)
	}
	keys := make([]string, 0, len(dirs))
	for dir := range dirs {
		keys = append(keys, dir)
	}
	slices.Sort(keys)
	for _, dir := range keys {
		files := dirs[dir]
		if len(files) < 2 {
			continue
		}
		rel, _ := filepath.Rel(root, dir)
		rel = filepath.ToSlash(rel)
		mapFile, doc := packageMap(t, dir, files)
		if mapFile == "" {
			t.Errorf("%s: no doc.go and no file with a package comment to map its files %v", rel, files)
			continue
		}
		var missing []string
		for _, f := range files {
			if f != mapFile && !namesFile(doc, f) {
				missing = append(missing, f)
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s: the package comment of %s does not name %s",
				rel, mapFile, strings.Join(missing, ", "))
		}
	}
}

// packageMap returns the file whose package comment maps the package, and
// the comment's text: doc.go if there is one, else the first file with a
// comment starting "Package " or "Command ".
func packageMap(t *testing.T, dir string, files []string) (string, string) {
	t.Helper()
	fset := token.NewFileSet()
	read := func(name string) string {
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc == nil {
			return ""
		}
		return f.Doc.Text()
	}
	if slices.Contains(files, "doc.go") {
		return "doc.go", read("doc.go")
	}
	sorted := slices.Clone(files)
	slices.Sort(sorted)
	for _, name := range sorted {
		if doc := read(name); strings.HasPrefix(doc, "Package ") || strings.HasPrefix(doc, "Command ") {
			return name, doc
		}
	}
	return "", ""
}

// namesFile reports whether doc names the file base as a word of its own:
// "store.go" is not named by "fleet_store.go" nor by "fleet/store.go".
func namesFile(doc, base string) bool {
	inName := func(c byte) bool {
		return c == '_' || c == '-' || c == '.' || c == '/' ||
			'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
	}
	for i := 0; ; {
		j := strings.Index(doc[i:], base)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(base)
		if (start == 0 || !inName(doc[start-1])) && (end == len(doc) || !inName(doc[end]) || doc[end] == '.' && (end+1 == len(doc) || !inName(doc[end+1]))) {
			return true
		}
		i = start + 1
	}
}
