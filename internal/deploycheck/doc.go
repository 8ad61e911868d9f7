// Package deploycheck finds hashlb's plugin configurations in the files an
// operator deploys (a plugin configuration, an Envoy configuration, Istio
// manifests) and holds each one to the configuration around it: the cluster
// that follows its upstream header, the endpoints it may choose, the filter
// kind, the etcd cluster of persistence.fleet. "hashlb check" prints what it
// finds; the e2e tests hold the repository's own files to the same checks.
//
// Its parts, by file: finding the configurations in a file, a plugin
// configuration, an Envoy configuration or Kubernetes manifests (scan.go);
// Check over a run's files, its findings and the checks of an Envoy
// configuration (envoy.go); those of Istio's WasmPlugin and TrafficExtension
// against the resources given with them (istio.go); the load-balancing policy
// on a cluster and the hosts it reads, from load_assignment or an EDS file
// (lbpolicy.go); and the session key a session block needs in the VM's
// environment (session.go).
package deploycheck
