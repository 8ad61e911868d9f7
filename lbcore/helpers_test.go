package lbcore

import (
	"fmt"
	"github.com/cespare/xxhash/v2"
	"strings"
	"testing"
	"time"
)

// mustConfig parses a config or fails the test.
func mustConfig(t testing.TB, js string) *Config {
	t.Helper()
	c, err := ParseConfig([]byte(js))
	if err != nil {
		t.Fatalf("ParseConfig(%s): %v", js, err)
	}
	return c
}

// pool returns a config JSON for method over n services s0..s(n-1) at
// 10.0.x.y:80, with extra top-level fields.
func pool(method string, n int, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"lbMethod":%q,`, method)
	if extra != "" {
		b.WriteString(extra + ",")
	}
	b.WriteString(`"services":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"s%d","address":"10.0.%d.%d:80"}`, i, i/250, i%250+1)
	}
	b.WriteString("]}")
	return b.String()
}

// first returns the name of the decision's chosen service, or "" for none.
func first(c *Config, d Decision) string {
	if d.Len() == 0 {
		return ""
	}
	return c.Services[d.At(0)].Name
}

// names lists the decision's services by name.
func names(c *Config, d Decision) []string {
	var out []string
	for i := 0; i < d.Len(); i++ {
		out = append(out, c.Services[d.At(i)].Name)
	}
	return out
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func xxhashString(s string) uint64 { return xxhash.Sum64String(s) }
