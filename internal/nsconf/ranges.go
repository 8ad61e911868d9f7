package nsconf

import (
	"fmt"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// The bounds and defaults of the hashlb fields a translation writes, read
// from lbcore's field table (lbcore.Fields) so that a clamp here is always
// the range hashlb check enforces.

// field returns lbcore's entry for path; a path missing from the table is a
// programming error that every test run finds at once.
func field(path string) lbcore.FieldSpec {
	for _, f := range lbcore.Fields() {
		if f.Path == path {
			return f
		}
	}
	panic(fmt.Sprintf("nsconf: lbcore has no field %q", path))
}

// intRange returns an integer field's bounds.
func intRange(path string) (lo, hi int) {
	f := field(path)
	return f.Min.(int), f.Max.(int)
}

// durRange returns a duration field's bounds.
func durRange(path string) (lo, hi time.Duration) {
	f := field(path)
	return mustDur(f.Min.(string)), mustDur(f.Max.(string))
}

// intDefault returns an integer field's default.
func intDefault(path string) int { return field(path).Default.(int) }

// durDefault returns a duration field's default.
func durDefault(path string) time.Duration { return mustDur(field(path).Default.(string)) }

func mustDur(s string) time.Duration {
	d, err := lbcore.ParseDuration(s)
	if err != nil {
		panic(fmt.Sprintf("nsconf: lbcore's field table has a bad duration %q: %v", s, err))
	}
	return d
}
