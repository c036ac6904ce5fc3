// Package powerfs is a FUSE file system for tests that forgets what was
// not synced when the power is cut. It is a loopback over a backing
// directory: every operation goes through to the backing directory at
// once (as writes go to the page cache), while powerfs records, beside
// it, what a disk would hold after a power loss:
//
//   - for every file, its content (and mode) as of its last fsync or
//     fdatasync, or of its last write through a descriptor opened with
//     O_SYNC or O_DSYNC; a file never synced holds nothing (empty);
//   - for every directory, its entries (names created, linked, renamed or
//     removed) as of its last fsync of that directory; an entry is durable
//     only after its directory is synced, whatever was synced before.
//
// PowerCut freezes that record (later syncs fail with EIO and make
// nothing durable), lets the caller kill every process using the mount,
// unmounts, rebuilds the backing directory from the record and mounts it
// again at the same place. What the rebuilt directory holds is what a
// machine finds after losing power with a disk whose volatile write cache
// is flushed by fsync, and with the page cache lost:
//
//   - a file's content is its last synced content, or, with KeepSome, for
//     each file independently, its content at the cut (the kernel may have
//     written a dirty file back before the power went);
//   - a directory holds the entries of its last fsync, or, with KeepSome,
//     for each directory independently, its entries at the cut (a journal
//     commits a directory's metadata changes together, in order);
//   - a file created and synced whose directory entry was never synced is
//     gone; an entry synced to a file never synced is an empty file (the
//     zero-length files of ext4 without auto_da_alloc's heuristics);
//   - a name removed or renamed without a directory sync comes back,
//     pointing to the file it named, with that file's synced content.
//
// Not modelled: torn writes at a cut. A disk writes a sector (512 bytes or
// more) atomically, and the files this package is made for (an 8-byte
// counter, a 16-byte mark, small files written before they get a name)
// are each written at offset 0 in one write, inside one sector: their
// content after a power loss is all old or all new, and so it is here
// (whole files, never parts). Larger files would be torn at sector or page
// boundaries by a real disk, and are not here. Also not modelled: the
// file systems that persist a size without the data (NULL bytes on XFS),
// the loss of a write after a failed fsync that a later fsync reports as
// done ("fsyncgate": here a later sync makes the current content durable),
// metadata other than mode (times, owners, extended attributes), symbolic
// links, special files, O_TMPFILE and copy_file_range (refused with
// ENOTSUP), and flock state, which lives in the kernel (flock works on the
// mount, between the processes using it, and is gone with them at a cut).
//
// Faults can be injected (Inject): EIO or another error from fsync and
// fdatasync, ENOSPC or another error from a write, and a short write that
// writes only the first bytes and reports how many.
//
// Mounting needs root (or CAP_SYS_ADMIN) and /dev/fuse: the mount(2)
// system call is made directly, so neither fusermount nor libfuse is
// needed.
//
// # The power-loss tests
//
// The tests of this module re-run the test binary as children that open a
// snapid Generator on the mount and print each id once Next returned; the
// parent cuts the power at a random moment, checks the files and starts new
// children. The registry, when a test uses one, is registrytest's in-memory
// Registry kept by the parent and reached by the children over net/rpc
// (TestRPCRegistry runs the conformance suite on that path): it is not on
// the disk that loses power, so it survives every cut, as Cassandra on
// other machines would. The owner, mark, presence and session files are on
// the mount. A cut rebuilds the mount's files with new inode numbers,
// which the host's record of a name would refuse as a replaced counter (a
// real file system keeps them), so each boot of the simulated host, the
// children of one round, has a place of records of its own, off the mount.
//
//   - TestPowerCut: three children (one to three goroutines each) per
//     round, in strict and block mode, with and without the registry, with
//     sync on and off, in the name, decimal and striped forms: no id is
//     returned twice across all rounds, and after each cut the counter is
//     valid and, with sync on, not below any id returned.
//   - TestPowerCutCreation: cuts in the first milliseconds of a child that
//     calls Init, then Open on a new counter: a counter that is there is
//     valid and not below Init's value once Init returned, nor below any
//     id returned, and the next Open issues above all of it.
//   - TestPowerCutSyncOff: with sync off and no registry, ids are returned
//     again after cuts (the file system does lose data, so the tests above
//     can fail); with the registry, none are.
//   - TestPowerCutSequence: processes of one host take numbers of a
//     sequence from its lease file, with small blocks and leases; no number
//     is returned twice across cuts, the lease file is never corrupt, and a
//     lease is carried over a clean close only when the file is exactly as
//     recorded.
//   - TestFailedUpdate, TestFailedCreation: EIO from fdatasync, ENOSPC and
//     a short write on an update, EIO from the temporary file's fsync or
//     the directory's at creation: the call fails with a FileError naming
//     the file and the operation, returns no number, and the next numbers,
//     also after a cut, are above every number returned.
//   - TestHeartbeatProcesses: four processes of one host; the heartbeat's
//     holder is stopped, killed and let exit in turn, and another live
//     process holds the role within an interval each time.
//
// bash scripts/test.sh --power runs this module's vet, staticcheck and
// tests alone (as root, with /dev/fuse).
//
// A module of its own (so that snapid's module does not require go-fuse).
// Imports: go-fuse and x/sys; its tests import snapid and registrytest.
// Nothing imports it but its own tests.
package powerfs
