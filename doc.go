// Package snapid hands out short, human-friendly ids, "<node name>-<number>"
// such as "server_a-123", that are unique across a cluster of hosts sharing
// Apache Cassandra, without a central id service.
//
// Each host has a node name (see ValidateName) and a counter file; each id
// takes the next number from the counter file under an exclusive flock.
// With a registry (Config.Registry) the node name is claimed cluster-wide
// before any id is issued, and the numbers a name may issue are bounded by
// a reserved-up-to mark kept in the registry, so that a counter file
// restored from a backup or copied to a cloned machine cannot repeat ids.
// The registry on Apache Cassandra lives in package
// github.com/snapid/snapid/cassandra, so that a program that does not use
// it links no database driver; package registrytest has an in-memory one for
// tests, and the conformance suite every Registry must pass.
//
// # The counter file
//
// A counter file is exactly 8 bytes: the last issued number as an unsigned
// 64-bit little-endian integer (the bytes of Snap!'s counter.u64 on x86). A
// new file holds 0, so the first number is 1. The file is created
// atomically (a temporary file written and synced, linked into place, the
// directory synced) and then only ever updated in place, 8 bytes at offset
// 0, under an exclusive flock on the file itself, followed by fdatasync when
// sync is on (the default). It is never replaced, so every locker, Snap!
// servers included, locks the same file. A file of any other size is
// refused with ErrCorrupt and left as it is. The counter never goes down,
// except through admin.Repair; at 2^64-1 it returns ErrExhausted.
//
// # Id forms
//
// Besides "<name>-<number>", a Generator hands out numeric ids that carry
// the node's number instead of its name (Config.Form: Decimal or Striped): the decimal form,
// Snap!'s "<node number>.<number>", which skips numbers ending in 0 so
// that no two ids are equal as decimals, and the striped form, the integer
// number × stride + node number, bounded by Striped.MaxID (int64 by default,
// 2^53 or 32 bits when asked). The node number comes from a registry that
// gives numbers (NumberRegistry), or is configured (NodeNumber).
// AppendUniqueID and UniqueUint64 hand out ids without allocating.
// ParseID reads every form.
//
// # Concurrency
//
// A Generator is safe for concurrent use by any number of goroutines, and
// any number of Generators in any number of processes may share a counter
// file. In strict mode (the default) concurrent callers share counter
// updates (group commit): callers that arrive while an update is being
// written and synced are served together by the next one, so durable ids
// cost far less than one fdatasync each. In block mode (Config.Block) a
// Generator reserves a block of numbers at a time and serves it from
// memory.
//
// # The host's record of each name
//
// Every Open, with a registry or without, keeps the host's one record of
// its name (in /var/lib/snapid/records, or where Config.BindingDir says): which counter file issues under it,
// the id forms and node number used under it, whether it was released,
// and a floor and a mark kept a step ahead of the counter. An Open is
// refused when the record names another counter (ErrNameBound) or the
// counter is below the floor (ErrRolledBack; with a registry it is raised
// instead), and after a crash the first program of the name raises the
// counter to the mark.
//
// # With a registry
//
// The host's first process claims the name and records the claim's
// session beside the counter; the host's other processes join it. A mark
// file beside the counter holds the host's reserved-up-to mark, written
// after the registry's and extended a step at a time; the last process out
// sets the mark back to the counter. One process of the host refreshes the
// claim's last-seen for all of them.
//
// # Integer sequences
//
// A Sequence (Generator.Sequence) hands out plain integers, unique across
// the cluster, from ranges a SequenceRegistry leases to the host; the
// host's processes take blocks of them from a lease file beside the
// counter.
//
// # Logging
//
// A Generator reports what an operator should know and no error returns —
// a counter raised to the registry's mark after a crash, a restore or a
// take-over, a background extension of the reserved range that failed, a
// name binding moved — as records of a *slog.Logger: slog.Default() (as it
// is when Open is called) unless Config.Logger names another. A program that
// wants none passes Config{Logger: slog.New(slog.DiscardHandler)}.
//
// # Guarantees
//
// No number is issued twice from one counter file, across goroutines,
// processes, and processes killed at any instant; with sync on, also across
// an OS crash or power loss, since no number is returned before the update
// covering it is on stable storage. In strict mode numbers are strictly
// increasing and dense on the host. With every host's name claimed in the
// registry, no id is issued twice in the cluster.
package snapid
