// Package lbcore owns every decision hashlb makes: the request view, the eight
// Citrix ADC key extractors, masks and hash length, weighted rendezvous ranking,
// the backup methods (least connection, round robin), bounded load, the TR7
// persistence table over a Store, the key-expression language, and config
// parsing and validation. The fleet-wide level of persistence (etcd) is
// package lbcore/fleet, which imports lbcore: lbcore parses its config
// (Fleet) and gives it the services' identities in fleet records
// (balancer_fleet.go), and never imports it.
//
// It imports the Go standard library, xxhash and gjson only: it never sees the
// proxy-wasm SDK, so it builds and is tested natively and for GOOS=wasip1 alike.
// Time and storage come from the caller (a now argument, a Store); lbcore has
// no globals, no goroutines and never reads the clock.
package lbcore
