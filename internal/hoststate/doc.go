// Package hoststate keeps the host's one record of each node name: which
// counter file issues under it (device and inode, and the path it was
// opened at), the id forms used under it (the striped form in use, and the
// counter's value when each other one was left), the node number and
// stride a registry gave the name, whether it was released, and a floor
// and a mark for the counter's value. Every
// program of the host reads and writes the same record, whatever its user,
// whether it uses a registry, and whatever its id form.
//
// # The place
//
// Records live in one directory (DefaultDir), made by root with mode 1777
// under a root-owned /var/lib/snapid, as /tmp is made: any user may add a
// record, and the sticky bit lets only a record's owner, or root, remove
// or rename it. So root never reads a directory another user controls to
// learn which names are in use (no home directories, which ProtectHome or
// a tmpfs hide from a hardened service), and what it cannot read is an
// error, never "no record". A user can deny a name by recording it first;
// it cannot make another program's ids repeat, because a record is only
// ever created (linked into place without replacing) and a program that
// finds its name recorded for another counter refuses it.
//
// # A record
//
// A record file is two slots of SlotSize bytes, as bbolt keeps two meta
// pages: each a whole copy with a generation and a CRC-32C. Writes go to
// the slot the newest copy is not in, in place (the file keeps its inode,
// owner and mode), and are synced; a write torn by a crash leaves the
// other copy. A read and the write that follows it are one step under
// Handle.WriteLock (an open file description lock on the record's first
// byte, apart from the presence flock): two programs on two counter files
// under one name (a replacement taking it over while the old file's
// programs run) never interleave. Only the counter's writers can open the
// record for writing, so the lock waits on no stranger. Readers take no
// lock at all.
//
// Files are opened without following links and without blocking, and
// checked on the descriptor: a regular file with one name. A record made
// for a counter others in its group may write is made writable by that
// group, so that every program allowed to issue from the counter can keep
// its record.
package hoststate
