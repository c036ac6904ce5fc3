// Package cassandra is the snapid.Registry on Apache Cassandra: the table
// in which hosts claim their node names and record how far each name's
// counter may go, shared by every host of a cluster. Open a Registry with
// NewRegistry, give it to snapid.Open with snapid.WithRegistry, and close
// it after the Generators that use it.
// CreateSchema makes the keyspace and the table once, with the
// replication a production cluster needs (snapctl setup).
//
// # The table
//
// One row per node name:
//
//	CREATE TABLE IF NOT EXISTS <keyspace>.<table> (
//	    name          text PRIMARY KEY, -- the node name
//	    owner         text,      -- owner token of the counter file holding the name
//	    hostname      text,      -- the holder's host name,
//	    address       text,      --   network address
//	    machine_id    text,      --   and machine identity (clone detection)
//	    registered_at timestamp, -- when this owner took the name
//	    last_seen     timestamp, -- last claim, extension, heartbeat or release
//	    reserved      bigint,    -- reserved-up-to mark M; for a released row the
//	                             --   final counter value. A uint64 stored bit for
//	                             --   bit: values above 2^63-1 read as negative in cqlsh
//	    state         text,      -- 'active' or 'released'
//	    claim_token   text       -- random, new with every claim; resolves claims
//	                             --   whose outcome was lost (see below)
//	)
//
// The keyspace and table names default to DefaultKeyspace and
// DefaultTable (Config.Keyspace, Config.Table).
//
// # Conditions, not deletes
//
// Every write is a lightweight transaction (LWT) run at SERIAL consistency
// (a quorum of all replicas, every data centre counted: names are global,
// so LOCAL_SERIAL is refused); no plain INSERT, UPDATE or DELETE is ever
// sent. Config.Consistency is only the consistency of the commit that
// follows an accepted change and of List's plain reads.
//
//   - Claim is "INSERT … IF NOT EXISTS" and, for an existing row, an
//     "UPDATE … IF owner=? AND state=? AND reserved=? AND claim_token=?"
//     conditional on the whole row as the failed insert returned it, so that
//     what Claim decided from (the owner, the state, the recorded mark, the
//     holder's machine) is exactly what it replaces; a row that changed in
//     between makes the update fail, and Claim looks again (a few times).
//   - Extend, Touch and Release are UPDATEs conditional on the owner (and on
//     state='active' and the claim_token of the host's claim for Extend and
//     Touch, and on the old mark for Extend; Release on the mark it read at
//     SERIAL and found, compared as unsigned in Go, not above the final
//     value).
//
// Conditions only ever compare marks for equality: CQL orders bigint as
// signed, which would put marks at and above 2^63 below 0.
//
// That is how a refresh never resurrects a released or taken-over row: the
// condition fails instead. A conditional UPDATE on a missing row is not
// applied either, so a deleted row is not recreated as a partial row.
// Conditions were chosen over deletes written into the future ("custom
// timestamps in CQL3") because the claim needs LWTs anyway, for the
// linearizable read-compare-write that makes two hosts never both win, and
// one mechanism is easier to reason about than two; timestamps would also
// depend on the hosts' clocks.
//
// # Unknown outcomes
//
// An LWT whose outcome is unknown (a write timeout, an unavailable,
// overloaded or "CAS write unknown" error, a client timeout or a lost
// connection after the request was sent: any failure but the few that
// provably come before any work, such as a syntax or permission error or
// no connection at all) is resolved by reading the row at SERIAL
// consistency, which also completes any Paxos round left in flight. Our
// effect there (for a claim: our claim_token) means the statement was
// applied; the statement's condition still holding means it was not, and
// the same statement (same token) is sent again; anything else means
// another writer got there first, and the call carries on as if the
// condition had failed. The outcome is never guessed: if the read fails
// too, or the caller's context has ended, the call returns an error
// wrapping snapid.ErrRegistry that says the outcome is unknown.
//
// # No retry policy
//
// The cluster is used without a gocql RetryPolicy: gocql v1.7.0 re-sends
// non-idempotent statements, LWTs included, under a retry policy, which
// would turn one claim into two Paxos rounds with unknowable results. An
// unknown outcome is resolved as above instead.
//
// Reads are retried by the package itself, as they change nothing: a read
// (Get, List, SequenceStatus, the serial reads of claims and releases and
// those that resolve unknown outcomes) that fails with a timeout, too few
// replicas, a node that is joining or overloaded, or a lost connection is
// sent again after a wait that doubles from 20 ms up to 1 s, with jitter,
// until it succeeds or the caller's context ends (30 s for a context
// without a deadline); the last error is then returned, wrapped. A
// definite error (syntax, unauthorized, invalid) is returned at once.
// Writes are sent once.
//
// # Errors
//
// Errors wrap snapid's sentinels, for errors.Is: snapid.ErrInvalidOption
// (invalid configuration or arguments, refused before anything is sent),
// snapid.ErrRegistry (Cassandra unreachable, failing, or an outcome that
// stayed unknown), snapid.ErrNameTaken, snapid.ErrNotRegistered,
// snapid.ErrMarkMoved and snapid.ErrProbableClone.
//
// # Sequences
//
// Registry also implements snapid.SequenceRegistry, in a table named
// "sequences" in the same keyspace (created by the first CreateSequence):
// each sequence's GLOBAL partition is written at SERIAL only, each data
// centre's partition (its ranges and its hosts' leases) at LOCAL_SERIAL
// only, through a session that reaches that data centre's nodes alone
// (Config.LocalDC, or the cluster's only data centre). SetSequenceSizing
// sizes the ranges a data centre takes. docs/ARCHITECTURE.md ("Sequences")
// describes the rows, the statements and why the two kinds of Paxos never
// meet on one partition.
//
// # Concurrency
//
// A Registry is safe for concurrent use by any number of goroutines, and
// any number of Registry values, in any number of processes and hosts, may
// use one table at once.
//
// Imports: snapid and gocql (its tests also internal/testcluster and
// snapidtest). Imported by programs that use the registry and by
// cmd/snapctl and examples; never by snapid itself, which sees it only
// through the snapid.Registry interface.
package cassandra
