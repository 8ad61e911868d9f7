package envoy

import (
	"os"
	"testing"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/fleettest"
)

func TestMain(m *testing.M) {
	fleettest.RunMemberIfAsked() // a ProcCluster's member: serves etcd, never returns
	code := m.Run()
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
