package e2e

import (
	"testing"

	"github.com/hashlb/hashlb/internal/benchdoc"
)

// TestPerformanceResultsAreGenerated: docs/performance.md's results are the
// output of ./build.sh bench, which writes them between the section's
// markers with its header line and ends them with the text's SHA-256
// (internal/benchdoc). A section edited by hand, or markers lost, fail
// here; the fix is to run ./build.sh bench, or to change what it writes.
func TestPerformanceResultsAreGenerated(t *testing.T) {
	if err := benchdoc.Verify(string(readRepoFile(t, "docs/performance.md"))); err != nil {
		t.Errorf("docs/performance.md: %v", err)
	}
}
