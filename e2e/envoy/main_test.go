package envoy

import (
	"fmt"
	"os"
	"testing"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/fleettest"
)

func TestMain(m *testing.M) {
	fleettest.RunMemberIfAsked() // a ProcCluster's member: serves etcd, never returns
	code := m.Run()
	if r := envoyrun.StartupReport(); r != "" {
		fmt.Println("summary: " + r) // where the package's time goes: most of it is V8 compiling the module
	}
	envoyrun.RemoveModule()
	envoyrun.RemoveModules()
	envoyrun.RemoveLBPolicies()
	os.Exit(code)
}

// eachEnvoy runs f as a subtest per Envoy version ("1.36.4", "1.40.0").
func eachEnvoy(t *testing.T, f func(t *testing.T, bin envoyrun.Binary)) {
	for _, bin := range envoyrun.Binaries(t) {
		t.Run(bin.Name(), func(t *testing.T) { f(t, bin) })
	}
}

// newestEnvoy runs f as a subtest in the newest Envoy only (1.40 where
// installed): for a test whose subject is hashlb's own code over time, such
// as the fleet under etcd's faults, while a test in every Envoy covers what
// the host does on that path (RATIONALE.md, "Which Envoys a test runs in").
func newestEnvoy(t *testing.T, f func(t *testing.T, bin envoyrun.Binary)) {
	bins := envoyrun.Binaries(t)
	bin := bins[len(bins)-1]
	t.Run(bin.Name(), func(t *testing.T) { f(t, bin) })
}

// builtModule is the path of the module pkg (a package path from the
// repository's root) built as build.sh builds hashlb (envoyrun.BuildModule);
// a failed build fails the test.
func builtModule(t testing.TB, pkg string) string {
	t.Helper()
	p, err := envoyrun.BuildModule(pkg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
