// Package claim is the host's side of a name's claim in a registry, as
// far as it is files and rules: the files a claim keeps beside the
// counter (Files: the owner token, the mark, the session, the presence
// and gate locks, the heartbeat), their formats, each checked on every
// read, and when the host's heartbeat refreshes the claim. It makes no
// registry call: the engine runs the claim's protocol (claim, join,
// extension, heartbeat, return at close) over Files and the registry.
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
