package hostile

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The classes the corpus must have; it may have more.
var wantClasses = []string{"jwt-deep-array", "jwt-deep-object", "jwt-huge", "jwt-malformed", "long-inputs",
	"replace-quadratic", "many-header-lines", "repeated-forged", "bad-bytes", "bad-addresses", "absolute-form",
	"split-xff", "split-cookie"}

func TestDeterministic(t *testing.T) {
	if a, b := Requests(), Requests(); !reflect.DeepEqual(a, b) {
		t.Error("Requests() returned different corpora on two calls")
	}
	if a, b := Benign(), Benign(); !reflect.DeepEqual(a, b) {
		t.Error("Benign() returned different corpora on two calls")
	}
	if a, b := Classes(), Classes(); !reflect.DeepEqual(a, b) {
		t.Error("Classes() returned different names on two calls")
	}
}

func TestClasses(t *testing.T) {
	names := Classes()
	for _, c := range wantClasses {
		if !slices.Contains(names, c) {
			t.Errorf("Classes() = %q, missing %q", names, c)
		}
	}
	count := map[string]int{}
	for _, r := range Requests() {
		if !slices.Contains(names, r.Class) {
			t.Errorf("request of class %q, not one of Classes()", r.Class)
		}
		count[r.Class]++
	}
	seen := map[string]bool{}
	for _, c := range names {
		if seen[c] {
			t.Errorf("Classes() lists %q twice", c)
		}
		seen[c] = true
		if count[c] == 0 {
			t.Errorf("class %q has no request", c)
		}
	}
	t.Logf("%d hostile requests: %v", len(Requests()), count)
}

// TestSizes: no header value beyond Envoy's default limit (arena-edge's
// within the 8 MiB an operator may raise it to), the deep-JSON
// classes from 1 KiB to that limit (13 KiB among them), and the corpus
// moderate in total.
func TestSizes(t *testing.T) {
	for _, set := range []struct {
		name string
		reqs []Request
	}{{"hostile", Requests()}, {"benign", Benign()}} {
		total := 0
		for i, r := range set.reqs {
			for _, h := range r.Headers {
				total += len(h[0]) + len(h[1])
				limit := MaxValue
				if r.Class == "arena-edge" {
					limit = 8 << 20 // max_request_headers_kb's maximum
				}
				if len(h[1]) > limit {
					t.Errorf("%s request %d (%s): header %q is %d bytes, want ≤ %d", set.name, i, r.Class, h[0], len(h[1]), limit)
				}
			}
			if len(r.Source) > MaxValue || len(r.Dest) > MaxValue {
				t.Errorf("%s request %d (%s): address of %d/%d bytes, want ≤ %d", set.name, i, r.Class, len(r.Source), len(r.Dest), MaxValue)
			}
		}
		t.Logf("%s: %d requests, %d header bytes", set.name, len(set.reqs), total)
		if len(set.reqs) > 1000 || total > 32<<20 {
			t.Errorf("%s corpus: %d requests, %d bytes: want ≤ 1000 and ≤ 32 MiB", set.name, len(set.reqs), total)
		}
	}
	for _, class := range []string{"jwt-deep-array", "jwt-deep-object"} {
		var sizes []int
		for _, r := range Requests() {
			if r.Class != class {
				continue
			}
			for _, h := range r.Headers {
				if h[0] == "authorization" || h[0] == "cookie" {
					sizes = append(sizes, len(h[1]))
				}
			}
		}
		if len(sizes) == 0 {
			t.Fatalf("%s: no authorization or cookie header", class)
		}
		lo, hi := slices.Min(sizes), slices.Max(sizes)
		if lo > 1<<10 || hi < MaxValue-64 || !slices.ContainsFunc(sizes, func(n int) bool { return n > 12<<10 && n <= 13<<10 }) {
			t.Errorf("%s: header sizes %d..%d bytes, want 1 KiB..%d with one of 13 KiB", class, lo, hi, MaxValue)
		}
	}
}

// TestPseudoHeaders: every request but those of missing-pseudo has the four
// pseudo-headers, first; benign requests have a session or token or client
// to key on often enough to be worth running.
func TestPseudoHeaders(t *testing.T) {
	check := func(name string, reqs []Request) {
		for i, r := range reqs {
			if r.Class == "missing-pseudo" {
				continue
			}
			var first []string
			for _, h := range r.Headers[:min(4, len(r.Headers))] {
				first = append(first, h[0])
			}
			slices.Sort(first)
			if want := []string{":authority", ":method", ":path", ":scheme"}; !slices.Equal(first, want) {
				t.Errorf("%s request %d (%s): first headers %q, want %q", name, i, r.Class, first, want)
			}
		}
	}
	check("hostile", Requests())
	check("benign", Benign())
	jwts := 0
	for _, r := range Benign() {
		if r.Class != "benign" {
			t.Fatalf("benign request of class %q", r.Class)
		}
		for _, h := range r.Headers {
			if h[0] == "authorization" || strings.Contains(h[1], "session=eyJ") {
				jwts++
			}
		}
	}
	if n := len(Benign()); n < len(Requests())/2 || n > 2*len(Requests()) || jwts < n/10 {
		t.Errorf("benign corpus: %d requests (%d with a JWT), hostile %d: want a similar count, ≥ 10%% with a JWT", n, jwts, len(Requests()))
	}
}
