// Package fleettest holds what the fleet tests under hostsim (e2e) and in
// real Envoy (e2e/envoy) share: etcd's command line on free loopback
// ports (EtcdArgs, FreeAddr) and waiting for its JSON gateway
// (fleettest.go); go.mod's etcd server embedded in the test
// process, over plain TCP or TLS with client certificates, which internal/lbpolicy's fleet tests use too, and
// a cluster of such members on loopback ports in one process, whose members
// a test kills and restarts, for the policy's fleet over a three-member
// etcd (embed.go); and a cluster whose members are processes of their
// own (proc.go: Debian's etcd 3.4 through HASHLB_ETCD_BIN, else the test
// binary serving the embedded etcd, member.go), which a test can also
// stop (SIGSTOP) and resume, or wipe and add back, and whose KillWait
// e2e/envoy's own etcd process ends with too; and a TCP proxy in
// front of a member that resets a share of its connections (reset.go).
// Test-only: the module never imports it.
package fleettest
