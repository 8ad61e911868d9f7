package lbcore

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// schemaPaths lists every field path of a decoded JSON Schema, nested
// objects and array items included ("services[].weight").
func schemaPaths(node map[string]any, prefix string) []string {
	var out []string
	props, _ := node["properties"].(map[string]any)
	for name, v := range props {
		child, _ := v.(map[string]any)
		p := prefix + name
		out = append(out, p)
		if items, ok := child["items"].(map[string]any); ok {
			out = append(out, schemaPaths(items, p+"[].")...)
		}
		out = append(out, schemaPaths(child, p+".")...)
	}
	return out
}

// parentPath is the path of the object that holds path, or "".
func parentPath(path string) string {
	i := strings.LastIndex(path, ".")
	if i < 0 {
		return ""
	}
	return strings.TrimSuffix(path[:i], "[]")
}

// TestHostTable: every field of configs/schema.json and of the field table
// says what every host does with it, and says it whole: a refusal has its
// reason and what to do instead, a limit or an ignored field its reason, and
// a field refused with its object sits in an object the host refuses.
func TestHostTable(t *testing.T) {
	paths := schemaPaths(loadSchemaFile(t), "")
	for _, f := range Fields() {
		if !slices.Contains(paths, f.Path) {
			paths = append(paths, f.Path)
		}
	}
	slices.Sort(paths)
	if len(paths) < len(Fields()) {
		t.Fatalf("%d paths, want at least the field table's %d", len(paths), len(Fields()))
	}
	for _, path := range paths {
		for _, h := range Hosts() {
			r, ok := HostRuleOf(h, path)
			switch {
			case !ok:
				t.Errorf("%s: in configs/schema.json but not in the field table", path)
			case r.Support == supportUnset:
				t.Errorf("%s: no entry for the %s in the host table (lbcore/hosts.go)", path, h)
			case r.Support == Refuse && (r.Why == "" || r.Instead == ""):
				t.Errorf("%s: the %s refuses it without a reason and an alternative", path, h)
			case (r.Support == Limit || r.Support == Ignore) && r.Why == "":
				t.Errorf("%s: the %s %s it without saying why", path, h, r.Support)
			case r.Support == AsParent:
				p, _ := HostRuleOf(h, parentPath(path))
				if p.Support != Refuse && p.Support != AsParent {
					t.Errorf("%s: refused with its object by the %s, which %s %s", path, h, p.Support, parentPath(path))
				}
			}
		}
	}
}

// sampleConfig is a configuration that sets the field at path (and what
// it needs to be valid for the HTTP filter) to the value
// testdata/config/valid/every-field.json gives it; an object to {}, so that
// it holds none of its own fields but the required ones.
func sampleConfig(t *testing.T, f FieldSpec) map[string]any {
	t.Helper()
	every := gjson.ParseBytes(readFile(t, "testdata/config/valid/every-field.json"))
	v := every.Get(strings.ReplaceAll(f.Path, "[]", ".0"))
	if !v.Exists() {
		t.Fatalf("every-field.json has no %s", f.Path)
	}
	raw := v.Raw
	if f.Type == "object" {
		raw = "{}"
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(configWith(f.Path, raw)), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// refusedPaths returns the paths a host's refusals name.
func refusedPaths(errs []string, h Host) []string {
	var out []string
	for _, e := range errs {
		if path, _, ok := strings.Cut(e, ": not served by the "+h.String()+": "); ok {
			out = append(out, path)
		}
	}
	return out
}

// wantRefused is what a configuration setting path alone is refused for by
// h: the field itself, or the object that holds it; nothing when h serves it.
func wantRefused(h Host, path string) []string {
	for p := path; p != ""; p = parentPath(p) {
		r, _ := HostRuleOf(h, p)
		if r.Support == Refuse {
			return []string{p}
		}
	}
	return nil
}

// TestHostRefusals sets each field alone and checks that the network
// filter (ParseConfig with filterType network) and the load-balancing
// policy (HostPolicy.Refusals, which internal/lbpolicy.ParseConfig runs)
// refuse exactly the fields the table says they refuse, or the object
// that holds them, naming it, with the table's reason.
func TestHostRefusals(t *testing.T) {
	for _, f := range Fields() {
		t.Run(f.Path, func(t *testing.T) {
			m := sampleConfig(t, f)
			if f.Path != "filterType" {
				m["filterType"] = FilterNetwork
				if _, set := m["lbMethod"]; !set {
					m["lbMethod"] = "SOURCEIPHASH"
				}
				b, _ := json.Marshal(m)
				var lines []string
				if _, err := ParseConfig(b); err != nil {
					lines = strings.Split(err.Error(), "\n")
				}
				got, want := refusedPaths(lines, HostNetwork), wantRefused(HostNetwork, f.Path)
				if !slices.Equal(got, want) {
					t.Errorf("network filter: ParseConfig(%s) refuses %q, want %q:\n%s", b, got, want, strings.Join(lines, "\n"))
				}
				delete(m, "filterType")
			}
			if !strings.HasPrefix(f.Path, "services") {
				delete(m, "services")
			}
			b, _ := json.Marshal(m)
			var lines []string
			for _, err := range HostPolicy.Refusals(gjson.ParseBytes(b)) {
				lines = append(lines, err.Error())
			}
			got, want := refusedPaths(lines, HostPolicy), wantRefused(HostPolicy, f.Path)
			if !slices.Equal(got, want) {
				t.Errorf("policy: Refusals(%s) names %q, want %q", b, got, want)
			}
			for _, l := range lines {
				if len(want) == 0 {
					break
				}
				r, _ := HostRuleOf(HostPolicy, want[0])
				if !strings.HasSuffix(l, ": "+r.Why+"; "+r.Instead) {
					t.Errorf("policy: %q, want the table's reason and alternative", l)
				}
			}
		})
	}
}

// TestPolicyRefusesSession: a session block in the policy's configuration is
// refused, naming session and Envoy's stateful_session filter.
func TestPolicyRefusesSession(t *testing.T) {
	errs := HostPolicy.Refusals(gjson.Parse(`{"lbMethod":"URLHASH","session":{"type":"cookie"}}`))
	if len(errs) != 1 {
		t.Fatalf("Refusals = %v, want one", errs)
	}
	msg := errs[0].Error()
	if !strings.HasPrefix(msg, "session: ") || !strings.Contains(msg, "envoy.filters.http.stateful_session") {
		t.Errorf("Refusals = %q, want session named and stateful_session as the alternative", msg)
	}
}

// Where docs/config.md's host table starts and ends.
const (
	hostDocStart = "<!-- host table: generated from lbcore/hosts.go by go test ./lbcore -run Golden -update -->"
	hostDocEnd   = "<!-- end of the host table -->"
)

// hostDocTable writes the host table as docs/config.md shows it.
func hostDocTable() string {
	var b strings.Builder
	b.WriteString("| field |")
	for _, h := range Hosts() {
		b.WriteString(" " + strings.TrimSuffix(h.String(), " (filterType network)") + " |")
	}
	b.WriteString("\n|---|---|---|---|\n")
	for _, f := range Fields() {
		b.WriteString("| `" + f.Path + "` |")
		for _, h := range Hosts() {
			r, _ := HostRuleOf(h, f.Path)
			cell := r.Support.String()
			switch r.Support {
			case Limit, Ignore:
				cell += ": " + r.Why
			case Refuse:
				cell = "**refuses**: " + r.Why + "; " + r.Instead
			case AsParent:
				cell = "refused with `" + strings.Join(wantRefused(h, f.Path), "") + "`"
			}
			b.WriteString(" " + strings.ReplaceAll(cell, "|", `\|`) + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestGoldenHostTable: docs/config.md's host table is the Go table's;
// go test ./lbcore -run Golden -update rewrites it.
func TestGoldenHostTable(t *testing.T) {
	const file = "../docs/config.md"
	doc := string(readFile(t, file))
	start, end := strings.Index(doc, hostDocStart), strings.Index(doc, hostDocEnd)
	if start < 0 || end < start {
		t.Fatalf("%s: no host table between %q and %q", file, hostDocStart, hostDocEnd)
	}
	want := hostDocStart + "\n\n" + hostDocTable() + "\n"
	got := doc[start:end]
	if *update && got != want {
		doc = doc[:start] + want + doc[end:]
		if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		got = want
	}
	if got != want {
		t.Errorf("%s's host table differs from lbcore/hosts.go's (go test ./lbcore -run Golden -update rewrites it):\n%s\nwant\n%s", file, got, want)
	}
}

// networkLimits are, for each field the network filter serves with some
// values refused, a configuration with one such value (filterType network
// added): TestNetworkLimits checks that it is refused, naming the field.
var networkLimits = map[string]string{
	"lbMethod":         `{"lbMethod":"URLHASH"}`,
	"token":            `{"lbMethod":"TOKEN","token":"${request.header.x-tenant}"}`,
	"persistence.keys": `{"lbMethod":"SOURCEIPHASH","persistence":{"keys":["${request.path}"]}}`,
	"upstreamVia":      `{"lbMethod":"SOURCEIPHASH","upstreamVia":"header"}`,
	"upstreamCount":    `{"lbMethod":"SOURCEIPHASH","upstreamCount":2}`,
}

// TestNetworkLimits: every field the table says the network filter serves
// with some values refused has such a value, and ParseConfig refuses it
// with a problem that names the field.
func TestNetworkLimits(t *testing.T) {
	for _, f := range Fields() {
		r, _ := HostRuleOf(HostNetwork, f.Path)
		js, ok := networkLimits[f.Path]
		switch {
		case r.Support != Limit && ok:
			t.Errorf("%s: a sample of a limit, but the table says the network filter %s it", f.Path, r.Support)
			continue
		case r.Support != Limit:
			continue
		case !ok:
			t.Errorf("%s: limited for the network filter (%s), and networkLimits has no value it refuses", f.Path, r.Why)
			continue
		}
		m := map[string]any{}
		if err := json.Unmarshal([]byte(js), &m); err != nil {
			t.Fatal(err)
		}
		m["filterType"] = FilterNetwork
		m["services"] = []any{map[string]any{"name": "a", "address": "10.0.0.1:80"}}
		b, _ := json.Marshal(m)
		_, err := ParseConfig(b)
		if err == nil || !slices.ContainsFunc(strings.Split(err.Error(), "\n"), func(l string) bool { return strings.HasPrefix(l, f.Path) }) {
			t.Errorf("ParseConfig(%s) = %v, want a problem naming %s", b, err, f.Path)
		}
	}
}
