// Package fleet is persistence's fleet-wide level
// (docs/persistence.md#fleet-wide-persistence-through-etcd): etcd decides a
// new persistence key's service once for every proxy, first writer wins, and
// each proxy's local table (lbcore) stays the first level.
//
// It owns the protocol of one worker, Client: a deterministic state machine
// that takes events (a local miss or hit, an etcd answer or its absence, a
// tick, each with the clock) and hands out what to do (Take: the calls to
// send, the transactions settled, the local entries to correct, the lines to
// log). Its files: client.go (the Client, its outputs and bounds), steps.go
// (what each answer leads to), sync.go (the queue of keys to reconcile or
// refresh from the tick), known.go (the keys a worker placed, placed again
// when etcd loses its data, and the hand-over to a new configuration's
// client), record.go (etcd's keys and values: Key, Record, the slots and
// leases that bound an entry's life) and etcd.go (the JSON gateway's
// request bodies and answers, unexported).
//
// It imports lbcore (the parsed lbcore.Fleet and lbcore.Persistence,
// lbcore.PersistKeyHash), the Go standard library, xxhash and gjson only
// (TestDependencies); lbcore never imports it. The services come through the
// Services interface, which *lbcore.Balancer satisfies. Like lbcore it sends
// nothing and reads no clock: the filter (filter/fleet.go) wires its calls to
// the host, and tests drive it without one.
package fleet
