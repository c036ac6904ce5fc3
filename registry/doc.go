// Package registry is the interface between snapid and the store that
// proves a node name is held by one counter file in a whole cluster: what
// a registry implements, the rows it keeps, and the errors it returns. It
// imports nothing of snapid's root package, so that a registry depends on
// this package alone.
//
// A Registry keeps one row per node name (Holder): the owner token of the
// counter file that holds it, the session of the holding host's current
// claim, and the reserved-up-to mark, the highest number the holder may
// hand out. Every change is conditional on the owner and the session (a
// compare-and-set), so that two hosts never both hold a name, and a mark
// only moves up while a holder uses it. A NumberRegistry also gives each
// name a node number and records the cluster's stride, for the numeric id
// forms; a SequenceRegistry keeps integer sequences, leasing ranges to
// data centres and from them to hosts.
//
// Implementations: package cassandra (Apache Cassandra, lightweight
// transactions at SERIAL) and package registrytest (in memory, for tests,
// with an outage switch). registrytest.TestRegistry (with the sequences'
// part for a SequenceRegistry) and registrytest.TestNumberRegistry are the
// conformance suites every implementation must pass.
//
// Names follow one rule (ValidateName): ^[a-z_][a-z0-9_]{0,62}$.
// Errors are sentinels for errors.Is, wrapped with detail; snapid's root
// package returns the same values.
package registry
