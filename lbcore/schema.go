package lbcore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// schemaPatterns are the JSON Schema patterns of the string formats: what an
// editor can check of what the decoder accepts (e2e's TestSchemaMatchesFields
// tries them on samples).
var schemaPatterns = map[string]string{
	"duration": `^[0-9]+(ms|s|m|h|d)$`,
	"netmask":  `^(255\.255\.255\.(255|254|252|248|240|224|192|128|0)|255\.255\.(254|252|248|240|224|192|128|0)\.0|255\.(254|252|248|240|224|192|128|0)\.0\.0|(254|252|248|240|224|192|128)\.0\.0\.0)$`,
	"address":  `^(([0-9]{1,3}\.){3}[0-9]{1,3}|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$`,
	"header":   "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$",
	"name":     "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$",
	"statuses": `^ *[1-5][0-9]{2}( *- *[1-5][0-9]{2})? *(, *[1-5][0-9]{2}( *- *[1-5][0-9]{2})? *)*$`,
	"path":     `^/[^ \t\r\n]*$`,
}

// schemaObject is a JSON object that keeps its keys in order.
type schemaObject []SchemaKeyword

// SchemaKeyword is one keyword of a schema node and its value; a value that
// is an object keeps its keywords in order.
// Exported as what SchemaAt walks, for the schema's tests outside lbcore.
type SchemaKeyword struct {
	Key   string
	Value any
}

// MarshalJSON writes the object as the schema does.
func (o schemaObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	writeSchema(&b, o, "")
	return b.Bytes(), nil
}

// Schema is configs/schema.json, the JSON Schema of the plugin
// configuration generated from the field table (Fields): lbcore's tests keep
// the file equal to it (go test ./lbcore -run Golden -update rewrites it),
// and e2e's check its patterns and the example configurations against it.
func Schema() []byte { return generateSchema(Fields()) }

// generateSchema writes the schema of fields.
func generateSchema(fields []FieldSpec) []byte {
	root := schemaObject{
		{"$schema", "https://json-schema.org/draft/2020-12/schema"},
		{"$id", "https://github.com/hashlb/hashlb/configs/schema.json"},
		{"title", "hashlb plugin configuration"},
		{"description", "Configuration of the hashlb proxy-wasm load-balancing filter: the JSON given to Envoy's Wasm filter (configuration) or to an Istio WasmPlugin (pluginConfig). Unknown fields are errors; hashlb reports every problem at once and refuses to start with a bad configuration. Generated from lbcore's field table (lbcore/fields.go) by go test ./lbcore -run Golden -update."},
	}
	root = append(root, schemaChildren(fields, "")...)
	var b bytes.Buffer
	writeSchema(&b, root, "")
	b.WriteByte('\n')
	return b.Bytes()
}

// schemaChildren returns type, additionalProperties, required and properties
// of the object whose fields are prefix+name.
func schemaChildren(fields []FieldSpec, prefix string) schemaObject {
	var required []any
	var props schemaObject
	for _, f := range fields {
		name, ok := strings.CutPrefix(f.Path, prefix)
		if !ok || strings.Contains(name, ".") {
			continue
		}
		if f.Required {
			required = append(required, name)
		}
		props = append(props, SchemaKeyword{name, schemaField(fields, f)})
	}
	obj := schemaObject{{"type", "object"}, {"additionalProperties", false}}
	if required != nil {
		obj = append(obj, SchemaKeyword{"required", required})
	}
	return append(obj, SchemaKeyword{"properties", props})
}

func schemaField(fields []FieldSpec, f FieldSpec) schemaObject {
	n := schemaObject{{"description", f.Doc}, {"type", f.Type}}
	add := func(k string, v any) { n = append(n, SchemaKeyword{k, v}) }
	if p, ok := schemaPatterns[f.Format]; ok {
		if f.Off == "" {
			p = strings.TrimSuffix(p, "+$") + "*$"
		}
		add("pattern", p)
	}
	if f.Enum != nil {
		var e []any
		for _, v := range f.Enum {
			e = append(e, v)
		}
		add("enum", e)
	}
	if f.Min != nil {
		for _, k := range f.SchemaRange() {
			if k.Value != nil {
				add(k.Key, k.Value)
			}
		}
	}
	if f.NonEmpty {
		add("minLength", 1)
	}
	if f.Unique {
		add("uniqueItems", true)
	}
	switch {
	case f.Type == "array" && (f.Format == "expression" || f.Format == "endpoint"):
		add("items", schemaObject{{"type", "string"}})
	case f.Type == "array":
		add("items", schemaChildren(fields, f.Path+"[]."))
	case f.Type == "object":
		n = append(n, schemaChildren(fields, f.Path+".")[1:]...) // its type is there already
	}
	if f.Default != nil {
		add("default", f.Default)
	}
	return n
}

// SchemaRange is the schema's keywords for f's range, in the schema's
// order: the bounds ("minimum"/"maximum", "minItems"/"maxItems" for an
// array, "x-minDuration"/"x-maxDuration" for a duration) with Min and Max,
// or, for a field with an integer Off, Off and Max with "not" leaving out
// the integers between Off and Min. A keyword whose value is nil is absent.
func (f *FieldSpec) SchemaRange() []SchemaKeyword {
	lo, hi := "minimum", "maximum"
	switch {
	case f.Type == "array":
		lo, hi = "minItems", "maxItems"
	case f.Format == "duration":
		lo, hi = "x-minDuration", "x-maxDuration"
	}
	if off, ok := f.Off.(int); ok {
		return []SchemaKeyword{{lo, off}, {hi, f.Max}, {"not", schemaObject{{"minimum", off + 1}, {"maximum", f.Min.(int) - 1}}}}
	}
	return []SchemaKeyword{{lo, f.Min}, {hi, f.Max}, {"not", nil}}
}

// SchemaAt finds the node of a field path ("services[].weight") in a
// decoded schema, and the node of the object that holds it; node is nil
// when the schema lacks it.
func SchemaAt(root map[string]any, path string) (node, parent map[string]any, name string) {
	node = root
	for _, part := range strings.Split(path, ".") {
		parent = node
		name = strings.TrimSuffix(part, "[]")
		props, _ := node["properties"].(map[string]any)
		if node, _ = props[name].(map[string]any); node == nil {
			return nil, nil, name
		}
		if strings.HasSuffix(part, "[]") {
			node, _ = node["items"].(map[string]any)
		}
	}
	return node, parent, name
}

// writeSchema writes v as the schema's JSON: two-space indents, arrays of
// scalars and small objects without a description on one line.
func writeSchema(b *bytes.Buffer, v any, indent string) {
	switch v := v.(type) {
	case schemaObject:
		if schemaInline(v) {
			b.WriteByte('{')
			for i, m := range v {
				if i > 0 {
					b.WriteString(", ")
				}
				writeJSONString(b, m.Key)
				b.WriteString(": ")
				writeSchema(b, m.Value, indent)
			}
			b.WriteByte('}')
			return
		}
		b.WriteString("{\n")
		for i, m := range v {
			b.WriteString(indent + "  ")
			writeJSONString(b, m.Key)
			b.WriteString(": ")
			writeSchema(b, m.Value, indent+"  ")
			if i < len(v)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + "}")
	case []any:
		b.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			writeSchema(b, x, indent)
		}
		b.WriteByte(']')
	case string:
		writeJSONString(b, v)
	default:
		fmt.Fprint(b, v)
	}
}

// schemaInline: an object of scalars without a description goes on one line.
func schemaInline(o schemaObject) bool {
	for _, m := range o {
		switch m.Value.(type) {
		case schemaObject, []any:
			return false
		}
		if m.Key == "description" {
			return false
		}
	}
	return true
}

func writeJSONString(b *bytes.Buffer, s string) {
	e := json.NewEncoder(b)
	e.SetEscapeHTML(false)
	e.Encode(s)
	b.Truncate(b.Len() - 1) // Encode's newline
}
