// Command istiodemo is ./build.sh istio: the README's demo in a real Istio
// on one machine. It starts the controller tests' kube-apiserver and etcd,
// istiod of Istio 1.31 (built from istio.io/istio on the first run and
// cached: internal/istioenv), the demo backends (hashlb-proxy
// -backends-only) and an Envoy 1.39.3 connected to istiod as Istio's ingress
// gateway; it applies configs/istio/gateway/'s files with the service's
// (serviceentry.yaml, destinationrule.yaml), changed only where the demo
// differs from a cluster (manifests.go): the Gateway's port 10000 bound on
// 127.0.0.1, the ServiceEntry's endpoints the demo backends on
// 127.0.0.1:18081-18083, the WasmPlugin's url file:// of dist/hashlb.wasm
// and its pluginConfig the one ./build.sh envoy runs (envoy.yaml's, with
// debugHeader). When the gateway answers through hashlb it prints the line
// to try, as ./build.sh run does; the README's three curl lines then answer
// as they do there. Ctrl-C stops everything.
//
//	go run ./cmd/istiodemo -wasm dist/hashlb.wasm -proxy dist/hashlb-proxy   # in e2e/istio; ./build.sh istio does it
//
// The command is main.go (the start, the wait, the stop) and manifests.go.
package main
