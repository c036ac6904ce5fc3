// Package claim is the host's side of a name's claim in a registry: the
// protocol (Start: the host's first process claims the name, the others
// join its claim; the reserved-up-to mark every counter update is checked
// against, and its extensions; one heartbeat per host; the return of the
// unused reservation by the last process out, Reservation.Close), and the
// files it keeps beside the counter (Files: the owner token, the mark,
// the session, the presence and gate locks, the heartbeat), their
// formats, each checked on every read. What a claim means for the rest
// of an Open (node numbers, a released name, the sequence leases) the
// engine decides, through Config's functions; the counter it reaches
// only as a Counter, under the engine's lock.
//
// The mark file (Mark) is 16 bytes, or empty (nothing may be issued):
// the mark, the highest number the host may issue, and the floor, the
// counter's value when the mark was last moved, each unsigned 64-bit
// little-endian. A counter found below the floor was rolled back (a
// restore, a copy) while the host was using it.
//
// The session file (Session) is four lines, each ending in a newline:
//
//	snapid-session 2
//	name <node name>
//	owner <owner token>
//	session <session>
//
// A file in another format, the one-line format of earlier versions
// included, is refused (errs.ErrCorruptSession).
//
// The heartbeat record (Heartbeat) is 40 bytes: "snaphb02", a hash of
// the claim's session (SessionHash), when the last refresh that reached
// the registry was sent and when the last one was tried (Unix
// nanoseconds), and a state (bit 0: the registry said the name is
// another owner's; bit 1: the last try was the holder's after a failure
// of its own); every field is 64 bits little-endian. Anything else reads
// as no record. HeartbeatDue says when a process sends a refresh, and
// FreshClaim when a joining process may trust the session file without
// reading the registry.
package claim
