package lbcore

import (
	"strings"
	"testing"
)

// replaceOracle is replace() with regexp's own matcher: the first
// MaxReplacements matches expanded, as regexp.ReplaceAllString would.
func replaceOracle(p *replaceProg, in, repl string) (string, bool) {
	m := p.re.FindAllStringSubmatchIndex(in, MaxReplacements+1)
	capped := len(m) > MaxReplacements
	if capped {
		m = m[:MaxReplacements]
	}
	var out []byte
	last := 0
	for _, loc := range m {
		out = append(out, in[last:loc[0]]...)
		out = p.re.ExpandString(out, repl, in, loc)
		last = loc[1]
	}
	return string(append(out, in[last:]...)), capped
}

var replaceCases = []struct{ name, re, repl, in string }{
	{"literal", "a", "b", "banana"},
	{"groups", `(\w+)@(\w+)\.com`, "$2/$1", "x alice@example.com, bob@corp.com y"},
	{"named", `(?P<v>v[0-9]+)`, "${v}!", "/api/v1/v22"},
	{"empty matches", "x*", "-", "abxxc"},
	{"empty after match", "a*", "-", "baaac"},
	{"anchored", "^/([^/]+)/.*", "$1", "/tenant/path/rest"},
	{"end anchor", "[0-9]+$", "N", "a1b22"},
	{"word boundary", `\bfoo\b`, "X", "foo foobar barfoo foo"},
	{"alternation order", "a.*b|a", "x", "aaaaabaaa"},
	{"rescans", "a.*b|a", "x", strings.Repeat("a", 100)},
	{"case folding", "(?i)abc", "_", "ABC aBc abd"},
	{"utf8", "é+", "e", "café éé\xffé"},
	{"invalid utf8", ".", "?", "a\xffb\xc3"},
	{"dot newline", "a.b", "X", "a\nb a-b"},
	{"multiline", "(?m)^x", "Y", "x\nx\nax"},
	{"optional group", "(a)?b", "[$1]", "b ab"},
	{"more than the cap", "a", "b", strings.Repeat("a", 40)},
	{"dollar literal", "a", "$$", "aaa"},
}

func TestReplaceMatchesRegexp(t *testing.T) {
	var m matcher
	for _, tt := range replaceCases {
		t.Run(tt.name, func(t *testing.T) {
			p, err := compileReplace(tt.re)
			if err != nil {
				t.Fatal(err)
			}
			want, wantCapped := replaceOracle(p, tt.in, tt.repl)
			m.steps = 0
			got, capped := m.replaceAll(p, tt.in, tt.repl)
			if string(got) != want || capped != wantCapped {
				t.Errorf("replace(%q, %q) on %q = %q (capped %v), want %q (capped %v) as regexp", tt.re, tt.repl, tt.in, got, capped, want, wantCapped)
			}
		})
	}
}

func FuzzReplaceMatchesRegexp(f *testing.F) {
	for _, tt := range replaceCases {
		f.Add(tt.re, tt.repl, tt.in)
	}
	var m matcher
	f.Fuzz(func(t *testing.T, re, repl, in string) {
		p, err := compileReplace(re)
		if err != nil || len(in) > MaxReplaceInput {
			return
		}
		want, wantCapped := replaceOracle(p, in, repl)
		m.steps = 0
		got, capped := m.replaceAll(p, in, repl)
		if m.steps > MaxReplaceSteps || len(want) > MaxValueBytes {
			return // cut by a limit regexp does not have
		}
		if string(got) != want || capped != wantCapped {
			t.Errorf("replace(%q, %q) on %q = %q (capped %v), want %q (capped %v) as regexp", re, repl, in, got, capped, want, wantCapped)
		}
	})
}

// TestReplaceStepBudget: a decision's replace() calls stop at MaxReplaceSteps
// together, keeping the rest of the text, and say the input was capped.
func TestReplaceStepBudget(t *testing.T) {
	p, err := compileReplace(strings.Repeat("[a-z]{0,60}", 2) + "x")
	if err != nil {
		t.Fatal(err)
	}
	in := strings.Repeat("abcdefgh", MaxReplaceInput/8)
	var m matcher
	for i := 0; ; i++ {
		out, capped := m.replaceAll(p, in, "")
		if m.steps > MaxReplaceSteps+1 {
			t.Fatalf("call %d: %d steps taken, budget %d", i, m.steps, MaxReplaceSteps)
		}
		if capped {
			if string(out) != in {
				t.Errorf("a replace cut by the budget returned %d bytes, want the input unchanged (no match)", len(out))
			}
			break
		}
		if i > MaxReplaceSteps {
			t.Fatal("the step budget never ran out")
		}
	}
}

func TestReplaceAllocatesNothing(t *testing.T) {
	p, err := compileReplace(`^/([^/]+)/(v[0-9]+)`)
	if err != nil {
		t.Fatal(err)
	}
	var m matcher
	in := "/tenant-42/v3/items?x=1"
	m.replaceAll(p, in, "$1-$2")
	if n := testing.AllocsPerRun(100, func() { m.steps = 0; m.replaceAll(p, in, "$1-$2") }); n != 0 {
		t.Errorf("replaceAll allocated %.1f times per call once warm, want 0", n)
	}
}
