// Package istio runs hashlb through Istio's own control plane: istiod
// (pilot-discovery, built from the istio.io/istio module of each release
// and cached), a real kube-apiserver with Istio's CRDs, the manifests of
// configs/istio/ as shipped, and an upstream Envoy of the release's version
// connected to istiod's xDS as a sidecar, running hashlb's Wasm filter or
// its load-balancing policy's dynamic module (configs/istio/lbpolicy/). Everything runs in a network
// namespace of the test's own, on its loopback (docs/deploy.md, "Through
// istiod", says what differs from a full Istio install and why hashlb
// depends on none of it).
//
// It is a Go module of its own, as cmd/hashlb-controller is, so that the
// root module gains no Kubernetes or Istio dependency; istiod itself is
// pinned by the wrapper modules under internal/ (one per Istio release,
// since one go.mod requires one version of istio.io/istio).
package istio
