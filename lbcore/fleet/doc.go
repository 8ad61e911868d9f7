// Package fleet is persistence's fleet-wide level
// (docs/persistence.md#fleet-wide-persistence-through-etcd): etcd decides a
// new persistence key's service once for every proxy, first writer wins, and
// each proxy's local table (lbcore) stays the first level.
//
// It owns the protocol of one worker, Client: a deterministic state machine
// that takes events (a local miss or hit, an etcd answer or its absence, a
// tick, each with the clock) and hands out what to do (Take: the calls to
// send, the transactions settled, the local entries to correct, the lines to
// log). The Client holds one part per concern, each a small type of its
// own file with its own tests (parts_test.go), and coordinates them:
//   - client.go: the Client, its events, outputs and bounds, and its clock;
//   - steps.go: what each answer of a transaction leads to;
//   - root.go: roots, the token and the slots' leases, and the one
//     authenticate and one grant in flight that transactions wait on;
//   - health.go: health, etcd up or down (FailLimit failures in a row),
//     the probes of a down etcd and the heartbeat of an idle one;
//   - budget.go: budget, the create tokens and their ledger;
//   - sync.go: syncQueue, the keys to reconcile, refresh or create once
//     the budget allows, sent from the tick;
//   - known.go: knownKeys, the keys a worker placed and the signs that
//     etcd lost them (placed again), and the hand-over to a new
//     configuration's client;
//   - divert.go: divertSet, the keys served on their second choice;
//   - wire.go: registry (transactions and calls in flight, their records
//     reused) and outbox (what goes out, in buffers reused);
//   - record.go: etcd's keys and values (Key, Record, the slots and leases
//     that bound an entry's life);
//   - etcd.go: the JSON gateway's request bodies and answers, unexported.
//
// TestTypesSmall holds every struct type of the package to 15 fields.
//
// It imports lbcore (the parsed lbcore.Fleet and lbcore.Persistence,
// lbcore.PersistKeyHash), the Go standard library, xxhash and gjson only
// (TestDependencies); lbcore never imports it. The services come through the
// Services interface, which *lbcore.Balancer satisfies. Like lbcore it sends
// nothing and reads no clock: the filter (filter/fleet.go) wires its calls to
// the host, and tests drive it without one.
package fleet
