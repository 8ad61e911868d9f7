// Package lbpolicy is hashlb as an Envoy load-balancing policy, without the
// ABI: the configuration the policy accepts, the per-worker balancer over the
// cluster's hosts, and the persistence table shared by the workers of one
// process. cmd/hashlb-lbpolicy binds it to Envoy's dynamic-module ABI through
// internal/lbpolicy/abi (cgo); this package is plain Go, so its tests and
// benchmarks run on a fake host set.
//
// Every decision is lbcore's: the cluster's hosts become lbcore services
// (Config.WithServices), Envoy's health marks them down, and the ranking
// lbcore returns is mapped back to the index Envoy asks for.
//
// Its parts, by file: the policy's configuration, parsed and checked
// (config.go); what the policy reads of Envoy, the hosts and the request
// (hosts.go), and a host made an lbcore service (services.go); the host
// set made hashlb's, shared by the workers that see the same hosts
// (hostset.go); the Worker, one Envoy worker's Balancer and its choices
// (worker.go); which choices a cache of them keeps over a change of the
// hosts, as rendezvous hashing moves only the keys of a host gone and the
// keys a host added outranks (carry.go); the persistence table the workers of one process share
// (store.go); and persistence.fleet, the process's member of the etcd fleet
// on goroutines of its own, with etcd's Go client (fleet.go), and its
// credentials, read from Envoy's environment and the files it names
// (fleetauth.go).
package lbpolicy
