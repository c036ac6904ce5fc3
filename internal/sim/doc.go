// Package sim runs random histories of operations and faults against the
// real library and checks every guarantee over each one.
//
// A history comes whole from a seed (Generate): one to three hosts, each
// standalone or claiming its name in the registry (from one of one or two
// data centres), strict, block or CPU-shard mode, sync on or off, one to
// three processes; one or two
// integer sequences at the edges (a few numbers, ending at 2^31-1, ending
// at 2^63-1); then about a hundred steps. A striped host brought to its
// bound may have a WithMaxID bound of its own; every other step's calls
// pass a context that can end but does not. A step is an operation (open,
// taking ids (UniqueIDContext, AppendUniqueIDContext,
// UniqueUint64Context, NextID, NextNContext or NextIDsContext, as the
// step picks), a context already ended, Close, Release,
// ForceRelease, a take-over by a new host, WithReclaim, Init and Repair
// by an operator (Repair also while a process without a registry runs in
// strict mode, then a power cut), a damaged lease file or floor removed by an operator,
// a counter directory moved, a Sequence opened, Sequence.Next and
// NextN, a sequence created again with a raised start or a lowered max, a
// burst of concurrent calls with a Close among them, a start-up storm of
// a host's processes with a take-over at the same moment, bad input, a
// released name reopened without WithReclaim, a second counter opened
// under a host's name, the counter replaced by rename under running
// processes, a host's stride or node number changed (a stride also by
// one process while others run on with the old one), a host's last
// process held closing at its read of the name's row while another
// opens (hold.go), snapctl's
// register, register --force, release, release --force and setup run
// in-process by an operator: cli.go; in every history with a standalone
// strict host, its counter put back in place from a copy under its one
// running process, which then takes the next number: rollback.go) or a
// fault
// (a process killed, a power cut forgetting every unsynced write or
// keeping some, either of them inside an operation: at the k-th I/O or
// registry call the seed chose on the host, a background extension's,
// block prefetch's or sequence lease refill's included (freeze.go), EIO or ENOSPC on the n-th next write, fsync, directory
// sync, link or rename, a failed fsync whose pages a later fsync reports
// clean, a registry answer lost before or after the change was applied, a
// registry outage, a data centre cut off from the cluster's quorum, a
// host's heartbeat holder cut off from the registry while its other
// processes reach it, time passing for every host or every clock stepped
// back, one host's clock stepped forward or back alone (skew), a host's
// heartbeat file removed by an operator the moment its record says its
// name was taken, a host's
// files restored from an earlier
// copy while stopped or, for the counter or the lease files, in place
// while running, a host cloned onto another machine, a file beside the
// counter, a lease file or a floor corrupted).
//
// The library runs unchanged; the simulator reaches it through
// internal/engine's options and calls for it (simulation.go there): every host's files go through a disk (disk.go)
// that is the counter and lease files' I/O (the mark and heartbeat
// files' too) and the file-system layer (new files' content, links,
// renames, removals, file and directory syncs, the bindings directory's
// included), and keeps, by inode and by directory entry, what a power
// cut would leave (cut.go: each file's content as of its last fsync,
// each directory's entries, subdirectories included, as of its last
// directory sync; in keep-some mode a file's content may also be torn,
// whole sectors of 512 bytes old and others new, and its size either);
// every process reaches the disk and the registry through a gate of its
// own (freeze.go), at which a power cut or a kill inside an operation
// stops it: from that call on its calls (all the host's, for a cut) fail
// and change nothing, the step ends, the processes are abandoned and the
// cut's state, taken at that instant, is put in place;
// the registry (cassandra.go) is, in two histories of three, registrytest's
// in-memory one, and in the third the real Cassandra adapter
// (cassandra.Registry) on a simulated CQL cluster (package
// internal/simcql, whose documentation says what it models: Paxos per
// partition at SERIAL and LOCAL_SERIAL, proposals completed by another
// coordinator after their client timed out or after its serial read,
// write timeouts, Overloaded, Unavailable, stale non-serial and
// LOCAL_SERIAL reads, data centres cut off both ways or one way), with
// random faults at a rate the seed picks; either is wrapped to lose
// answers (registry.go); the registry side's clock is the simulator's
// true time. Every host runs a clock of its own (hostclock.go), a fake
// clock skewed from the true time, shared by its processes: simulated
// time passes between steps (two seconds each), at the clock steps (the
// hosts run through up to two heartbeat intervals and a poll; the rest
// passes as if the machines were suspended) and a host's clock may step
// alone; the timers, sleeps and deadlines the library arms on it fire one
// at a time as simulated time passes them, so the heartbeat (the
// library's defaults: a one-minute interval, a five-minute clone window)
// refreshes last-seen, hands its role over, and tells a host's processes
// that their name was taken. Histories run side by side, one per core
// (each a world of its own: directory, disks, clocks, registry; what one
// left behind is counted by a profiler label on its goroutines and by its
// directory for descriptors); within a history, steps run one at a time and
// the simulator waits for background extensions and prefetches between
// them, and after every firing for the heartbeat's work, so a seed
// replays the same history, with two exceptions: a few serial seeds
// (TestSimulationSerialReplays allows 6 of 60) replay with other counts, because a Sequence's lease prefetch
// is sent in one run and not in the other (the scheduler decides when
// it starts), which moves the later fault draws — their violations must
// still be the same; and the concurrent
// bursts and storms, whose interleaving the scheduler decides (the checks hold for
// every interleaving). In a burst (groups.go) one process has three
// callers, and the first few counter writes of the burst wait until
// another caller has queued behind them (at most 2 ms of wall time
// each), so that group commit forms groups with members as it does on a
// disk whose fsync takes time; serial steps never wait.
//
// What is checked (check.go), after every step and at the end:
//
//  1. no id (name, number) is returned twice, by any host;
//  2. no sequence number is returned twice, none below the start or above
//     the max it was handed out under; a raised start or a lowered max is
//     accepted only before it would cut into numbers handed out;
//  3. with sync on, a number is returned only once the counter's durable
//     value covers it, and a sequence number only once the lease file's
//     durable record does (it would not hand it out again after a power
//     cut); with a registry, only once the registry's mark does; a call
//     whose context had ended takes nothing; in strict mode a host's
//     numbers go up, one call after another, and are dense unless a
//     process died, a call failed or the counter may have been raised or
//     put back meanwhile (docs/guarantees.md); a striped id stays within
//     2^63-1 and within its WithMaxID bound; a process that changed its
//     counter's stride hands out only ids above every id the counter
//     handed out under its earlier forms, and a process of the form left
//     nothing past the counter's value when it was left; an id returned
//     parsed (NextID, NextIDsContext) has its string's fields; a host
//     that took a name over with a floor hands out nothing below it;
//  4. a Release or ForceRelease reported done shows in the registry, and
//     its final value is at or above the mark it had (and next-1: with
//     the in-memory registry, which refuses a lower one first, this
//     checks the Cassandra adapter); one
//     refused as below the mark while the mark did not move asked to lower
//     it (how a Release or ForceRelease recording too little is found);
//     snapctl's commands did what they printed: "released NAME (last
//     number F)" is in the registry at F, above every number handed out
//     under the name; "registered NAME … next number K" holds the name
//     under this counter's owner token, with K above every number handed
//     out under it (and at or above --start when forced); "stride S
//     recorded" is the registry's stride, and a refused setup moved none; one that failed without an unknown outcome left the registry as
//     it was; a name released on a host is refused there (ErrReleased)
//     until a reclaim (WithReclaim, snapctl register) removes its record,
//     and the refusal changes nothing;
//  5. when the last process of a registered host is killed, the
//     registry's mark stands at most one step above its counter (the
//     gap a crash leaves: the configured step, or what the
//     counter moved since the host's first running process opened, plus
//     the largest request made meanwhile and a block; checkgap.go);
//     the registry's mark of every name stays at or above every number
//     handed out under it, and what the registry reported done keeps its
//     contract, checked against its rows as they settle: an Extend only
//     under the caller's session, a claim refused as taken only while
//     another owner holds the row, a forced take-over at or above the old
//     mark and the floor, a sequence lease only on the previous lease the
//     registry records for the host's claim;
//  6. bad input (an invalid name, a counter in a missing directory, a
//     take-over floor of 2^64-1, WithBlock(0), NextN(0), a second name on
//     a registered counter in use, Repair with next 0 or while registered
//     processes run, a sequence opened with an invalid name or block 0,
//     Sequence.NextN(0), a second counter under a bound name, another
//     stride or node number refused) changes no file (the counter and the
//     mark included), no registry row and no sequence row; an Open refused
//     on a damaged file changes neither files nor rows; an Open on a
//     damaged counter (torn, or longer than a counter) is refused;
//  7. once every process closed, no goroutine and no descriptor is left;
//  8. the heartbeat (heartbeat.go): while a host's processes run under
//     the registry's current session of its name and the host can reach
//     the registry (no outage, its data centre not cut off, its holder or
//     else every other process reaching it), the row's last-seen is at
//     most an interval and seven eighths plus the registry timeout old,
//     so a live host's name is never taken as stale; once a host's
//     heartbeat record says the name was taken and a poll's time has run
//     on the host, no process of that session hands out an id, and a
//     process the registry itself told (an extension or refresh refused
//     as another owner's) hands out none after that step, and every other
//     process of its session none a poll after, unless the told process
//     could not write the host's record (a fault on the write, or it was
//     stopped inside an operation: the others then learn only from the
//     registry, below the old mark meanwhile); a claim by a
//     clone (same owner token; another host name or machine id) while
//     the row is active and was seen within the clone window is refused
//     as a probable clone; a process
//     joining its host's claim is refused while the record says the name
//     was taken, and, without a refresh of the claim in the record less
//     than an interval old, while the registry (reachable) shows the
//     claim no longer stands (another owner or session, not active); and
//     every extension's step is at most 16 times the one before (the
//     growth cap that bounds the gap a crash leaves after a burst);
//  9. with every fault stopped, every host that nothing was done to (or
//     whose damaged counter an operator repaired) and that still holds
//     its name opens and issues again, and takes a number of every
//     sequence whose files were not damaged (a used-up counter or
//     sequence excepted).
//
// A step (with the settling after it) that has not returned after
// stepLimit (20 s) of wall time makes no progress: the watchdog reports
// it as a violation, with the seed and the history shrunk, instead of
// waiting for go test's timeout.
//
// The summary counts an operation only when it did something (a call
// that handed out n numbers counts n; any other call that succeeded, or
// bad input refused, one) and a fault only when it fired (an armed disk
// or registry fault that an operation met, a process killed that ran, a
// restore in place that changed the file, a cut or an outage that began).
//
// Result.Reached counts events the histories are meant to reach (numbers
// taken in a cut-off data centre, counters repaired, lease files restored
// in place; "cassandra": the history ran on the adapter, "applied-later":
// a proposal was completed after its client got an error, "stale-read": a
// read did not show the settled state; "released-reopened": a released
// name's Open refused; "second-counter", "counter-renamed",
// "stride-change": the cases of that name ran; "group-member": a call's
// numbers came from another caller's counter update, engine.GroupMembers;
// "snapctl": a snapctl command run in-process succeeded; "heartbeat-refresh": a
// Touch succeeded, "heartbeat-handover": the heartbeat role moved to
// another process of a host, "taken-propagated": a process learned from
// its host's heartbeat record that its name was taken (at a poll, or
// refused at a join), "clock-skew": hosts running processes had clocks
// more than skewLimit apart, 2 min 52.5 s, the tolerance
// docs/guarantees.md states for the clone check;
// "fault-inside-op", "cut-inside-op", "kill-inside-op": a power cut or
// a kill fired inside an operation, "lease-refill-cut": one during a
// sequence lease refill; "takeover-while-running": a name taken over
// while its old holder's processes ran, which then asked for numbers;
// "stride-change-while-running": a stride changed by one process while
// another ran on with the old one; "close-held": a host's last process
// held closing while another opened; "heartbeat-removed-when-taken": a
// host's heartbeat file removed the moment its record said "taken",
// before the other processes polled it; "restored-below-floor": a
// standalone host's counter restored in place, below its record's floor,
// while its processes ran; "restored-one-below-floor": the same, put back
// exactly one below the floor, the edge of the per-update check); a test
// fails if a run of
// histories never reaches one, and TestSimulation prints the histories
// that reached each of the events named in reachedEvents
// ("sim: reached: …").
//
// # Running it
//
// TestSimulation runs 10,000 histories (2,000 under the race detector)
// and prints "sim: N histories, M operations, F faults, V violations"
// last; the test command's simulation step fails unless V is 0.
// SNAPID_SIM_HISTORIES sets how many, SNAPID_SIM_DURATION runs histories
// for a while instead (make soak: 30 minutes), SNAPID_SIM_FIRST the first
// seed, SNAPID_SIM_STEPS the steps per history, SNAPID_SIM_STEP_LIMIT the
// watchdog's limit; sim_test.go lists them all.
//
// A failure prints the seed, the first violation, the history shrunk to
// the steps that still break a guarantee (Shrink), and the command that
// replays it: SNAPID_SIM_SEED=N go test -run TestSimulation -v
// ./internal/sim. SNAPID_SIM_SERIAL=1 leaves out the concurrent steps
// (Serial): then a seed replays (see above for the few whose counts
// drift).
//
// # What it does not model
//
// It does not model a write torn within a sector (the counter's 8
// bytes and a lease record's 512 sit in one; SNAPID_SIM_SECTOR=1 tears at
// every byte), what the
// simulated CQL cluster leaves out (replicas one by one, cell timestamps,
// the system tables and schema changes, time: see internal/simcql),
// other users of the host (the multi-user tests do: see below), time
// moving while a step runs, a counter with its mark restored together in place under
// running processes, and a lease file with its floor restored together
// and read first by a process that never saw a later position in the same
// lease (neither is covered by the guarantees; a lease file and its floor
// are restored, and the process that moved past the copy takes next).
//
// Root and another user on one host are not modelled, on purpose: the
// library decides by the process's effective uid (os.Geteuid) and by the
// owners of the files and directories it finds (the state directory,
// the bindings directory and each user's binding, the counter), and a
// history runs in one process as root. Linux keeps credentials per
// thread but Go applies setuid to every thread of the process, so one
// process cannot run one host's calls as root and another's as another
// user; files chowned to another uid, opened by a process that is root,
// take root's paths (root reads other users' bindings), not that user's;
// and a seam replacing the euid the library compares with would replace
// the very check that decides trust, so the simulator would test the
// seam instead of the check. The multi-user tests run other users as
// child processes under setpriv (internal/engine/helpers_test.go,
// internal/engine/multiprocess_test.go).
//
// Only its own tests import it; it imports internal/engine, admin, registrytest,
// internal/cli (snapctl's commands, with cli.InProcess),
// snapid/cassandra (the Registry the simulated cluster runs), internal/cql, internal/simcql,
// internal/statefile, internal/hoststate and internal/clock.
package sim
