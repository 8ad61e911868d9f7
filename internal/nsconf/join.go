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

// joinWrapped reports whether lines[i] is a command that goes on over the
// next lines (a copy that wrapped long lines, breaking at a space), and
// returns its last line and the lines joined with spaces. The command goes
// on while its quotes are open, and after them over every line that does
// not start a command of its own; a command whose quotes are all closed on
// its first line goes on only over lines that start with a flag. It ends at
// the next command, a comment, a blank line outside quotes, or the end of
// the file, within maxWrapped lines; if its quotes are still open there, it
// is not joined (the unbalanced quote is the error).
func joinWrapped(lines []string, i int) (end int, joined string, ok bool) {
	words, err := splitLine(lines[i])
	if !isCommand(words) {
		return 0, "", false
	}
	quoteWrapped := err != nil // a quote was open at a line break
	open := quoteWrapped
	joined = strings.TrimRight(lines[i], "\r")
	for k := i + 1; k < len(lines) && k <= i+maxWrapped; k++ {
		next := strings.TrimSpace(strings.TrimRight(lines[k], "\r"))
		if next == "" {
			if open {
				continue
			}
			break
		}
		ws, _ := splitLine(next)
		if next[0] == '#' && !open || isCommand(ws) {
			break
		}
		if !quoteWrapped && (len(ws) == 0 || !ws[0].isFlag()) {
			break
		}
		joined += " " + next
		end = k
		_, err := splitLine(joined)
		open = err != nil
	}
	if end == 0 || open {
		return 0, "", false
	}
	return end, joined, true
}
