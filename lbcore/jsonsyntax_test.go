package lbcore

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestJSONSyntaxError(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"trailing comma in an object", "{\n  \"lbMethod\": \"URLHASH\",\n}", "line 3, column 1: unexpected '}' after ',' (a trailing comma?)"},
		{"trailing comma in an array", `{"services": [{"name": "a"},]}`, "line 1, column 29: unexpected ']' after ',' (a trailing comma?)"},
		{"unterminated", `{"services": [`, "line 1, column 15: unexpected end of input, want a value"},
		{"unquoted key", `{lbMethod: "URLHASH"}`, "line 1, column 2: unexpected 'l', want a quoted field name"},
		{"single quotes", `{"lbMethod": 'URLHASH'}`, `line 1, column 14: unexpected '\'', want a value`},
		{"missing colon", `{"lbMethod" "URLHASH"}`, "line 1, column 13: unexpected '\"', want ':' after the field name"},
		{"missing comma", "{\"a\": 1\n \"b\": 2}", "line 2, column 2: unexpected '\"', want ',' or '}' in an object"},
		{"leading zero", `{"hashLength": 080}`, "line 1, column 16: a number with a leading zero"},
		{"string never ends", `{"lbMethod": "URL`, "line 1, column 14: a string that never ends"},
		{"control character", "{\"a\": \"x\ty\"}", "line 1, column 9: a control character (byte 0x09) in a string; write it escaped"},
		{"bad escape", `{"a": "\q"}`, `line 1, column 9: unknown escape \q in a string`},
		{"columns count characters", `{"name": "é", x}`, "line 1, column 15: unexpected 'x', want a quoted field name"},
		{"text after the value", `{} {}`, "line 1, column 4: '{' after the end of the JSON value"},
		{"bad literal", `{"debugHeader": tru}`, "line 1, column 20: unexpected '}', want true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if gjson.Valid(tt.in) {
				t.Fatalf("gjson.Valid(%q) = true, want a syntax error", tt.in)
			}
			if got := jsonSyntaxError([]byte(tt.in)); got != tt.want {
				t.Errorf("jsonSyntaxError(%q) = %q, want %q", tt.in, got, tt.want)
			}
			_, err := ParseConfig([]byte(tt.in))
			if want := "configuration: not valid JSON: " + tt.want; err == nil || err.Error() != want {
				t.Errorf("ParseConfig(%q) = %v, want %q", tt.in, err, want)
			}
		})
	}
	if _, err := ParseConfig([]byte(" \n")); err == nil || err.Error() != "configuration: empty, want a JSON object" {
		t.Errorf("ParseConfig(blank) = %v, want configuration: empty", err)
	}
}

// FuzzJSONSyntaxError: the checker agrees with gjson on what is valid, and
// never panics.
func FuzzJSONSyntaxError(f *testing.F) {
	for _, s := range []string{`{}`, `{"a": [1, 2.5e-3, true, null, "x\u0041"]}`, `{"a": 1,}`, `[`, `"`, `-`, `{"a":01}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !JSONDepthOK(b, maxConfigDepth) {
			return
		}
		got := jsonSyntaxError(b)
		if valid := gjson.ValidBytes(b); valid == (got != "") && !strings.Contains(got, "nested deeper") {
			t.Errorf("jsonSyntaxError(%q) = %q, but gjson.ValidBytes = %v", b, got, valid)
		}
	})
}
