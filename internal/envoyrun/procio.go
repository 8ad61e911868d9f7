package envoyrun

import (
	"bytes"
	"strings"
	"sync"
)

// SyncBuffer collects a process's output while it runs, for a test that
// reads it meanwhile or prints it on failure: Write and String may be called
// from different goroutines.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ShellWords splits a command line as the docs write one at spaces outside
// single quotes, the quotes removed; two quotes with nothing between make
// an empty word.
func ShellWords(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, word := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, word = !quoted, true
		case r == ' ' && !quoted:
			if word {
				out = append(out, cur.String())
				cur.Reset()
				word = false
			}
		default:
			cur.WriteRune(r)
			word = true
		}
	}
	if word {
		out = append(out, cur.String())
	}
	return out
}
