// Package istioenv runs Istio's control plane on one machine, for
// e2e/istio's tests and ./build.sh istio's demo (cmd/istiodemo) alike:
//
//   - release.go: the Istio releases (the wrapper module pinning each one's
//     istiod, the Envoy its proxy ships) and Prepare, which builds or finds
//     istiod in the user cache (internal/bincache, with progress lines),
//     the release's CRDs and its Envoy; PrepareAgent, the release's
//     pilot-agent from the same wrapper and cache, for the tests that run it;
//   - cluster.go: StartCluster, a kube-apiserver and etcd (the controller's
//     tests' build) with the release's CRDs and an istiod watching it on
//     127.0.0.1, and Apply and Delete of YAML files as kubectl apply and
//     delete do;
//   - proxy.go: Bootstrap, the Envoy bootstrap of a proxy connected to
//     istiod as a sidecar or a gateway (router), in place of pilot-agent's.
package istioenv
