// Package spread measures how evenly hashlb's weighted rendezvous (HRW)
// ranking spreads keys, side by side with the two consistent-hash load
// balancers Envoy ships: the ring hash (ketama) and Maglev. It is test-only
// evidence for docs/distribution.md: the module never imports it.
//
// HRW is lbcore itself (NewBalancer and Decide over a URLHASH configuration
// whose request target is the key), so the figures are the module's own
// ranking. The ring hash and Maglev are written here from Envoy's sources
// (see ring.go and maglev.go for the files and commits read), hashing the
// same keys with the same xxHash64 Envoy's hash policies use.
//
// The goal tests run by default. The full comparison table and the charts, a
// generator behind a build tag:
//
//	go test -tags spreadtable ./internal/spread -run TestDistributionTable -v
//
// docs/distribution.md holds the figures and what they mean.
package spread
