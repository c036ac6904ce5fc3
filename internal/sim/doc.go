// Package sim runs random histories of operations and faults against the
// real library and checks every guarantee over each one.
//
// A history comes whole from a seed (Generate): one to three hosts, each
// standalone or claiming its name in the registry, strict, block or
// CPU-shard mode, sync on or off, one to three processes; one or two
// integer sequences at the edges (a few numbers, ending at 2^31-1, ending
// at 2^63-1); then about a hundred steps. A step is an operation (open,
// UniqueIDContext, NextNContext, a context already ended, Close, Release,
// ForceRelease, a take-over by a new host, WithReclaim, Init by an
// operator, a counter directory moved, Sequence.Next and
// NextN, a sequence created again with a raised start or a lowered max, a
// burst of concurrent calls with a Close among them, a start-up storm of
// a host's processes with a take-over at the same moment, bad input) or a
// fault
// (a process killed, a power cut forgetting every unsynced write or
// keeping some, EIO or ENOSPC on the n-th next write, fsync, directory
// sync, link or rename, a registry answer lost before or after the change
// was applied, a registry outage, the clock moved forward or back, a
// host's files restored from an earlier copy while stopped or, for the
// counter, in place while running, a host cloned onto another machine, a
// file beside the counter corrupted).
//
// The library runs unchanged; the simulator reaches it through its seams
// (package internal/seam): every host's files go through a disk (disk.go)
// that is the counter and lease files' I/O and the file-system layer, and
// keeps, by inode and by directory entry, what a power cut would leave;
// the registry is snapidtest's, wrapped to lose answers (registry.go); the
// registry side's clock is the simulator's. Steps run one at a time and
// the simulator waits for background extensions and prefetches between
// them, so a seed replays the same history, except for the concurrent
// bursts and storms, whose interleaving the scheduler decides (the checks hold for
// every interleaving).
//
// What is checked (check.go), after every step and at the end:
//
//  1. no id (name, number) is returned twice, by any host;
//  2. no sequence number is returned twice, none below the start or above
//     the max it was handed out under; a raised start or a lowered max is
//     accepted only before it would cut into numbers handed out;
//  3. with sync on, a number is returned only once the counter's durable
//     value covers it; with a registry, only once the registry's mark
//     does;
//  4. a Release or ForceRelease reported done shows in the registry, and
//     its final value covers every number handed out; one that failed
//     without an unknown outcome left the registry as it was;
//  5. the registry's mark of every name stays at or above every number
//     handed out under it;
//  6. bad input (an invalid name, a counter in a missing directory, a
//     take-over floor of 2^64-1, WithBlock(0), NextN(0), a second name on
//     a registered counter in use) changes no file and no registry row,
//     and an Open refused on a damaged file changes no registry row;
//  7. once every process closed, no goroutine and no descriptor is left;
//  8. with every fault stopped, every host that nothing was done to and
//     that still holds its name opens and issues again (a used-up counter
//     excepted).
//
// A failure prints the seed, the first violation, the history shrunk to
// the steps that still break a guarantee (Shrink), and the command that
// replays it: SNAPID_SIM_SEED=N go test -run TestSimulation -v
// ./internal/sim.
//
// What it does not model: directories lost in a power cut (the simulator
// makes them before a history starts; the bindings directory's levels are
// synced by the library and checked by the power-loss tests), a failed
// fsync that drops dirty pages which a later fsync then reports clean,
// several data centres of a sequence (the in-memory registry has one),
// the Cassandra adapter's classification of errors (its own fault tests
// cover it), other users of the host (the multi-user tests do), and time
// moving while a step runs.
//
// Only its own tests import it; it imports snapid, snapidtest,
// internal/seam and internal/statefile.
package sim
