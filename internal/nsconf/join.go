package nsconf

import "strings"

// nsVerbs are the first words of NetScaler CLI commands as ns.conf holds
// them; a file with no line starting with one is not an ns.conf.
var nsVerbs = map[string]bool{"add": true, "set": true, "unset": true, "bind": true, "unbind": true, "enable": true,
	"disable": true, "rm": true, "link": true, "unlink": true, "save": true, "apply": true, "clear": true,
	"create": true, "import": true, "update": true}

// isCommand reports whether words start like a NetScaler command.
func isCommand(words []word) bool {
	return len(words) >= 2 && !words[0].quoted && nsVerbs[strings.ToLower(words[0].text)]
}

// maxWrapped bounds how many lines one wrapped command may take.
const maxWrapped = 8

// joinWrapped reports whether lines[i] is a command whose quoted argument
// goes on over the next lines (a copy that wrapped long lines, breaking at a
// space): it returns the last line and the lines joined with spaces, once the
// quotes balance within maxWrapped lines and no line in between starts a
// command of its own.
func joinWrapped(lines []string, i int) (end int, joined string, ok bool) {
	words, err := splitLine(lines[i])
	if err == nil || !isCommand(words) {
		return 0, "", false
	}
	joined = strings.TrimRight(lines[i], "\r")
	for k := i + 1; k < len(lines) && k <= i+maxWrapped; k++ {
		next := strings.TrimSpace(strings.TrimRight(lines[k], "\r"))
		if next == "" {
			continue
		}
		if ws, _ := splitLine(next); isCommand(ws) {
			return 0, "", false
		}
		joined += " " + next
		if _, err := splitLine(joined); err == nil {
			return k, joined, true
		}
	}
	return 0, "", false
}
