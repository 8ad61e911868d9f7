// Package deploycheck finds hashlb's plugin configurations in the files an
// operator deploys (a plugin configuration, an Envoy configuration, Istio
// manifests) and holds each one to the configuration around it: the cluster
// that follows its upstream header, the endpoints it may choose, the filter
// kind, the etcd cluster of persistence.fleet. "hashlb check" prints what it
// finds; the e2e tests hold the repository's own files to the same checks.
package deploycheck
