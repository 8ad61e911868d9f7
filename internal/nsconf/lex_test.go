package nsconf

import (
	"slices"
	"testing"
)

func TestSplitLine(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    []string
		wantErr string
	}{
		{name: "plain", line: "add server web1 10.0.0.1", want: []string{"add", "server", "web1", "10.0.0.1"}},
		{name: "tabs and runs of spaces", line: "add\tserver  web1 \t10.0.0.1  ", want: []string{"add", "server", "web1", "10.0.0.1"}},
		{name: "quoted name with a space", line: `add lb vserver "my vs" HTTP`, want: []string{"add", "lb", "vserver", "my vs", "HTTP"}},
		{name: "escaped quotes in a rule", line: `set lb vserver v -rule "HTTP.REQ.HEADER(\"X-Id\")"`,
			want: []string{"set", "lb", "vserver", "v", "-rule", `HTTP.REQ.HEADER("X-Id")`}},
		{name: "escaped backslash", line: `-rule "a\\b"`, want: []string{"-rule", `a\b`}},
		{name: "other backslashes kept", line: `-rule "re/\d+/"`, want: []string{"-rule", `re/\d+/`}},
		{name: "quote inside a word", line: `a"b c"d e`, want: []string{"ab cd", "e"}},
		{name: "empty quoted word", line: `-comment ""`, want: []string{"-comment", ""}},
		{name: "unbalanced", line: `add lb vserver "vs HTTP`, want: []string{"add", "lb", "vserver"}, wantErr: "col 16: unbalanced quote (no closing \")"},
		{name: "single-quoted name", line: `bind lb vserver 'my vs' 'web svc'`, want: []string{"bind", "lb", "vserver", "my vs", "web svc"}},
		{name: "single quote inside a double-quoted rule", line: `-rule "A.TYPECAST_NVLIST_T('=',';')"`, want: []string{"-rule", "A.TYPECAST_NVLIST_T('=',';')"}},
		{name: "single quote inside a word is kept", line: `-comment it's`, want: []string{"-comment", "it's"}},
		{name: "unbalanced single quote", line: `add lb vserver 'vs HTTP`, want: []string{"add", "lb", "vserver"}, wantErr: "col 16: unbalanced quote (no closing ')"},
		{name: "escaped closing quote is no close", line: `-rule "abc\"`, want: []string{"-rule"}, wantErr: "col 7: unbalanced quote (no closing \")"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			words, err := splitLine(tt.line)
			var got []string
			for _, w := range words {
				got = append(got, w.text)
			}
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if !slices.Equal(got, tt.want) || gotErr != tt.wantErr {
				t.Errorf("splitLine(%q) = %q, %q; want %q, %q", tt.line, got, gotErr, tt.want, tt.wantErr)
			}
		})
	}
}

func TestIsFlag(t *testing.T) {
	tests := []struct {
		name string
		line string
		want []bool
	}{
		{name: "flags and values", line: "-weight 2 -x", want: []bool{true, false, true}},
		{name: "negative number is a value", line: "-5 -", want: []bool{false, false}},
		{name: "quoted dash word is a value", line: `-comment "-not a flag"`, want: []bool{true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			words, err := splitLine(tt.line)
			if err != nil {
				t.Fatal(err)
			}
			var got []bool
			for _, w := range words {
				got = append(got, w.isFlag())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("isFlag of %q = %v, want %v", tt.line, got, tt.want)
			}
		})
	}
}
