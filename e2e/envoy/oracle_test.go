package envoy

import (
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/deploycheck"
	"github.com/hashlb/hashlb/lbcore"
)

// pluginConfigs returns the hashlb configurations of a bootstrap, parsed as
// the module parses them, in file order.
func pluginConfigs(t testing.TB, bootstrap []byte) []*lbcore.Config {
	t.Helper()
	f, err := deploycheck.Scan(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	var out []*lbcore.Config
	for _, it := range f.Configs() {
		c, problems := it.Parse()
		if problems != nil {
			t.Fatalf("%s: %v", it.Where, problems)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		t.Fatal("no hashlb configuration in the bootstrap")
	}
	return out
}

// oracle is lbcore's decision for a request, as the filter would make it
// without persistence state: the service names in rank order (as many as
// upstreamCount).
func oracle(c *lbcore.Config, r lbcore.Request) []string {
	d := lbcore.NewBalancer(c, 0).Decide(&r, time.Unix(1767225600, 0))
	var names []string
	for i := range d.Len() {
		names = append(names, c.Services[d.At(i)].Name)
	}
	return names
}
