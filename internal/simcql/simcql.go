package simcql

import (
	"math/rand/v2"
	"time"

	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
)

// Cluster is a simulated Cassandra cluster: every table the Registry uses,
// Paxos rounds per partition at SERIAL and LOCAL_SERIAL, and the faults a
// gocql session reports. It is driven by the rand.Rand it was made with and
// by the calls below; it has no goroutine and no clock of its own. Safe
// for concurrent use.
type Cluster interface {
	// Registry returns a Registry whose every statement goes through a
	// coordinator in data centre dc, with now as its clock.
	Registry(dc string, now func() time.Time) cql.Registry
	// Backend is what Registry runs its Registry over, for tests that
	// wrap a querier (cassandra.NewBackendRegistry makes the Registry;
	// Settle does not wait for its background grants).
	Backend(dc string, now func() time.Time) cql.Backend
	// SetDown makes every request fail as with no connection (true) or
	// lifts it.
	SetDown(down bool)
	// SetCut cuts data centre dc off from the cluster's quorum (SERIAL and
	// QUORUM requests from it fail, LOCAL_* ones work; commits elsewhere
	// do not reach its replicas) or heals it.
	SetCut(dc string, cut bool)
	// SetOneWay makes requests from dc reach the cluster but their replies
	// lost (an asymmetric partition: writes are applied, the client times
	// out), or heals it.
	SetOneWay(dc string, on bool)
	// SetFaultRate sets the probability that a request meets a random
	// fault (a timeout, Overloaded, Unavailable, a proposal left in
	// flight).
	SetFaultRate(p float64)
	// Settle waits until no Registry it made has a background range
	// grant running (call it while no call of theirs is running).
	Settle()
	// Tick lets the cluster move on between two steps: proposals left in
	// flight may be completed by another coordinator, replicas that missed
	// a commit may catch up.
	Tick()
	// LoseSequences empties data centre dc's partition of every
	// sequence, as replicas that lost the table would, and reports
	// whether there was one.
	LoseSequences(dc string) bool
	// Row is the name's row as the cluster will settle it (every commit,
	// and every proposal left in flight that will be completed), and
	// whether there is one.
	Row(name string) (registry.Holder, bool)
	// HostLease is the lease the sequences table records for host name
	// in data centre dc, as the cluster will settle it, and whether there
	// is one.
	HostLease(seq, dc, name string) (registry.SequenceLease, bool)
	// Sequences is the sequences table as the cluster will settle it, in
	// a form to compare.
	Sequences() string
	// Reached counts what this cluster's history reached ("applied-later":
	// a proposal completed after its client got an error; "stale-read": a
	// read that did not show the settled state).
	Reached() map[string]int
	// Faults is the number of random faults that fired; an outage's
	// refusals and a cut's (one-way or not) are the driver's steps, not
	// counted here.
	Faults() int
}

// New makes a Cluster driven by rng. Its Registries are package
// cassandra's: a program that calls Registry links package cassandra.
func New(rng *rand.Rand) Cluster { return newSimCluster(rng) }
