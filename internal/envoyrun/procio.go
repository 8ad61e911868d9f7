package envoyrun

import (
	"bytes"
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
