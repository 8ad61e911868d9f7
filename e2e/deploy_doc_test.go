package e2e

// The README and the guides in docs/ as a new user reads them: every file
// they name exists, every command they show is one that runs here (a
// build.sh command, a package and flags that exist, a file that is there;
// Envoy, curl and kubectl are not run), every relative link of every
// Markdown file and every Markdown file a Go comment names resolve with their
// anchors, and docs/deploy.md lists every metric the module defines.

import (
	"context"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// The documents whose files and commands are held to the repository.
var walkedDocs = []string{"README.md", "docs/deploy.md", "docs/tcp.md", "docs/cli.md", "docs/testing.md", "docs/config.md", "docs/nsconf.md"}

// upstreamPrefixes start paths in other projects' repositories (Envoy's
// source/, Istio's pkg/, pilot/ and manifests/, go-control-plane's envoy/)
// that the guides cite.
var upstreamPrefixes = []string{"source/", "pkg/", "pilot/", "manifests/", "envoy/", "api/", "abi-versions/"}

func TestDocsFilesExist(t *testing.T) {
	root := repoRoot(t)
	files := repoFiles(t, root)
	top := map[string]bool{}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		top[e.Name()] = true
	}
	token := regexp.MustCompile("`([^`\\s]+)`")
	ext := regexp.MustCompile(`\.(yaml|json|md|go|sh|mjs|conf)$`)
	for _, doc := range walkedDocs {
		text := string(readRepoFile(t, doc))
		for _, m := range token.FindAllStringSubmatch(text, -1) {
			p, _, _ := strings.Cut(m[1], "#")
			first, _, _ := strings.Cut(p, "/")
			switch {
			case strings.ContainsAny(p, "<>:()[]{}|$\\") || strings.HasPrefix(p, "/") || strings.HasPrefix(p, "dist/"):
				continue // a URL, a placeholder, an absolute or a built path
			case strings.HasPrefix(p, "hashlb/"):
				continue // docs/nsconf.md's output directory (import-nsconf -o hashlb/)
			case slices.ContainsFunc(upstreamPrefixes, func(u string) bool { return strings.HasPrefix(p, u) }):
				continue
			case !ext.MatchString(strings.TrimSuffix(p, "/")) && !(top[first] && strings.Contains(p, "/")):
				continue // not a file name
			}
			if !docFileExists(root, path.Dir(doc), p, files) {
				t.Errorf("%s names %s, which is not in the repository", doc, m[1])
			}
		}
	}
}

// docFileExists: p (a path or a glob, relative to the repository root or
// to the document's directory, or the tail of a repository path) names a
// file or directory of the repository.
func docFileExists(root, dir, p string, files []string) bool {
	p = strings.TrimSuffix(p, "/")
	for _, base := range []string{root, filepath.Join(root, dir)} {
		if m, _ := filepath.Glob(filepath.Join(base, filepath.FromSlash(p))); len(m) > 0 {
			return true
		}
	}
	for _, f := range files {
		for d := f; d != "."; d = path.Dir(d) { // the file and its directories
			if d == p || strings.HasSuffix(d, "/"+p) {
				return true
			}
			if ok, _ := path.Match("*/"+p, d); ok || func() bool { ok, _ := path.Match(p, path.Base(d)); return ok }() {
				return true
			}
		}
	}
	return false
}

// repoFiles lists the repository's files, slash-separated, relative to root.
func repoFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	return out
}

// docCommand is one command line of a document's sh or console block.
type docCommand struct {
	doc, line string
	args      []string
}

// docCommands returns the commands of a document's ```sh blocks and the
// "$ " lines of its ```console blocks, comments and a trailing & removed,
// each part of an && chain on its own.
func docCommands(doc, text string) []docCommand {
	var out []docCommand
	block := ""
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			if block == "" {
				block = strings.TrimPrefix(line, "```")
				if block == "" {
					block = "plain"
				}
			} else {
				block = ""
			}
			continue
		case block == "console" && strings.HasPrefix(line, "$ "):
			line = strings.TrimPrefix(line, "$ ")
		case block != "sh":
			continue
		}
		if i := strings.Index(line, "#"); i >= 0 && (i == 0 || line[i-1] == ' ') {
			line = line[:i]
		}
		for _, part := range strings.Split(line, "&&") {
			part = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(part), "&"))
			if part != "" {
				out = append(out, docCommand{doc: doc, line: part, args: envoyrun.ShellWords(part)})
			}
		}
	}
	return out
}

func TestDocsCommandsRun(t *testing.T) {
	root := repoRoot(t)
	buildSh := string(readRepoFile(t, "build.sh"))
	proxyFlags := commandFlags(t, buildProxy(t), nil)
	hashlbBin := buildCommand(t, "./cmd/hashlb")
	hashlbFlags := map[string][]string{}
	for _, sub := range []string{"check", "explain", "import-nsconf"} {
		hashlbFlags[sub] = append(commandFlags(t, hashlbBin, []string{sub}), "h")
	}
	flagsOK := func(c docCommand, known []string, args []string) {
		for _, a := range args {
			if !strings.HasPrefix(a, "-") || a == "-" {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !slices.Contains(known, name) {
				t.Errorf("%s: %q: no flag -%s (the command has %v)", c.doc, c.line, name, known)
			}
		}
	}
	filesOK := func(c docCommand, args []string) {
		for _, a := range args {
			if strings.HasPrefix(a, "-") || !strings.ContainsAny(a, "./") || strings.Contains(a, ":") {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(a))); err != nil && (strings.HasSuffix(a, ".json") || strings.HasSuffix(a, ".yaml")) {
				t.Errorf("%s: %q: %s is not in the repository", c.doc, c.line, a)
			}
		}
	}
	n := 0
	for _, doc := range walkedDocs {
		for _, c := range docCommands(doc, string(readRepoFile(t, doc))) {
			n++
			a := c.args
			switch a[0] {
			case "./build.sh":
				if len(a) < 2 || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(a[1])+`\)`).MatchString(buildSh) {
					t.Errorf("%s: %q: build.sh has no command %v", doc, c.line, a[1:])
				}
			case "go":
				if len(a) < 3 || a[1] != "run" {
					t.Errorf("%s: %q: only go run is expected in a guide", doc, c.line)
					continue
				}
				switch a[2] {
				case "./hostsim/cmd/hashlb-proxy":
					flagsOK(c, proxyFlags, a[3:])
				case "./cmd/hashlb":
					if len(a) < 4 || hashlbFlags[a[3]] == nil {
						t.Errorf("%s: %q: no hashlb command %v", doc, c.line, a[3:])
						continue
					}
					flagsOK(c, hashlbFlags[a[3]], a[4:])
				default:
					t.Errorf("%s: %q: a go run of %s, which this test does not know", doc, c.line, a[2])
				}
				filesOK(c, a[3:])
			case "hashlb":
				if len(a) < 2 || hashlbFlags[a[1]] == nil {
					t.Errorf("%s: %q: no hashlb command %v", doc, c.line, a[1:])
					continue
				}
				flagsOK(c, hashlbFlags[a[1]], a[2:])
				filesOK(c, a[2:])
			case "envoy":
				if i := slices.Index(a, "-c"); i < 0 || i+1 >= len(a) {
					t.Errorf("%s: %q: envoy without -c FILE", doc, c.line)
				} else if err := checkBootstrapFile(readRepoFile(t, a[i+1])); err != nil {
					t.Errorf("%s: %q: %v", doc, c.line, err)
				}
			case "kubectl":
				for i, x := range a {
					if x == "-f" && i+1 < len(a) {
						if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(a[i+1]))); err != nil {
							t.Errorf("%s: %q: %s is not in the repository", doc, c.line, a[i+1])
						}
					}
				}
			case "curl", "oras", "istioctl", "etcd", "cat":
				// Need a running proxy, a registry, a cluster or a server: not run here.
			default:
				t.Errorf("%s: %q: a command this test does not know (teach TestDocsCommandsRun, or show it otherwise)", doc, c.line)
			}
		}
	}
	if n < 10 {
		t.Fatalf("found %d commands in %v, want the guides' commands", n, walkedDocs)
	}
}

// commandFlags runs bin args... -h and returns the flag names its usage lists.
func commandFlags(t *testing.T, bin string, args []string) []string {
	t.Helper()
	out, err := exec.CommandContext(context.Background(), bin, append(args, "-h")...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v -h: %v\n%s", filepath.Base(bin), args, err, out)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(string(out), -1) {
		names = append(names, m[1])
	}
	if !strings.Contains(strings.ToLower(string(out)), "usage") {
		t.Fatalf("%s %v -h printed no usage:\n%s", filepath.Base(bin), args, out)
	}
	return names
}

// TestDocsLinksResolve: every relative link of every Markdown file in the
// repository, and its anchor, resolves.
func TestDocsLinksResolve(t *testing.T) {
	root := repoRoot(t)
	var docs []string
	for _, f := range repoFiles(t, root) {
		if strings.HasSuffix(f, ".md") {
			docs = append(docs, f)
		}
	}
	if !slices.Contains(docs, "README.md") || !slices.Contains(docs, "docs/config.md") {
		t.Fatalf("found the Markdown files %v, which lack README.md or docs/config.md", docs)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, doc := range docs {
		text := string(readRepoFile(t, doc))
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := doc
			if file != "" {
				dest = path.Join(path.Dir(doc), file)
			}
			if err := linkResolves(root, dest, anchor); err != nil {
				t.Errorf("%s links to %s: %v", doc, target, err)
			}
		}
	}
}

// TestGoCommentLinksResolve: every Markdown file of this repository a Go
// comment names (docs/envoy-host.md#http-callouts, RATIONALE.md, or a path
// relative to the comment's file starting with ./ or ../), and its anchor,
// resolves. A path whose first element is not in the
// repository's root (xxhash's doc/xxhash_spec.md) is another project's, and
// dist/ holds what the commands write.
func TestGoCommentLinksResolve(t *testing.T) {
	root := repoRoot(t)
	top, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{".": true, "..": true}
	for _, e := range top {
		ours[e.Name()] = e.Name() != "dist"
	}
	ref := regexp.MustCompile(`[A-Za-z0-9_./-]+\.md(#[A-Za-z0-9_-]+)?`)
	fset := token.NewFileSet()
	checked := 0
	for _, f := range repoFiles(t, root) {
		if !strings.HasSuffix(f, ".go") {
			continue
		}
		file, err := parser.ParseFile(fset, filepath.Join(root, filepath.FromSlash(f)), nil, parser.ParseComments)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, g := range file.Comments {
			for _, c := range g.List {
				for _, m := range ref.FindAllString(c.Text, -1) {
					target, anchor, _ := strings.Cut(m, "#")
					first, _, _ := strings.Cut(target, "/")
					if !ours[first] {
						continue
					}
					dest := target
					if first == "." || first == ".." {
						dest = path.Join(path.Dir(f), target)
					}
					checked++
					if err := linkResolves(root, dest, anchor); err != nil {
						t.Errorf("%s:%d names %s: %v", f, fset.Position(c.Pos()).Line, m, err)
					}
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d links in Go comments; the tree has far more: is the pattern broken?", checked)
	}
}

// linkResolves reports why dest (a path from the repository's root) with
// anchor does not resolve: a missing file, or a Markdown file without a
// heading of that anchor. A directory resolves without an anchor.
func linkResolves(root, dest, anchor string) error {
	name := filepath.Join(root, filepath.FromSlash(dest))
	data, err := os.ReadFile(name)
	if err != nil {
		if st, serr := os.Stat(name); serr == nil && st.IsDir() && anchor == "" {
			return nil
		}
		return fmt.Errorf("%s does not exist", dest)
	}
	if anchor != "" && strings.HasSuffix(dest, ".md") && !slices.Contains(anchors(string(data)), anchor) {
		return fmt.Errorf("%s has no heading with anchor #%s", dest, anchor)
	}
	return nil
}

// anchors returns GitHub's anchors for a markdown text's headings: lower
// case, letters, digits, _ and - kept, spaces as -, repeats numbered.
func anchors(md string) []string {
	var out []string
	seen := map[string]int{}
	inCode := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out = append(out, a+"-"+strconv.Itoa(n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}

// TestDocsMetrics: every metric the module defines, with every feature
// configured, is in docs/deploy.md's metrics table.
func TestDocsMetrics(t *testing.T) {
	config := []byte(`{"lbMethod": "URLHASH",
	  "persistence": {"keys": ["${request.header.x-client-id}"], "fleet": {"cluster": "etcd"}},
	  "healthCheck": {"path": "/healthz"}, "passiveHealth": {"consecutiveFailures": 5},
	  "services": [{"name": "b1", "address": "127.0.0.1:18081"}]}`)
	h, err := hostsim.New(context.Background(), module(t), hostsim.Config{PluginConfig: config})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	deploy := string(readRepoFile(t, "docs/deploy.md"))
	_, table, ok := strings.Cut(deploy, "| metric | kind |")
	if !ok {
		t.Fatal("docs/deploy.md: no metrics table (| metric | kind |)")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	var patterns []*regexp.Regexp
	for _, m := range regexp.MustCompile("(?m)^\\| (.*?) \\|").FindAllStringSubmatch(table, -1) {
		for _, name := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[1], -1) {
			re := regexp.QuoteMeta(name[1])
			re = regexp.MustCompile(`<[a-z]+>`).ReplaceAllString(re, `[^.]+`)
			re = regexp.MustCompile(`\\\{([^}]*)\\\}`).ReplaceAllStringFunc(re, func(s string) string {
				return "(" + strings.ReplaceAll(strings.Trim(s, `\{}`), ",", "|") + ")"
			})
			patterns = append(patterns, regexp.MustCompile("^"+re+"$"))
		}
	}
	metrics := h.Metrics()
	if len(metrics) < 20 {
		t.Fatalf("the module defined %d metrics, want every kind", len(metrics))
	}
	for name := range metrics {
		if !slices.ContainsFunc(patterns, func(p *regexp.Regexp) bool { return p.MatchString(name) }) {
			t.Errorf("metric %s is not in docs/deploy.md's metrics table", name)
		}
	}
}

// TestDocsDeployNamesEveryConfig: every file of configs/ is in
// docs/deploy.md's table of files, by its path or by a directory or glob
// that covers it.
func TestDocsDeployNamesEveryConfig(t *testing.T) {
	deploy := string(readRepoFile(t, "docs/deploy.md"))
	_, table, ok := strings.Cut(deploy, "| file | what it is | what it needs |")
	if !ok {
		t.Fatal("docs/deploy.md: no table of files (| file | what it is | what it needs |)")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	var named []string
	for _, m := range regexp.MustCompile("(?m)^\\| (.*?) \\|").FindAllStringSubmatch(table, -1) {
		for _, n := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[1], -1) {
			named = append(named, n[1])
		}
	}
	for _, f := range repoFiles(t, repoRoot(t)) {
		if !strings.HasPrefix(f, "configs/") && f != "envoy.yaml" {
			continue
		}
		if !slices.ContainsFunc(named, func(n string) bool {
			ok, _ := path.Match(n, f)
			return n == f || ok || strings.HasSuffix(n, "/") && strings.HasPrefix(f, n)
		}) {
			t.Errorf("%s is not in docs/deploy.md's table of files: add a row with what it needs", f)
		}
	}
}
