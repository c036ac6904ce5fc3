// Package cassandra is the registry.Registry on Apache Cassandra: the table
// in which hosts claim their node names and record how far each name's
// counter may go, shared by every host of a cluster. Open a Registry with
// NewRegistry, give it to snapid.Open in snapid.Config's Registry
// (snapid.RegistryConfig.Registry), and close it after the Generators that
// use it.
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
// wrapping registry.ErrRegistry that says the outcome is unknown.
//
// # No retry policy
//
// The cluster is used without a gocql RetryPolicy: the package alone
// decides what is sent again. An LWT sent twice blindly would be two Paxos
// rounds with unknowable results; its unknown outcome is resolved as above
// instead.
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
// Errors wrap package registry's sentinels (snapid's are the same values), for errors.Is: registry.ErrInvalidOption
// (invalid configuration or arguments, refused before anything is sent),
// registry.ErrRegistry (Cassandra unreachable, failing, or an outcome that
// stayed unknown), registry.ErrNameTaken, registry.ErrNotRegistered,
// registry.ErrMarkMoved and registry.ErrProbableClone.
//
// # Creating the schema
//
// SetUpSchema (snapctl setup --replication dc1:3,dc2:3) creates the
// keyspace and the tables once, before the hosts start, so that the
// keyspace gets the replication a production cluster needs and the first
// starts of many hosts do not all create it at once. Without it a Registry
// creates what is missing (zero configuration for one node or tests).
// SetUpSchema waits for the nodes to agree on the schema before it creates
// anything and after each change, and stops with ErrSchemaAgreement,
// reporting what it created, when they do not in time. A
// Registry waits for schema agreement only after it changed the schema
// itself: gocql counts nodes that are down, so with one node of three down
// the wait would last until its timeout on every start. Creating a
// keyspace whose replication cannot survive the loss of one node (counted
// per data centre from system.local and system.peers) is refused before
// any DDL unless Config.AllowFragileReplication; Registry.CheckReplication
// judges an existing keyspace the same way (replication.go).
//
// # Node numbers
//
// Registry implements registry.NumberRegistry in a table of its own beside
// the names' table, <table>_numbers, whose rows say which name took each
// number, each name's number and the cluster's stride. A number is taken by
// INSERT … IF NOT EXISTS on its row, then given to the name the same way,
// both at SERIAL; a number never changes once given, and one taken by an
// attempt that lost stays taken (a gap). The rows and the search for a
// free number: numbers.go.
//
// # Sequences
//
// Registry also implements registry.SequenceRegistry, in a table named
// "sequences" in the same keyspace (created by the first CreateSequence).
// Numbers flow in ranges: GLOBAL grants a data centre a range, hosts of
// that data centre lease smaller ranges from it, and a host's processes
// take blocks from its lease file (see snapid's seqlease.go).
//
//	CREATE TABLE <keyspace>.sequences (
//	    seq text, part text,               -- partition: the sequence, and 'global' or 'dc:<data centre>'
//	    kind text, key text, first bigint, -- clustering: the row's kind, its key, a range's first number
//	    last bigint, next bigint, start bigint, max bigint,
//	    owner text, session text, lease_first bigint, lease_last bigint,
//	    at timestamp, lwt_token text, closed_pos bigint,
//	    PRIMARY KEY ((seq, part), kind, key, first))
//
//	part    kind    key, first          columns                                   written
//	global  global  '', 0               start, max, next (first not granted)      at SERIAL only
//	global  grant   data centre, first  last                                      at SERIAL only, with GLOBAL
//	dc:<D>  range   '', first           last, next (first not leased)             at D's serial consistency only
//	dc:<D>  host    node name, 0        owner, session, lease_first, lease_last,  at D's serial consistency only
//	                                    closed_pos (position at the last clean close)
//
// Numbers are at most registry.MaxSequence (2^63-1), so the signed bigint
// order is their order.
//
// D's serial consistency (dcPaxos, seqpaxos.go) is LOCAL_SERIAL when D
// holds SequenceLocalReplicas replicas or more, so that D leases while cut
// off, and SERIAL otherwise, so that no partition is kept on one replica
// whose loss would let numbers be leased again; every Registry decides it
// the same way from the keyspace's replication.
//
// SERIAL and LOCAL_SERIAL never meet on one partition. Paxos at SERIAL
// uses a quorum of all replicas, at LOCAL_SERIAL a quorum of the
// coordinator's data centre; the two need not intersect, so an LWT of one
// kind can miss the other's proposal in progress on the same partition.
// Each partition is therefore written with one kind only, and a grant
// moves numbers in two steps: a SERIAL batch on the global partition
// (GLOBAL's next, old → new, conditional on next and max as read, plus the
// grant row; grant in seqgrant.go), then a LOCAL_SERIAL INSERT … IF NOT
// EXISTS of the range in dc:<D> (insertRange). A granter that dies
// between the two leaves a grant without its range; so do D's replicas
// losing the range after hosts leased from it, and nothing in D says
// which. The next grant for D reads the global partition at SERIAL first
// and inserts every grant of D, older than a minute, that its partition
// lacks, used up (a range is keyed by its first number, so the insert is
// idempotent, and a slow granter's own insert then finds it there). A
// grant whose range is never used is a gap, never a repeat.
//
// LOCAL_SERIAL on dc:<D> is safe only with a coordinator in D, so then
// every sequence statement goes through a session of its own whose host
// filter admits only D's nodes (gocql.DataCenterHostFilter; gocql's
// DC-aware policy would fail over to remote nodes), with D's nodes, as the
// cluster lists them, among its contact points. At SERIAL any node
// coordinates. D is Config.LocalDC, or without it the cluster's only data
// centre; a cluster of several without LocalDC is refused for sequences
// (names are unaffected).
//
// LeaseSequence reads dc:<D> at its serial consistency and sends one conditional
// batch: the lowest range with room moves next old → new (IF next = ?),
// and the host row is written conditional on what was read (IF owner = ?
// AND session = ? AND lease_first = ? AND lease_last = ?, or IF NOT
// EXISTS). The range condition alone makes leases disjoint; the host row
// binds the host's lease to its claim of its node name. A host row of this
// session whose lease is not the one the caller presents is
// registry.ErrLeaseMoved (the caller's file is older than the registry); a
// missing host row, or one of another session, is taken over only after
// the name's row, read at SERIAL, shows the caller's owner and session
// active, so a later claim supersedes an earlier one's host row. While the
// host row is the caller's no read of the name's row is needed, so a data
// centre kept at LOCAL_SERIAL and cut off from the others keeps leasing
// from its own ranges.
//
// A data centre whose ranges have less than half of its latest range left
// takes the next one in the background; one with no room takes it before
// the lease. Its size is what D's hosts leased from its latest range per
// second since it was granted, times the horizon, at least the floor, at
// most what GLOBAL has left (SetSequenceSizing). CloseLease records a
// lease file's position at a host's clean close (closed_pos), and
// AdoptLease carries that lease over to the host's next claim when the
// file is exactly as recorded (seqclose.go).
//
// Every LWT writes a fresh lwt_token. An unknown outcome is resolved as for
// names (runLWT), by a read of the same partition at the same serial
// consistency: the token there means applied, the condition still holding
// means send again, anything else means another writer won.
//
// # Concurrency
//
// A Registry is safe for concurrent use by any number of goroutines, and
// any number of Registry values, in any number of processes and hosts, may
// use one table at once.
//
// Imports: package registry (the interface it implements), internal/cql
// and gocql; its tests also snapid, internal/testcluster and registrytest.
// Imported by programs that use the registry and by cmd/snapctl and
// examples; never by snapid itself, which sees it only through the
// registry.Registry interface.
package cassandra
