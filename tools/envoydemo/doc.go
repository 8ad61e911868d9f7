// Command envoydemo writes the bootstrap ./build.sh envoy runs: envoy.yaml
// with "debugHeader": true added to its hashlb configuration, so that a real
// Envoy answers the README's quick-start requests as ./build.sh run does
// (envoyrun.DemoBootstrap says why nothing else changes). The e2e/envoy tests
// build the same bootstrap with the same function.
//
//	go run ./tools/envoydemo -o dist/envoy-demo.yaml   # from the repository root
//
// The command is main.go.
package main
