package istio

import (
	"testing"

	"github.com/hashlb/hashlb/e2e/istio/internal/istioenv"
)

// cluster is a kube-apiserver with Istio's CRDs and an istiod watching it
// (istioenv.Cluster), with namespaces istio-system and demo.
type cluster struct {
	*istioenv.Cluster
}

// startCluster starts the cluster of release r; it stops when the test
// ends (with istiod's log when the test failed).
func startCluster(t *testing.T, r releaseSetup) *cluster {
	t.Helper()
	c, err := istioenv.StartCluster(istioenv.Options{
		Release: r, KubeAPIServer: env.KubeAPIServer, Etcd: env.Etcd, Dir: t.TempDir(),
		Namespaces: []string{"istio-system", "demo"}, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("istiod %s log (tail):\n%s", r.Name, c.Istiod.Tail(60))
		}
		if err := c.Stop(); err != nil {
			t.Logf("stopping the control plane: %v", err)
		}
	})
	return &cluster{c}
}
