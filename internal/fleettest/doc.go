// Package fleettest holds what the fleet tests under hostsim (e2e) and in
// real Envoy (e2e/envoy) share: etcd's command line on free loopback
// ports (EtcdArgs, FreeAddr), waiting for its JSON gateway, and the
// measure of agreement, the last request whose key went elsewhere through
// another proxy. Test-only: the module never imports it.
//
// All of it is fleettest.go.
package fleettest
