package lbcore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEveryField walks every field of the field table and compares its type,
// default and range with what the decoder does (absent gives the default;
// the bounds are accepted and one past them refused with the usual error;
// a value of another JSON type is refused; enums, Off values, required,
// non-empty and unique items), with configs/schema.json, with docs/config.md's
// configuration reference table and with the Config doc comments.
func TestEveryField(t *testing.T) {
	fields := Fields()
	schema := loadSchemaFile(t)
	docRows := configDocTable(t)
	docs := configDocs(t)
	if got, want := len(docRows), len(fields); got != want {
		t.Errorf("docs/config.md configuration reference has %d rows, the field table %d", got, want)
	}
	for i, f := range fields {
		t.Run(f.Path, func(t *testing.T) {
			checkFieldSpec(t, f)
			checkFieldDecoder(t, f)
			checkFieldSchema(t, f, schema)
			if i < len(docRows) {
				checkFieldConfigDoc(t, f, docRows[i])
			}
			if doc, ok := docs[f.Path]; ok {
				checkFieldDoc(t, f, doc)
			}
		})
	}
	// The golden configuration that sets every field sets exactly these.
	var every map[string]any
	if err := json.Unmarshal(readFile(t, "testdata/config/valid/every-field.json"), &every); err != nil {
		t.Fatal(err)
	}
	var paths []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			p := prefix + k
			paths = append(paths, p)
			switch v := v.(type) {
			case map[string]any:
				walk(p+".", v)
			case []any:
				if len(v) > 0 {
					if o, ok := v[0].(map[string]any); ok {
						walk(p+"[].", o)
					}
				}
			}
		}
	}
	walk("", every)
	slices.Sort(paths)
	var want []string
	for _, f := range fields {
		want = append(want, f.Path)
	}
	slices.Sort(want)
	if !slices.Equal(paths, want) {
		t.Errorf("testdata/config/valid/every-field.json sets %v, the field table has %v", paths, want)
	}
}

// checkFieldSpec: the entry is consistent with itself.
func checkFieldSpec(t *testing.T, f FieldSpec) {
	t.Helper()
	ok := func(v any) bool {
		switch f.Type {
		case "integer":
			_, is := v.(int)
			return is
		case "boolean":
			_, is := v.(bool)
			return is
		case "string":
			_, is := v.(string)
			return is
		}
		return false
	}
	if f.Default != nil && !ok(f.Default) {
		t.Errorf("Default %#v is not of type %s", f.Default, f.Type)
	}
	if f.Enum != nil && f.Default != nil && !slices.Contains(f.Enum, f.Default.(string)) {
		t.Errorf("Default %v is not in Enum %v", f.Default, f.Enum)
	}
	if (f.Min == nil) != (f.Max == nil) {
		t.Errorf("Min %v, Max %v: give both or neither", f.Min, f.Max)
	}
	if f.Doc == "" {
		t.Error("no Doc")
	}
	// A range written in the Doc is the field's.
	if f.Format == "duration" && !strings.Contains(f.Doc, fmt.Sprintf("%v to %v", f.Min, f.Max)) {
		t.Errorf("Doc %q does not give the range %v to %v", f.Doc, f.Min, f.Max)
	}
	for _, m := range regexp.MustCompile(`\b(\d+) to (\d+)\b`).FindAllStringSubmatch(f.Doc, -1) {
		if m[1] != fmt.Sprint(f.Min) || m[2] != fmt.Sprint(f.Max) {
			t.Errorf("Doc says %s to %s, the range is %v to %v", m[1], m[2], f.Min, f.Max)
		}
	}
}

// checkFieldDecoder compares the field's entry with ParseConfig's behaviour.
func checkFieldDecoder(t *testing.T, f FieldSpec) {
	t.Helper()
	at := strings.ReplaceAll(f.Path, "[]", "[0]") // the path errors name
	parse := func(raw string) (*Config, error) {
		return ParseConfig([]byte(configWith(f.Path, raw)))
	}
	accept := func(raw string, want any) {
		t.Helper()
		c, err := parse(raw)
		if err != nil {
			t.Errorf("%s = %s: ParseConfig: %v, want success", f.Path, raw, err)
			return
		}
		if got := configValue(t, c, f.Path); want != nil && got != want {
			t.Errorf("%s = %s: decoded as %#v, want %#v", f.Path, raw, got, want)
		}
	}
	refuse := func(raw, want string) {
		t.Helper()
		if _, err := parse(raw); err == nil || err.Error() != want {
			t.Errorf("%s = %s: ParseConfig error %v, want %q", f.Path, raw, err, want)
		}
	}
	refuseWith := func(raw, want string) {
		t.Helper()
		if _, err := parse(raw); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s = %s: ParseConfig error %v, want one containing %q", f.Path, raw, err, want)
		}
	}

	// Absent.
	c, err := parse("")
	switch {
	case f.Required:
		if err == nil || err.Error() != at+": is required" {
			t.Errorf("%s absent: ParseConfig error %v, want %q", f.Path, err, at+": is required")
		}
	case err != nil:
		t.Errorf("%s absent: ParseConfig: %v", f.Path, err)
	case f.Default != nil:
		if got := configValue(t, c, f.Path); got != f.Default {
			t.Errorf("%s absent: decoded as %#v, the table's default is %#v", f.Path, got, f.Default)
		}
	default:
		if got := configValue(t, c, f.Path); got != nil && !reflect.ValueOf(got).IsZero() {
			t.Errorf("%s absent: decoded as %#v, want none", f.Path, got)
		}
	}

	// A value of another JSON type.
	wrong := map[string]string{"string": "1", "integer": `"1"`, "boolean": "1", "array": "1", "object": "1"}
	what := map[string]string{"string": "a string", "integer": "an integer", "boolean": "a boolean", "array": "an array", "object": "an object"}
	refuseWith(wrong[f.Type], fmt.Sprintf("%s: %s is not %s", at, wrong[f.Type], what[f.Type]))

	// The range: both bounds accepted, one past each refused.
	switch lo, hi := f.Min, f.Max; {
	case lo == nil:
	case f.Type == "integer":
		lo, hi := lo.(int), hi.(int)
		accept(fmt.Sprint(lo), lo)
		accept(fmt.Sprint(hi), hi)
		outside := "%s: %d is out of range [%d, %d]"
		if off, ok := f.Off.(int); ok {
			accept(fmt.Sprint(off), off)
			outside = fmt.Sprintf("%%s: %%d is out of range: %d (off) or [%%d, %%d]", off)
		}
		refuse(fmt.Sprint(lo-1), fmt.Sprintf(outside, at, lo-1, lo, hi))
		refuse(fmt.Sprint(hi+1), fmt.Sprintf(outside, at, hi+1, lo, hi))
	case f.Type == "array":
		lo, hi := lo.(int), hi.(int)
		noun := at[strings.LastIndexByte(at, '.')+1:]
		for _, n := range []int{lo, hi} {
			accept(arrayOf(f.Path, n), n)
		}
		for _, n := range []int{lo - 1, hi + 1} {
			refuse(arrayOf(f.Path, n), fmt.Sprintf("%s: %d %s is out of range [%d, %d]", at, n, noun, lo, hi))
		}
	case f.Format == "duration":
		lo, hi := lo.(string), hi.(string)
		accept(quote(lo), lo)
		accept(quote(hi), hi)
		for _, d := range []time.Duration{mustDuration(lo) - time.Millisecond, mustDuration(hi) + time.Millisecond} {
			s := FormatDuration(d)
			refuse(quote(s), fmt.Sprintf("%s: %q is out of range [%s, %s]", at, s, lo, hi))
		}
	default:
		t.Errorf("a range on a %s field", f.Type)
	}
	if s, ok := f.Off.(string); ok {
		accept(quote(s), s)
	}

	// Enums: each value accepted, others refused.
	if f.Enum != nil {
		for _, e := range f.Enum {
			accept(quote(e), e)
			if f.Format == "method" {
				accept(quote(strings.ToLower(e)), e)
			}
		}
		refuse(`"bogus"`, fmt.Sprintf("%s: %q is not one of %s", at, "bogus", strings.Join(f.Enum, ", ")))
	}
	if f.NonEmpty {
		refuseWith(`""`, at+": must not be empty")
	}
	if f.Unique {
		item := strings.Trim(arrayOf(f.Path, 1), "[]") // a JSON string, as %q writes it
		refuseWith("["+item+","+item+"]", fmt.Sprintf(`%s[1]: %s duplicates %s[0]`, at, item, at))
	}
}

// configWith returns a valid configuration with the field at path set to the
// raw JSON value, or left out when raw is "".
func configWith(path, raw string) string {
	svc := map[string]any{"name": "a", "address": "10.0.0.1:80"}
	root := map[string]any{"services": []any{svc}}
	set := func(m map[string]any, k string) {
		if raw == "" {
			delete(m, k)
		} else {
			m[k] = json.RawMessage(raw)
		}
	}
	parent, name, _ := strings.Cut(path, ".")
	switch {
	case name == "":
		set(root, path)
		if path == "token" && raw != "" {
			root["lbMethod"] = "TOKEN"
		}
		if path == "lbMethod" && strings.EqualFold(raw, `"TOKEN"`) {
			root["token"] = "${client.ip}"
		}
	case parent == "services[]":
		set(svc, name)
	case parent == "persistence" && strings.HasPrefix(name, "fleet."):
		// endpoints, which the policy requires and the filters ignore;
		// cluster, which the filters require, when endpoints is absent.
		fleet := map[string]any{"endpoints": []string{"127.0.0.1:2379"}}
		set(fleet, strings.TrimPrefix(name, "fleet."))
		if _, ok := fleet["endpoints"]; !ok {
			fleet["cluster"] = "etcd"
		}
		root[parent] = map[string]any{"keys": []string{"${client.ip}"}, "fleet": fleet}
	default:
		obj := map[string]any{}
		switch parent {
		case "persistence":
			obj["keys"] = []string{"${client.ip}"}
		case "healthCheck":
			if name == "timeout" { // let the timeout reach its maximum
				obj["interval"] = "1h"
			}
		case "slowStart":
			if name != "window" { // let step reach its maximum
				obj["window"] = "7d"
			}
		case "session":
			if name != "type" {
				obj["type"] = "cookie"
			}
			if name == "idleTimeout" { // let the idle timeout reach its maximum
				obj["absoluteTimeout"] = "365d"
			}
			if name == "sameSite" { // None needs Secure
				obj["secure"] = true
			}
		}
		set(obj, name)
		root[parent] = obj
	}
	b, err := json.Marshal(root)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// arrayOf returns an array of n distinct valid items for the array at path.
func arrayOf(path string, n int) string {
	items := make([]string, n)
	for i := range items {
		switch path {
		case "services":
			items[i] = fmt.Sprintf(`{"name":"s%d","address":"10.%d.%d.%d:80"}`, i, i>>16&255, i>>8&255, i&255)
		case "persistence.keys":
			items[i] = fmt.Sprintf(`"${request.header.x-k%d}"`, i)
		case "persistence.fleet.endpoints":
			items[i] = fmt.Sprintf(`"etcd-%d.internal:2379"`, i)
		default:
			panic("arrayOf " + path)
		}
	}
	return "[" + strings.Join(items, ",") + "]"
}

// configValue reads the field at path from c in the table's form: a method,
// duration, status set or mask as written, an array as its length, an
// object (or absent field) as nil or true.
func configValue(t *testing.T, c *Config, path string) any {
	t.Helper()
	v := reflect.ValueOf(c).Elem()
	for _, part := range strings.Split(path, ".") {
		name, isArray := strings.CutSuffix(part, "[]")
		v = v.FieldByNameFunc(func(n string) bool { return strings.EqualFold(n, name) })
		if !v.IsValid() {
			t.Fatalf("%s: Config has no field for %q", path, name)
		}
		if v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct && v.Type() != reflect.TypeFor[*Expr]() {
			if v.IsNil() {
				return nil
			}
			v = v.Elem()
		}
		if isArray {
			v = v.Index(0)
		}
	}
	switch x := v.Interface().(type) {
	case Method:
		return x.String()
	case time.Duration:
		if x == 0 {
			return nil // a duration without a default, absent
		}
		return FormatDuration(x)
	case StatusSet:
		return x.String()
	case *Expr:
		if x == nil {
			return nil
		}
		return x.String()
	case []Service:
		return len(x)
	case []*Expr:
		return len(x)
	case []string:
		return len(x)
	case int:
		if path == "netmask" {
			m := ^uint32(0) << (32 - x)
			return fmt.Sprintf("%d.%d.%d.%d", m>>24, m>>16&255, m>>8&255, m&255)
		}
		return x
	}
	if v.Kind() == reflect.Struct {
		return true // an object that is present
	}
	return v.Interface()
}

// checkFieldSchema compares the field with its node in configs/schema.json.
func checkFieldSchema(t *testing.T, f FieldSpec, root map[string]any) {
	t.Helper()
	node, parent, name := SchemaAt(root, f.Path)
	if node == nil {
		t.Errorf("missing from configs/schema.json")
		return
	}
	eq := func(what string, got, want any) {
		t.Helper()
		if !jsonEqual(got, want) {
			t.Errorf("configs/schema.json %s: %v, the field table %v", what, got, want)
		}
	}
	eq("type", node["type"], f.Type)
	eq("description", node["description"], f.Doc)
	eq("default", node["default"], f.Default)
	if f.Enum != nil {
		eq("enum", node["enum"], f.Enum)
	} else {
		eq("enum", node["enum"], nil)
	}
	for _, k := range f.SchemaRange() {
		eq(k.Key, node[k.Key], k.Value)
	}
	required, _ := parent["required"].([]any)
	eq("required", slices.Contains(required, any(name)), f.Required)
	eq("minLength", node["minLength"], map[bool]any{true: 1}[f.NonEmpty])
	eq("uniqueItems", node["uniqueItems"], map[bool]any{true: true}[f.Unique])
	if pat, ok := node["pattern"].(string); ok && f.Off == "" {
		if !regexp.MustCompile(pat).MatchString("") {
			t.Errorf("configs/schema.json pattern %s refuses \"\", which turns the field off", pat)
		}
	}
}

// jsonEqual compares a value decoded from JSON with one of the field table
// (or of the schema's generator, whose objects keep their keys in order).
func jsonEqual(got, want any) bool {
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	var norm any
	if json.Unmarshal(w, &norm) == nil {
		w, _ = json.Marshal(norm)
	}
	return bytes.Equal(g, w)
}

func loadSchemaFile(t *testing.T) map[string]any {
	t.Helper()
	var s map[string]any
	if err := json.Unmarshal(readFile(t, "../configs/schema.json"), &s); err != nil {
		t.Fatalf("configs/schema.json: %v", err)
	}
	return s
}

// configDocRow is one row of docs/config.md's configuration reference.
type configDocRow struct{ field, typ, def, values string }

// configDocTable parses docs/config.md's configuration reference table.
func configDocTable(t *testing.T) []configDocRow {
	t.Helper()
	var rows []configDocRow
	for _, cells := range configDocTables(t, "| field | type | default | range / values | meaning |") {
		if len(cells) != 5 {
			t.Fatalf("docs/config.md configuration reference: row %q has %d cells, want 5", cells, len(cells))
		}
		rows = append(rows, configDocRow{strings.Trim(cells[0], "`"), cells[1], cells[2], cells[3]})
	}
	return rows
}

// configDocTables returns the cells of the rows of the docs/config.md table whose header
// line is header.
func configDocTables(t *testing.T, header string) [][]string {
	t.Helper()
	lines := strings.Split(string(readFile(t, "../docs/config.md")), "\n")
	i := slices.Index(lines, header)
	if i < 0 {
		t.Fatalf("docs/config.md: no table %q", header)
	}
	var rows [][]string
	for _, line := range lines[i+2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		rows = append(rows, splitRow(line))
	}
	return rows
}

// splitRow splits a markdown table row at the | outside code spans.
func splitRow(line string) []string {
	var cells []string
	code, start := false, 1
	for i := 1; i < len(line); i++ {
		switch line[i] {
		case '`':
			code = !code
		case '|':
			if !code {
				cells = append(cells, strings.TrimSpace(line[start:i]))
				start = i + 1
			}
		}
	}
	return cells
}

// checkFieldConfigDoc compares the field with its row of docs/config.md's
// configuration reference: field, type, default, range.
func checkFieldConfigDoc(t *testing.T, f FieldSpec, row configDocRow) {
	t.Helper()
	if row.field != f.Path {
		t.Errorf("docs/config.md row %q where the field table has %s (the same order, please)", row.field, f.Path)
		return
	}
	typ := map[string]string{"integer": "int", "boolean": "bool"}[f.Type]
	switch {
	case typ != "":
	case f.Format == "duration" || f.Format == "expression" && f.Type == "string":
		typ = f.Format
	case f.Format == "expression":
		typ = "array of expressions"
	default:
		typ = f.Type
	}
	if row.typ != typ {
		t.Errorf("docs/config.md type %q, want %q", row.typ, typ)
	}
	var def string
	switch d := f.Default.(type) {
	case string:
		def = "`" + d + "`"
	case nil:
		switch {
		case f.Required:
			def = "required"
		case f.Type == "object":
			def = "off"
		default:
			def = "–"
		}
	default:
		def = fmt.Sprint(d)
	}
	if row.def != def {
		t.Errorf("docs/config.md default %q, want %q", row.def, def)
	}
	var values []string // what the range cell must start with, or contain
	switch {
	case f.Enum != nil && slices.Equal(f.Enum, Methods()):
		values = append(values, "a method of the table above") // TestConfigDocMethods checks that table
	case f.Enum != nil:
		values = append(values, "`"+strings.Join(f.Enum, "`, `")+"`")
	case f.Format == "duration":
		values = append(values, fmt.Sprintf("`%v`–`%v`", f.Min, f.Max))
	case f.Off != nil && f.Min != nil:
		values = append(values, fmt.Sprintf("%v (off) or %v–%v", f.Off, f.Min, f.Max))
	case f.Min != nil:
		values = append(values, fmt.Sprintf("%v–%v", f.Min, f.Max))
	}
	if len(values) > 0 && !strings.HasPrefix(row.values, values[0]) {
		t.Errorf("docs/config.md range %q, want it to start with %q", row.values, values[0])
		values = values[1:]
	}
	if f.Off == "" {
		values = append(values, "`\"\"`")
	}
	if f.NonEmpty {
		values = append(values, "non-empty")
	}
	if f.Unique {
		values = append(values, "no duplicates")
	}
	for _, v := range values {
		if !strings.Contains(row.values, v) {
			t.Errorf("docs/config.md range %q does not say %q", row.values, v)
		}
	}
}

// configDocs returns the doc comment of each Config field (and of Service,
// Persistence, HealthCheck, PassiveHealth fields) by field path.
func configDocs(t *testing.T) map[string]string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	prefix := map[string]string{"Config": "", "Service": "services[].", "Persistence": "persistence.",
		"Fleet": "persistence.fleet.", "HealthCheck": "healthCheck.", "PassiveHealth": "passiveHealth.", "Session": "session."}
	paths := map[string]string{} // lower-case path → path
	for _, f := range fieldTable {
		paths[strings.ToLower(f.Path)] = f.Path
	}
	docs := map[string]string{}
	ast.Inspect(file, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		p, known := prefix[ts.Name.Name]
		if !ok || !known {
			return false
		}
		for _, fl := range st.Fields.List {
			for _, name := range fl.Names {
				if path, ok := paths[strings.ToLower(p+name.Name)]; ok && fl.Doc != nil {
					docs[path] = strings.Join(strings.Fields(fl.Doc.Text()), " ")
				}
			}
		}
		return false
	})
	if len(docs) < len(fieldTable)/2 {
		t.Fatalf("found the doc comments of %d fields in config.go", len(docs))
	}
	return docs
}

// checkFieldDoc: a default or range a Config doc comment gives is the field's.
func checkFieldDoc(t *testing.T, f FieldSpec, doc string) {
	t.Helper()
	if m := regexp.MustCompile(`\(default ([^ ,;)]+)`).FindStringSubmatch(doc); m != nil {
		if got := strings.Trim(m[1], `"`); got != fmt.Sprint(f.Default) {
			t.Errorf("config.go doc %q: default %s, the field table %v", doc, got, f.Default)
		}
	}
	if m := regexp.MustCompile(`(\w+)–(\w+)`).FindStringSubmatch(doc); m != nil {
		if m[1] != fmt.Sprint(f.Min) || m[2] != fmt.Sprint(f.Max) {
			t.Errorf("config.go doc %q: range %s–%s, the field table %v–%v", doc, m[1], m[2], f.Min, f.Max)
		}
	}
}

// TestConfigDocMethods: docs/config.md's method table lists every method of the
// table, in its order, and says what decides without the input.
func TestConfigDocMethods(t *testing.T) {
	rows := configDocTables(t, "| method | input hashed | missing input |")
	var names []string
	for _, cells := range rows {
		names = append(names, strings.Trim(cells[0], "`"))
		m, ok := methodNamed(names[len(names)-1])
		if !ok {
			continue
		}
		s := m.spec()
		want := "backup"
		switch {
		case s.keyer == nil:
			want = "–"
		case s.ownBackup:
			want = strings.ReplaceAll(strings.ToLower(s.backup.String()), "roundrobin", "round robin")
		}
		if cells[2] != want {
			t.Errorf("docs/config.md: %s without its input: %q, want %q", s.name, cells[2], want)
		}
	}
	if !slices.Equal(names, Methods()) {
		t.Errorf("docs/config.md method table lists %v, want %v", names, Methods())
	}
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoldenSchema: configs/schema.json is generated from the field table;
// go test ./lbcore -run Golden -update rewrites it.
func TestGoldenSchema(t *testing.T) {
	got := Schema()
	const file = "../configs/schema.json"
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := readFile(t, file)
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("configs/schema.json line %d is\n%s\nthe field table gives\n%s\n(go test ./lbcore -run Golden -update rewrites it)", i+1, wl[i], gl[i])
			}
		}
		t.Fatalf("configs/schema.json has %d lines, the field table gives %d (go test ./lbcore -run Golden -update rewrites it)", len(wl), len(gl))
	}
}
