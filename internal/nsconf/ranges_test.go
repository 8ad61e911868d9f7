package nsconf

import (
	"strings"
	"testing"

	"github.com/hashlb/hashlb/lbcore"
)

// TestRangesAreLbcores: every bound the translation clamps to is lbcore's,
// so a value written at the edge of a range passes ParseConfig and one
// past it does not.
func TestRangesAreLbcores(t *testing.T) {
	for _, path := range []string{"healthCheck.interval", "healthCheck.timeout", "persistence.expire"} {
		lo, hi := durRange(path)
		for _, tc := range []struct {
			d  string
			ok bool
		}{{lbcore.FormatDuration(lo), true}, {lbcore.FormatDuration(hi), true}, {lbcore.FormatDuration(hi + lo), false}} {
			if _, err := lbcore.ParseConfig([]byte(configWith(path, `"`+tc.d+`"`))); (err == nil) != tc.ok {
				t.Errorf("%s %s: ParseConfig error %v, want ok %v", path, tc.d, err, tc.ok)
			}
		}
	}
	for _, path := range []string{"healthCheck.unhealthyThreshold", "healthCheck.healthyThreshold", "passiveHealth.consecutiveFailures"} {
		lo, hi := intRange(path)
		for _, tc := range []struct {
			n  int
			ok bool
		}{{lo, true}, {hi, true}, {lo - 1, false}, {hi + 1, false}} {
			if _, err := lbcore.ParseConfig([]byte(configWith(path, jsonText(tc.n)))); (err == nil) != tc.ok {
				t.Errorf("%s %d: ParseConfig error %v, want ok %v", path, tc.n, err, tc.ok)
			}
		}
	}
}

// configWith is a minimal configuration with the field at path (object.key)
// set to value.
func configWith(path, value string) string {
	obj, key, _ := strings.Cut(path, ".")
	extra := ""
	switch obj {
	case "persistence":
		extra = `"keys": ["${client.ip}"], `
	case "healthCheck":
		if key == "timeout" {
			extra = `"interval": "1h", `
		}
	}
	return `{"services": [{"name": "a", "address": "192.0.2.1:80"}], "` + obj + `": {` + extra + `"` + key + `": ` + value + `}}`
}
