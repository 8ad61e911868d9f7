package istio

import (
	"testing"

	"github.com/hashlb/hashlb/internal/corpus"
)

// TestShippedGateway applies configs/istio/gateway/'s files as shipped, with
// the service's own (serviceentry.yaml, destinationrule.yaml), to a real
// istiod and connects the release's Envoy as Istio's ingress gateway
// (router~…, labelled istio: ingressgateway) in istio-system: each file's
// effect is in what Envoy runs (the Gateway's listener on port 80 with the
// VirtualService's route and retries, the cluster's override_host policy from
// the gateway's EnvoyFilter, hashlb's ECDS filter before the router on that
// listener), every corpus request sent to the gateway reaches the backend
// lbcore chooses for the client's own address, with lbcore's ranking as the
// only x-envoy-original-dst-host the backend receives, and each gateway file
// changed as a user might get it wrong fails the checks naming that file.
func TestShippedGateway(t *testing.T) {
	eachRelease(t, func(t *testing.T, r releaseSetup) {
		cl := startCluster(t, r)
		bs := startServiceBackends(t)
		files := applyShipped(t, cl, gatewayFiles)
		pluginConfig := pluginConfigJSON(t, files["gateway/wasmplugin.yaml"])
		gw := startGateway(t, r)
		checks := gatewayShape.checks(env.Module, "gateway/wasmplugin.yaml", pluginConfig)
		waitApplied(t, gw, checks)

		t.Run("corpus", func(t *testing.T) {
			checkCorpus(t, gatewayShape, pluginConfig, corpus.Requests(corpusRequests), len(bs))
		})

		t.Run("changed manifests name their file", func(t *testing.T) {
			testChangedFiles(t, cl, gw, files, checks, []fileChange{
				{"gateway/envoyfilter.yaml", "context: GATEWAY", "context: SIDECAR_OUTBOUND", "the sidecar's patch context"},
				{"gateway/wasmplugin.yaml", "istio: ingressgateway", "istio: ingress-gateway", "a selector that selects no gateway"},
				{"gateway/gateway.yaml", "- istio-system/hashlb-gateway", "- hashlb-gateway", "the VirtualService naming the Gateway without its namespace"},
			})
		})
	})
}
