// Package istio runs hashlb through Istio's own control plane: istiod
// (pilot-discovery, built from the istio.io/istio module of each release
// and cached), a real kube-apiserver with Istio's CRDs, the manifests of
// configs/istio/ as shipped, and an upstream Envoy of the release's version
// connected to istiod's xDS as a client workload's sidecar, running hashlb's
// Wasm filter or its load-balancing policy's dynamic module
// (configs/istio/lbpolicy/), or as Istio's ingress gateway with
// configs/istio/gateway/. Everything runs in a network namespace of the
// test's own, on its loopback (docs/deploy.md, "Through istiod", says what
// differs from a full Istio install and why hashlb depends on none of it).
// The same namespace runs ./build.sh istio's demo (cmd/istiodemo) on the
// README's ports and checks its answers against the README.
//
// The environment itself, shared with the demo, is internal/istioenv: the
// releases and istiod's build, the cluster and istiod, the proxies'
// bootstrap. It is a Go module of its own, as cmd/hashlb-controller is, so
// that the root module gains no Kubernetes or Istio dependency; istiod
// itself is pinned by the wrapper modules under internal/ (one per Istio
// release, since one go.mod requires one version of istio.io/istio).
package istio
