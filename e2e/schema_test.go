package e2e

// configs/schema.json kept in step with lbcore.Fields() (lbcore generates it
// from its field table: go test ./lbcore -run Golden -update): every field
// lbcore knows is in the schema with the same type, default, range, enum and
// required flag, the schema has no field lbcore lacks, and each format's
// pattern accepts what lbcore accepts. A small validator for the keywords the
// schema uses then checks the example configs against it.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/lbcore"
)

type schemaNode = map[string]any

func loadSchema(t testing.TB) schemaNode {
	t.Helper()
	var s schemaNode
	if err := json.Unmarshal(readRepoFile(t, "configs/schema.json"), &s); err != nil {
		t.Fatalf("configs/schema.json: %v", err)
	}
	return s
}

// schemaPaths lists every property path of the schema in Fields() notation.
func schemaPaths(n schemaNode, prefix string) []string {
	var out []string
	props, _ := n["properties"].(schemaNode)
	for name, v := range props {
		child := v.(schemaNode)
		p := name
		if prefix != "" {
			p = prefix + "." + name
		}
		out = append(out, p)
		if items, ok := child["items"].(schemaNode); ok {
			out = append(out, schemaPaths(items, p+"[]")...)
		}
		out = append(out, schemaPaths(child, p)...)
	}
	return out
}

// formatSamples: what lbcore accepts and refuses for each string format; the
// schema's pattern must agree.
var formatSamples = map[string]struct{ good, bad []string }{
	"duration": {[]string{"90s", "10m", "36h", "7d", "500ms"}, []string{"7 days", "1.5h", "10"}},
	"netmask":  {[]string{"255.255.255.255", "255.255.255.0", "255.255.240.0", "128.0.0.0"}, []string{"255.0.255.0", "0.0.0.0", "255.255.255"}},
	"address":  {[]string{"10.0.0.1:80", "127.0.0.1:18081", "[fd00::1]:8080"}, []string{"10.0.0.1", "host:80", "[fd00::1]"}},
	"header":   {[]string{"x-envoy-original-dst-host", "X-Hashlb"}, []string{"x bad", "x:y"}},
	"statuses": {[]string{"200-399", "200-399,404", "502-504"}, []string{"ok", "2xx"}},
	"name":     {[]string{"a", "b3", "svc-1.east_2~"}, []string{"", "a b", "a/b", "é"}},
	"path":     {[]string{"/healthz", "/", "/a?b=1"}, []string{"healthz", "", "/a b"}},
}

func TestSchemaMatchesFields(t *testing.T) {
	if !bytes.Equal(readRepoFile(t, "configs/schema.json"), lbcore.Schema()) {
		t.Error("configs/schema.json is not lbcore.Schema(), the schema of lbcore's field table (go test ./lbcore -run Golden -update)")
	}
	root := loadSchema(t)
	known := map[string]bool{}
	for _, f := range lbcore.Fields() {
		known[f.Path] = true
		node, parent, name := lbcore.SchemaAt(root, f.Path)
		if node == nil {
			t.Errorf("%s: missing from configs/schema.json", f.Path)
			continue
		}
		if node["type"] != f.Type {
			t.Errorf("%s: schema type %v, lbcore %s", f.Path, node["type"], f.Type)
		}
		if d, ok := node["description"].(string); !ok || len(d) < 10 {
			t.Errorf("%s: no useful description", f.Path)
		}
		if !sameJSON(node["default"], f.Default) {
			t.Errorf("%s: schema default %v, lbcore %v", f.Path, node["default"], f.Default)
		}
		for _, k := range f.SchemaRange() {
			if !sameJSON(node[k.Key], k.Value) {
				t.Errorf("%s: schema %s %v, lbcore %v", f.Path, k.Key, node[k.Key], k.Value)
			}
		}
		var enum []string
		for _, e := range asSlice(node["enum"]) {
			enum = append(enum, fmt.Sprint(e))
		}
		if !slices.Equal(enum, f.Enum) {
			t.Errorf("%s: schema enum %q, lbcore %q", f.Path, enum, f.Enum)
		}
		required := slices.ContainsFunc(asSlice(parent["required"]), func(v any) bool { return v == name })
		if required != f.Required {
			t.Errorf("%s: schema required %v, lbcore %v", f.Path, required, f.Required)
		}
		if f.Type == "object" || (f.Type == "array" && node["items"].(schemaNode)["type"] == "object") {
			obj := node
			if f.Type == "array" {
				obj = node["items"].(schemaNode)
			}
			if obj["additionalProperties"] != false {
				t.Errorf("%s: additionalProperties must be false (hashlb refuses unknown fields)", f.Path)
			}
		}
		if s, ok := formatSamples[f.Format]; ok {
			pat, _ := node["pattern"].(string)
			re, err := regexp.Compile(pat)
			if pat == "" || err != nil {
				t.Errorf("%s: format %s needs a pattern (%v)", f.Path, f.Format, err)
				continue
			}
			for _, g := range s.good {
				if !re.MatchString(g) {
					t.Errorf("%s: pattern refuses %q, which lbcore accepts", f.Path, g)
				}
			}
			for _, b := range s.bad {
				if re.MatchString(b) {
					t.Errorf("%s: pattern accepts %q, which lbcore refuses", f.Path, b)
				}
			}
		}
	}
	if root["additionalProperties"] != false {
		t.Error("top level: additionalProperties must be false")
	}
	paths := schemaPaths(root, "")
	sort.Strings(paths)
	for _, p := range paths {
		if !known[p] {
			t.Errorf("%s: in configs/schema.json but not in lbcore.Fields()", p)
		}
	}
}

// TestSchemaExamples: every example config satisfies the schema, and broken
// ones do not.
func TestSchemaExamples(t *testing.T) {
	root := loadSchema(t)
	for _, name := range pluginConfigFiles(t) {
		var v any
		if err := json.Unmarshal(readRepoFile(t, "configs/"+name), &v); err != nil {
			t.Fatal(err)
		}
		if err := validateSchema(root, v, name); err != nil {
			t.Errorf("configs/%s: %v", name, err)
		}
	}
	for _, tt := range []struct{ doc, want string }{
		{`{}`, `required field "services" is missing`},
		{`{"services":[{"name":"a","address":"10.0.0.1:80"}],"lbMethod":"FASTEST"}`, "lbMethod"},
		{`{"services":[{"name":"a","address":"10.0.0.1"}]}`, "services[0].address"},
		{`{"services":[{"name":"a","address":"10.0.0.1:80"}],"hashBalanceFactor":50}`, "hashBalanceFactor"},
		{`{"services":[{"name":"a","address":"10.0.0.1:80","weigth":2}]}`, `services[0]: unknown field "weigth"`},
		{`{"services":[{"name":"a","address":"10.0.0.1:80"}],"persistence":{"keys":[]}}`, "persistence.keys"},
	} {
		var v any
		if err := json.Unmarshal([]byte(tt.doc), &v); err != nil {
			t.Fatal(err)
		}
		wantErr(t, validateSchema(root, v, ""), tt.want)
	}
}

// validateSchema checks v against the JSON Schema keywords configs/schema.json
// uses: type, properties, additionalProperties false, required, items, enum,
// minimum, maximum, minItems, maxItems, minLength, uniqueItems, pattern, not.
func validateSchema(s schemaNode, v any, path string) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
	}
	if t, ok := s["type"].(string); ok && !jsonTypeIs(v, t) {
		bad("%v is not of type %s", v, t)
		return errors.Join(errs...)
	}
	if e := asSlice(s["enum"]); e != nil && !slices.Contains(e, v) {
		bad("%v is not one of %v", v, e)
	}
	if n, ok := v.(float64); ok {
		if m, ok := s["minimum"].(float64); ok && n < m {
			bad("%v is below the minimum %v", n, m)
		}
		if m, ok := s["maximum"].(float64); ok && n > m {
			bad("%v is above the maximum %v", n, m)
		}
	}
	if str, ok := v.(string); ok {
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			bad("%q does not match %s", str, p)
		}
		if m, ok := s["minLength"].(float64); ok && float64(len(str)) < m {
			bad("%q is shorter than %v", str, m)
		}
	}
	if not, ok := s["not"].(schemaNode); ok && validateSchema(not, v, path) == nil {
		bad("%v is in a forbidden range", v)
	}
	if arr, ok := v.([]any); ok {
		if m, ok := s["minItems"].(float64); ok && float64(len(arr)) < m {
			bad("%d items, at least %v needed", len(arr), m)
		}
		if m, ok := s["maxItems"].(float64); ok && float64(len(arr)) > m {
			bad("%d items, at most %v allowed", len(arr), m)
		}
		for i, item := range arr {
			if s["uniqueItems"] == true && slices.IndexFunc(arr[:i], func(x any) bool { return reflect.DeepEqual(x, item) }) >= 0 {
				bad("item %d is a duplicate", i)
			}
			if is, ok := s["items"].(schemaNode); ok {
				if err := validateSchema(is, item, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if obj, ok := v.(map[string]any); ok {
		props, _ := s["properties"].(schemaNode)
		for _, r := range asSlice(s["required"]) {
			if _, ok := obj[r.(string)]; !ok {
				bad("required field %q is missing", r)
			}
		}
		for _, k := range slices.Sorted(mapsKeysAny(obj)) {
			ps, ok := props[k].(schemaNode)
			if !ok {
				if s["additionalProperties"] == false {
					bad("unknown field %q", k)
				}
				continue
			}
			if err := validateSchema(ps, obj[k], strings.TrimPrefix(path+"."+k, ".")); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func jsonTypeIs(v any, t string) bool {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "integer":
		n, ok := v.(float64)
		return ok && n == math.Trunc(n)
	case "number":
		_, ok := v.(float64)
		return ok
	}
	return false
}

// sameJSON compares a value decoded from JSON with a Go int, string, bool or nil.
func sameJSON(j, want any) bool {
	w, err := json.Marshal(want)
	var norm any
	if err != nil || json.Unmarshal(w, &norm) != nil {
		return false
	}
	return reflect.DeepEqual(j, norm)
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func mapsKeysAny(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
