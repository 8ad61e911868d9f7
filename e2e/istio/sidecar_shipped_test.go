package istio

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/internal/envoyrun"
)

// corpusRequests is how many corpus requests go through the sidecar.
const corpusRequests = 240

// TestShippedSidecar applies configs/istio/'s sidecar files as shipped to
// a real istiod and connects the release's Envoy as the sidecar of a
// frontend pod (the workloads the WasmPlugin and the EnvoyFilter select):
// each file's effect is in what Envoy runs (the cluster's endpoints, outlier
// detection and override_host policy, the route's retries, hashlb's ECDS
// filter before the router with the pluginConfig as its configuration), and
// every corpus request reaches the backend lbcore chooses under the shipped
// configuration, with lbcore's ranking as the only x-envoy-original-dst-host
// the backend receives (a client's forged copies never reach it). Then each
// of the files changed as a user might get it wrong fails the checks
// with a message naming that file, and the shipped files restore them; and
// the TrafficExtension twin, applied in the WasmPlugin's place, gives the
// same filter and the same choices; last, a session block whose key comes
// from a Secret through vmConfig.env.
func TestShippedSidecar(t *testing.T) {
	eachRelease(t, func(t *testing.T, r releaseSetup) {
		cl := startCluster(t, r)
		bs := startServiceBackends(t)
		files := applyShipped(t, cl, sidecarFiles)
		pluginConfig := pluginConfigJSON(t, files["wasmplugin.yaml"])
		sc := startSidecar(t, r, "frontend-0", map[string]string{"app": "frontend"})
		checks := sidecarChecks(env.Module, "wasmplugin.yaml", pluginConfig)
		waitApplied(t, sc, checks)

		t.Run("corpus", func(t *testing.T) {
			checkCorpus(t, sidecarShape, pluginConfig, corpus.Requests(corpusRequests), len(bs))
		})

		t.Run("changed manifests name their file", func(t *testing.T) {
			testChangedFiles(t, cl, sc, files, checks, []fileChange{
				{"envoyfilter.yaml", "service: " + backendsHost, "service: hashlb-backend.demo.internal", "the cluster match renamed"},
				{"wasmplugin.yaml", "app: frontend", "app: front-end", "a selector that selects no workload"},
				{"destinationrule.yaml", "host: " + backendsHost, "host: hashlb-backend.demo.internal", "its host misspelled"},
				{"virtualservice.yaml", "  - " + backendsHost + "\n", "  - hashlb-backend.demo.internal\n", "its hosts misspelled"},
				{"serviceentry.yaml", "address: 10.10.0.13", "address: 10.10.0.31", "an endpoint's address mistyped"},
			})
		})

		t.Run("a pluginConfig hashlb refuses", func(t *testing.T) {
			testRefusedConfig(t, cl, sc, files["wasmplugin.yaml"], pluginConfig)
		})

		t.Run("hashlb-controller in the loop", func(t *testing.T) {
			testControllerLoop(t, cl, sc, files["wasmplugin.yaml"])
		})

		t.Run("TrafficExtension", func(t *testing.T) {
			// Its twin instead of the WasmPlugin, as docs/deploy.md says to
			// move: apply one, delete the other.
			te := shipped(t, "trafficextension/trafficextension.yaml")
			if err := cl.Apply("trafficextension/trafficextension.yaml", te); err != nil {
				t.Fatal(err)
			}
			if err := cl.Delete("wasmplugin.yaml", files["wasmplugin.yaml"]); err != nil {
				t.Fatal(err)
			}
			teConfig := pluginConfigJSON(t, te)
			teChecks := sidecarChecks(env.Module, "trafficextension/trafficextension.yaml", teConfig)
			waitApplied(t, sc, teChecks)
			// The VM may keep the WasmPlugin's persistence table: only
			// requests without a persistence key, which its state cannot
			// change.
			var reqs []corpus.Request
			for _, r := range corpus.Requests(corpusRequests) {
				if len(corpus.HeaderValues(r.Headers, "x-client-id")) == 0 {
					reqs = append(reqs, r)
				}
			}
			checkCorpus(t, sidecarShape, teConfig, reqs, len(bs))
		})

		t.Run("session key from a Secret", func(t *testing.T) {
			// Its own sidecar, started with the key in its environment:
			// the first one's listener port is taken while it runs.
			sc.Stop()
			testSessionKey(t, cl, r)
		})
	})
}

// startServiceBackends starts the backends of the shipped ServiceEntry's
// endpoints, backend-1 to backend-3 on serviceAddrs, port 8080.
func startServiceBackends(t *testing.T) []*envoyrun.Backend {
	t.Helper()
	var bs []*envoyrun.Backend
	for i, addr := range serviceAddrs {
		bs = append(bs, envoyrun.StartBackendAt(t, fmt.Sprintf("backend-%d", i+1), addr+":8080"))
	}
	return bs
}

// fileChange is a shipped file changed as a user might get it wrong: the
// first old in file replaced by new.
type fileChange struct{ file, old, new, what string }

// testChangedFiles applies each change in turn to the shipped files (as
// applied, by name) and wants the checks on the proxy to fail with a
// message naming the changed file; the shipped file applied again makes
// them pass.
func testChangedFiles(t *testing.T, cl *cluster, p configDumper, files map[string][]byte, checks []check, changes []fileChange) {
	t.Helper()
	for _, ch := range changes {
		changed := bytes.Replace(files[ch.file], []byte(ch.old), []byte(ch.new), 1)
		if bytes.Equal(changed, files[ch.file]) {
			t.Fatalf("%s has no %q to change", ch.file, ch.old)
		}
		if err := cl.Apply(ch.file, changed); err != nil {
			t.Fatal(err)
		}
		err := waitFor(p, checks, 3*time.Minute, func(err error) bool { return err != nil })
		if err == nil || !strings.Contains(err.Error(), "configs/istio/"+ch.file+" not applied") {
			t.Errorf("%s with %s: the checks say %v, want a failure naming the file", ch.file, ch.what, err)
		} else {
			t.Logf("%s with %s fails the checks:\n%v", ch.file, ch.what, err)
		}
		if err := cl.Apply(ch.file, files[ch.file]); err != nil {
			t.Fatal(err)
		}
		if err := waitFor(p, checks, 3*time.Minute, func(err error) bool { return err == nil }); err != nil {
			t.Fatalf("the shipped %s applied again, after 3 min: %v", ch.file, err)
		}
	}
}

// checkCorpus sends reqs one at a time, in order, to a proxy of shape s and
// checks each answer against lbcore under pluginConfig.
func checkCorpus(t *testing.T, s proxyShape, pluginConfig []byte, reqs []corpus.Request, backends int) {
	t.Helper()
	o, err := newOracleOf(s, pluginConfig)
	if err != nil {
		t.Fatalf("the shipped pluginConfig: %v", err)
	}
	served := map[string]int{}
	bad, forged := 0, 0
	for i, cr := range reqs {
		c := fromCorpus(cr)
		a, err := o.send(cr)
		if err != nil {
			if bad++; bad <= 5 {
				t.Errorf("corpus request %d (%s from %s): %v", i, corpus.Brief(c.headers), c.srcIP, err)
			}
			continue
		}
		served[a.backend]++
		if len(corpus.HeaderValues(c.headers, o.c.UpstreamHeader)) > 0 {
			forged++
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d corpus requests did not reach lbcore's choice", bad, len(reqs))
	}
	t.Logf("%d corpus requests on lbcore's choice (%v), %d of them with forged %s", len(reqs), served, forged, o.c.UpstreamHeader)
	if forged == 0 || len(served) != backends {
		t.Errorf("the corpus proves too little: %d forged headers, backends served %v", forged, served)
	}
}
