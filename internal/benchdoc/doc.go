// Package benchdoc writes the results section of docs/performance.md: the
// text between the lines Begin and End… that ./build.sh bench replaces with
// what the run measured (tools/benchdoc). Section composes it from the
// bench's outputs, Splice puts it into the document, and Verify says whether
// the text between the markers is still, byte for byte, what Section wrote:
// the end marker carries the SHA-256 of that text, so a hand edit between the
// markers fails e2e's TestPerformanceResultsAreGenerated.
//
// section.go holds all of it: the markers, the header line, the machine line,
// the rendering of Go benchmark lines, the digest.
package benchdoc
