package nsconf

import (
	"fmt"
	"strconv"
	"strings"
)

// splitLine splits one ns.conf command into its words, as the NetScaler CLI
// reads it and as "save ns config" writes it: words are separated by spaces
// or tabs; a word may be double-quoted, and inside quotes \" is a quote and
// \\ a backslash (any other backslash is kept as it is, so regular
// expressions in quoted rules survive). Quotes may also start in the middle
// of a word (-rule "a b" and name"with space" are both one word each). A
// word may also start with a single quote, as the CLI allows for names
// ('my vs'): up to the next single quote, with no escapes.
//
// The reference for the quoting: the NetScaler command reference's rule
// arguments, "If the expression itself includes double quotation marks,
// escape the quotations by using the \ character"
// (https://ksptools.ca/Public/build-14.1-60.57_nc_64.tgz:/tmp/tarfile_extract_3nav1ic0/apidoc/docs/addgslbvserver.html,
// the NITRO apidoc of build 14.1-60.57, "rule").
//
// An unbalanced quote is an error naming its 1-based column; the words before
// it are returned with the error.
func splitLine(line string) ([]word, error) {
	var words []word
	i := 0
	for {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		if i >= len(line) {
			return words, nil
		}
		start := i
		var b strings.Builder
		quoted := false
		if line[i] == '\'' {
			// 'my vs': the CLI takes a name in single quotes too ("enclose
			// the name in double or single quotation marks (for example,
			// "my vserver" or 'my vserver')", the NITRO lbvserver resource,
			// name). Names have no ' of their own, so there is no escape.
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return words, fmt.Errorf("col %d: unbalanced quote (no closing ')", i+1)
			}
			b.WriteString(line[i+1 : i+1+end])
			i += end + 2
			quoted = true
		}
		for i < len(line) && line[i] != ' ' && line[i] != '\t' {
			if line[i] != '"' {
				b.WriteByte(line[i])
				i++
				continue
			}
			quoted = true
			open := i
			i++
			for {
				if i >= len(line) {
					return words, fmt.Errorf("col %d: unbalanced quote (no closing \")", open+1)
				}
				c := line[i]
				if c == '"' {
					i++
					break
				}
				if c == '\\' && i+1 < len(line) && (line[i+1] == '"' || line[i+1] == '\\') {
					c = line[i+1]
					i++
				}
				b.WriteByte(c)
				i++
			}
		}
		words = append(words, word{text: b.String(), col: start + 1, quoted: quoted})
	}
}

// word is one word of a command line.
type word struct {
	text   string
	col    int  // 1-based column where the word starts
	quoted bool // written with quotes: never a flag, even if it starts with "-"
}

// shown is the word as the report writes it: quoted again when it has a
// space, a quote or nothing, so names with spaces read as one.
func (w word) shown() string {
	if w.quoted && (w.text == "" || strings.ContainsAny(w.text, " \t\"")) {
		return strconv.Quote(w.text)
	}
	return w.text
}

// isFlag reports whether w is a flag name: "-" and a letter, not quoted.
func (w word) isFlag() bool {
	return !w.quoted && len(w.text) > 1 && w.text[0] == '-' &&
		('a' <= w.text[1]|0x20 && w.text[1]|0x20 <= 'z')
}
