// Package leasefile is a sequence lease file: its format (Record and
// Range, Encode and Decode with the checks every read makes) and File,
// an open lease file and its floor, read and written under the lease
// file's lock. It knows no registry and no claim; the engine makes and
// opens the files beside the counter and decides what each update
// writes.
//
// The file <counter>.seq.<sequence> holds the host's lease of a
// sequence, shared by the host's processes: each takes blocks of numbers
// from it under an exclusive flock on the file itself (as for the
// counter), writing the new position in place and syncing it before any
// number of the block is returned. It follows the counter file's rules:
// created atomically, never replaced, checked on every read (size, magic,
// checksum, ranges), and a file in another format is refused with
// errs.ErrCorruptLease and left as it is.
//
// Layout (Size bytes, integers unsigned 64-bit little-endian):
//
//	  0  8  magic "snapseq2" ("snapseq1": written by a version without
//	        generations, read as generation 0; this version writes
//	        "snapseq2", which that version refuses, so that it never
//	        rewrites a file whose floor has a later generation)
//	  8  8  pos: the next number to hand out from cur (cur.last+1 when
//	        used up; 0 without cur). The hot path writes these 8 bytes
//	        alone, so the checksum does not cover them.
//	 16  8  cur first (0: no current range)
//	 24  8  cur last
//	 32  8  ahead first (0: none): the next lease, taken in advance
//	 40  8  ahead last
//	 48 64  session of the host's claim the ranges were leased under
//	112 64  node name
//	176 64  sequence name
//	240 32  owner token
//	272  8  generation: one more at every write of the whole record (a
//	        new lease, a new claim, ranges dropped); at most 2^63-1
//	280 ..  zero
//	508  4  CRC-32C of bytes 0..507, bytes 8..15 (pos) read as zero
//
// The floor file <lease file>.floor holds, in the same format, the
// record as the host's last update left it (written after the lease
// file, before any number is handed out, and not synced: it is a floor
// for a lease file restored or copied over in place while the host runs,
// not a durable record). Every update checks that the floor it has open
// is still the one at its path (reopening it if not) and reads it under
// the lease file's lock: a lease file at an earlier generation than a
// floor of the same claim, or of the host's current claim, or at the
// same generation and ranges with an earlier position, went backwards,
// and is raised back to the floor before anything is taken, by whichever
// process of the host comes first (the twin of the counter's floor in
// the mark file). A floor write that fails fails the update: nothing is
// handed out. Empty or all zeros: no floor. A lease file and its floor
// restored together are not caught in general: each process raises the
// file to what it last saw itself (an earlier generation to the record of
// its last update, an earlier position in the same ranges to the highest
// it saw; see the engine's Sequence.updateContext), and a process opening the
// sequence afterwards drops an earlier lease (the engine's Sequence.verify; not a
// copy whose lease taken in advance is the registry's record), but what
// other processes took beyond what a process saw can repeat.
//
// Strings are ASCII, zero-padded. The ranges are trusted only while the
// session is the host's current claim and the latest range (ahead, else
// cur) is the lease the registry records for the host (see
// the engine's Sequence.verify); otherwise they are void: a gap, never a repeat.
package leasefile
