package snapid

// The names below are those of package internal/engine, where the
// library's code lives.

import (
	"context"
	"io/fs"
	"log/slog"
	"time"

	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

type (
	// FileError records an error on the counter file and the path it concerns.
	// Its Unwrap method returns the cause, so errors.Is(err, ErrCorrupt) and
	// errors.Is(err, fs.ErrNotExist) work through it.
	FileError = engine.FileError
	// Format is the form of the ids a Generator hands out (WithFormat). Every
	// form carries the counter's number; the numeric forms carry the node's
	// number instead of its name (see WithNodeNumber and NumberRegistry).
	//
	// 	form     id               example   an integer?  fits
	// 	name     <name>-<number>  web_1-91  no           any number up to 2^64-1
	// 	decimal  <node>.<number>  123.91    no (a        any number up to 2^64-1
	// 	                                    decimal)     not ending in 0
	// 	striped  number×S+node    9123      yes          the bound (WithMaxID)
	//
	// Decimal is Snap!'s numeric form. As decimal numbers, 123.9 and 123.90
	// are equal although the strings differ, and spreadsheets, JSON parsers
	// and databases read these ids as numbers: so the decimal form never hands
	// out a counter number ending in 0 (those are skipped, a gap of one number
	// in ten), and no two of its ids are equal as decimals. Striped ids are
	// one integer, number × stride + node number, with the stride S fixed for
	// the cluster (NumberRegistry.SetStride) and every node number below it:
	// two nodes' ids never meet, and each node's ids increase by S.
	//
	// Its method String gives the form's name, as ParseFormat reads it.
	Format = engine.Format
	// Histogram is a distribution of observations in fixed buckets.
	Histogram = engine.Histogram
	// HostInfo identifies the machine in the registry.
	HostInfo = engine.HostInfo
	// ID is a parsed id, in one of the forms (see Format): "<name>-<number>",
	// "<node number>.<number>" or one integer (striped).
	//
	// Ids do not sort as plain strings ("a-10" < "a-9"); use Compare, which
	// orders by form, then by name or node number, then numerically. ID
	// marshals to JSON as its string form, so numbers above 2^53 survive
	// JavaScript clients.
	//
	// Its methods (their documentation is internal/engine's ID's): String,
	// AppendTo, Compare, Unstripe, MarshalText, UnmarshalText.
	ID = engine.ID
	// An Option configures Open (and admin.Init, admin.Repair and
	// admin.ReadCounter).
	Option = engine.Option
	// RegistryCalls counts one kind of registry call with one outcome.
	RegistryCalls = engine.RegistryCalls
	// RegistryStats describes a Generator's calls to its registry.
	RegistryStats = engine.RegistryStats
	// ReservationStatus is the host's reservation as a Generator sees it,
	// read from the files beside the counter.
	ReservationStatus = engine.ReservationStatus
	// SequenceExhaustedError is a sequence lease that cannot be had (see
	// registry.SequenceExhaustedError).
	SequenceExhaustedError = engine.SequenceExhaustedError
	// SequenceLeaseState is the host's lease of a sequence as the lease file
	// beside the counter holds it (shared by the host's processes). A range's
	// bounds are 0 when the file has no such range.
	SequenceLeaseState = engine.SequenceLeaseState
	// SequenceOption configures Generator.Sequence.
	SequenceOption = engine.SequenceOption
	// SequenceStats describes a Sequence's work in this process since it was
	// opened, for metrics (package github.com/snapid/snapid/prometheus) and
	// logs. The JSON names are stable.
	SequenceStats = engine.SequenceStats
	// Stats describes a Generator's work since Open, for metrics (package
	// github.com/snapid/snapid/prometheus turns it into Prometheus metrics)
	// and for logs. Field names carry their unit; the JSON names are stable.
	Stats = engine.Stats
)

const (
	// FormatDecimal is "<node number>.<number>", numbers ending in 0
	// skipped.
	FormatDecimal = engine.FormatDecimal
	// FormatName is "<name>-<number>", the default.
	FormatName = engine.FormatName
	// FormatStriped is number × stride + node number, one integer.
	FormatStriped = engine.FormatStriped
	// MaxSafeInteger is JavaScript's Number.MAX_SAFE_INTEGER, the largest
	// integer a float64 holds exactly: WithMaxID(MaxSafeInteger) for ids
	// a browser reads.
	MaxSafeInteger = engine.MaxSafeInteger
)

var (
	// ErrClosed is returned by a Generator after Close.
	ErrClosed = engine.ErrClosed
	// ErrCorrupt is returned for a state file that is not as this
	// version writes it: a counter file whose size is not exactly 8 bytes,
	// or a file beside it (owner token, mark, session, sequence lease), the
	// host's record of a name, or a file an earlier version kept. The
	// error is a *FileError naming the file, and says what is wrong with
	// it. The file is left exactly as it was, and nothing is written
	// anywhere, the registry included.
	ErrCorrupt = engine.ErrCorrupt
	// ErrExhausted is returned when the counter cannot advance without
	// passing 2^64-1, and by a sequence lease that cannot be had: the
	// host's data centre has fewer consecutive numbers left than asked for,
	// in its ranges and in what GLOBAL has not handed out yet. For a
	// sequence the error is a *SequenceExhaustedError saying how many are
	// left where: other hosts' leases and other data centres' ranges may
	// still hold numbers. Neither ever wraps.
	ErrExhausted = engine.ErrExhausted
	// ErrFormChanged is returned by a striped Generator's calls once
	// another Generator opened its counter with another stride or node
	// number (and raised the counter past this one's ids): striped ids of
	// two forms meet, so two never issue from one counter at once.
	// Nothing is issued; open the counter again with its form.
	ErrFormChanged = engine.ErrFormChanged
	// ErrInUse is returned by operations that need every process of the
	// host to have stopped using the counter (admin.Release, admin.Repair).
	ErrInUse = engine.ErrInUse
	// ErrInvalidID is returned by ParseID for a string that is not an id
	// in any form (see Format).
	ErrInvalidID = engine.ErrInvalidID
	// ErrInvalidName is returned for a node name that breaks the rule
	// ^[a-z_][a-z0-9_]{0,62}$.
	ErrInvalidName = engine.ErrInvalidName
	// ErrInvalidOption is returned by Open for an option value that cannot
	// be used (for example WithBlock(0)).
	ErrInvalidOption = engine.ErrInvalidOption
	// ErrLocked is returned when a lock on a state file (the counter, the
	// name bindings' lock) was held by another process for as long as the
	// caller's context allowed; the error names the holder and wraps the
	// context's error.
	ErrLocked = engine.ErrLocked
	// ErrNameBound is returned by Open when the host's record of the name
	// (in /var/lib/snapid/records, or see WithBindingDir) names another counter file, or a counter
	// that is not there now or was replaced: two counter files under one
	// name would issue the same ids.
	ErrNameBound = engine.ErrNameBound
	// ErrNameMismatch is returned by Open when other processes of the host
	// use the counter under another node name: one counter file serves
	// one name. The error names the name the counter is in use under.
	ErrNameMismatch = engine.ErrNameMismatch
	// ErrNameTaken is returned when the node name is held in the registry
	// by another owner.
	ErrNameTaken = engine.ErrNameTaken
	// ErrNoSequence is returned for a sequence that was never created
	// (see admin.CreateSequence).
	ErrNoSequence = engine.ErrNoSequence
	// ErrNotRegular is returned when the counter path names a directory,
	// a device, a FIFO or anything else that is not a regular file.
	ErrNotRegular = engine.ErrNotRegular
	// ErrNumberBound is returned by Open without a registry when the host
	// uses the node number (WithNodeNumber) under another node name that
	// is in use: two names under one number hand out the same numeric ids.
	ErrNumberBound = engine.ErrNumberBound
	// ErrNumberMismatch is returned by Open when the node number the
	// registry holds for the name is not the one the host's record of the
	// name holds or given with WithNodeNumber: ids of two numbers under
	// one name, or one number under two names, could meet. Nothing is
	// issued.
	ErrNumberMismatch = engine.ErrNumberMismatch
	// ErrProbableClone is returned by a claim that carries the right owner
	// token from another machine while the row is active and was seen
	// recently: most likely a copy of a counter directory in use elsewhere.
	ErrProbableClone = engine.ErrProbableClone
	// ErrRegistry wraps failures to reach or use the registry.
	ErrRegistry = engine.ErrRegistry
	// ErrReleased is returned by Open with a registry on a host that
	// released the name (admin.Release, snapctl release): the host's processes
	// refuse it until it is claimed again on purpose (WithReclaim, snapctl
	// register), so that a routine start cannot take back a name meant for
	// another host.
	ErrReleased = engine.ErrReleased
	// ErrReplaced is returned when the counter file was removed or replaced
	// by another file while a Generator had it open. A replaced file would
	// leave lockers of the old file unprotected, so the Generator stops.
	ErrReplaced = engine.ErrReplaced
	// ErrReservationExhausted is returned when every number the registry
	// reserved for this host is used and no more could be reserved (the
	// registry is unreachable or refused).
	ErrReservationExhausted = engine.ErrReservationExhausted
	// ErrRolledBack is returned by Open when the counter file holds less
	// than the host's record of its name says it reached: it was restored
	// from a backup, copied over or zeroed. Nothing is issued from it.
	ErrRolledBack = engine.ErrRolledBack
	// ErrSequenceShort is returned by Sequence.NextN and
	// SequenceRegistry.LeaseSequence when numbers of the sequence are left
	// for the host's data centre, but fewer consecutive ones than asked
	// for: a *SequenceExhaustedError saying how many (ask for fewer). It
	// does not match ErrExhausted, which means none are left.
	ErrSequenceShort = engine.ErrSequenceShort
	// ErrSequencesUnsupported is returned when the registry does not
	// implement SequenceRegistry, or a Generator has no registry.
	ErrSequencesUnsupported = engine.ErrSequencesUnsupported
	// ErrStrideMismatch is returned when the stride given for
	// FormatStriped is not the one the cluster's registry records (or the
	// host's record of the name, or the host's claim): striped ids of two
	// strides could meet. Nothing is changed.
	ErrStrideMismatch = engine.ErrStrideMismatch
	// ErrSymlink is returned when the counter path is a symbolic link and
	// WithFollowSymlinks(true) was not given.
	ErrSymlink = engine.ErrSymlink
	// ErrUntrustedDir is returned when a directory of name bindings, or
	// one above it, is owned by a user it cannot be trusted from, is a
	// symbolic link, or can be written by other users: they could replace
	// the bindings in it. It is also returned when the counter's own
	// directory, or one above it, can be written by users other than its
	// owner without being sticky: they could remove or swap the counter.
	// (A directory above the counter's owned by another user is
	// ErrUntrustedOwner.) The error names the directory and its owner.
	ErrUntrustedDir = engine.ErrUntrustedDir
	// ErrUntrustedOwner is returned when the counter file, or a file
	// beside it (.owner, .mark, .session, sequence leases), is
	// owned by a user other than the one running, and that user does not
	// own a directory holding it that only its owner can write: another
	// user could have planted or rewritten it (in /tmp, say). The error
	// names the owner. It is also returned for such a file with more than
	// one name (a hard link, which another user could have made to a file
	// of someone else's). Nothing is written.
	ErrUntrustedOwner = engine.ErrUntrustedOwner
)

// LocalHostInfo returns this machine's host name, a non-loopback address
// (empty if there is none) and machine id (from /etc/machine-id or
// /var/lib/dbus/machine-id, else "host:" followed by the host name).
func LocalHostInfo() HostInfo { return engine.LocalHostInfo() }

// NameFromHostname derives a node name from a host name the way Snap!
// does: cut at the first ".", replace every "-" by "_", lower-case. It
// returns the name and, when the result differs from h, a short description
// of what was changed (empty when h was already a valid name). What cannot be
// made valid by those three steps (an empty label, a leading digit, other
// characters, more than 63 characters) is refused with an error wrapping
// ErrInvalidName.
func NameFromHostname(h string) (name string, changed string, err error) {
	return engine.NameFromHostname(h)
}

// Open opens the counter file at counterPath for the node name, creating
// the file (last issued number 0, so the first id is "<name>-1") if it does
// not exist.
//
// Open validates everything before it issues anything: the name (see
// ValidateName), the options, the file (exactly 8 bytes, a regular file, not
// a symbolic link unless WithFollowSymlinks), and the host's record of the
// name, which every Open keeps, with a registry or without: a name the host
// issued from another counter is refused (ErrNameBound), as is a counter
// below the floor the record keeps (ErrRolledBack; with a registry it is
// raised instead). A damaged state file is ErrCorrupt in a FileError naming
// it. A failed Open leaves the counter and the record as they were, with
// one exception: with a registry, a failure after the claim was made (or
// may have been) leaves the counter file this call created (holding 0) and
// the files beside it, since programs without a registry may be issuing
// from it already.
//
// With WithRegistry, Open also claims the name in the registry before it
// returns (see OpenContext), giving the claim the registry timeout; the
// registry refuses a second counter file under the name (ErrNameTaken).
func Open(counterPath string, name string, opts ...Option) (*Generator, error) {
	return wrap(engine.Open(counterPath, name, opts...))
}

// OpenContext is Open with a context for the registry claim. With
// WithRegistry it claims the name in the registry before it returns: another
// owner's active claim is ErrNameTaken and the Generator is not returned;
// the first process of the host raises the counter to the registry's
// reserved mark and reserves the first step. The other processes of the
// host join its claim; one under another name than the claim's is refused
// with ErrNameMismatch, whether the registry can be reached or not. Only
// the claim uses ctx.
func OpenContext(ctx context.Context, counterPath string, name string, opts ...Option) (*Generator, error) {
	return wrap(engine.OpenContext(ctx, counterPath, name, opts...))
}

// ParseFormat parses "name", "decimal" or "striped".
func ParseFormat(s string) (Format, error) { return engine.ParseFormat(s) }

// ParseID parses an id in any form: "<name>-<number>" (the name must be
// a valid node name), "<node number>.<number>" (the decimal form; a number
// ending in 0 is never issued in it: 1.50 would equal 1.5 as a decimal)
// or one integer (the striped form: Value set; Unstripe splits it with
// the cluster's stride). Numbers must be decimal, from 1 to 2^64-1 (node
// numbers to registry.MaxNodeNumber), with no sign, no leading zeros and nothing
// around them. Anything else is an error wrapping ErrInvalidID.
func ParseID(s string) (ID, error) { return engine.ParseID(s) }

// SequenceBlock sets how many numbers the process takes from the host's
// lease file at a time (default 1,000): one flock, one
// 8-byte write and one fdatasync per block. A busy process takes larger
// blocks, up to the lease size. A process that exits
// leaves the rest of its block unused (a gap).
func SequenceBlock(n uint64) SequenceOption { return engine.SequenceBlock(n) }

// SequenceLeaseSize sets how many numbers the host leases from its data
// centre at a time (default 10,000). The rest of a lease is
// lost (a gap) when the host restarts after a crash; a clean restart
// carries it over. n is at most registry.MaxSequence/128: leases grow to 128×n
// while the host leases fast, and a lease is at most 2^63-1 numbers.
func SequenceLeaseSize(n uint64) SequenceOption { return engine.SequenceLeaseSize(n) }

// ValidateName reports whether s is a valid node name. The error wraps
// ErrInvalidName, says what is wrong and states the rule. A name is never
// altered to make it valid; see NameFromHostname for the one derivation
// snapid offers.
func ValidateName(s string) error { return engine.ValidateName(s) }

// WithBindingDir names the place of the host's records of node names for
// this Open (default /var/lib/snapid/records): an absolute path, created
// (mode 0700) if missing. Every program of a host must name the same
// place to protect the others. There is no turning the records off: a
// program that simulates several hosts on one machine (a test) gives
// each host a place of its own (a directory under t.TempDir()).
func WithBindingDir(dir string) Option { return engine.WithBindingDir(dir) }

// WithBlock turns on block mode: the Generator reserves n numbers at a time
// with one locked (and synced) update and serves them from memory. Numbers
// then increase per process, not host-wide, and a process that exits or
// crashes leaves the rest of its block unused (a gap, never a repeat).
// The next block is reserved in the background when half of the current one
// is used. n must be at least 1.
func WithBlock(n uint64) Option { return engine.WithBlock(n) }

// WithCPUShards, in block mode, serves numbers from small per-CPU runs
// taken from the block, so that throughput grows with the number of cores
// instead of every caller updating one shared counter. The price: numbers
// are still unique, but no longer increase within the process (callers on
// different cores interleave), and a few more are skipped (a run the
// runtime drops at a garbage collection, or left at Close, is a gap). It
// has no effect without WithBlock.
func WithCPUShards(on bool) Option { return engine.WithCPUShards(on) }

// WithCloneWindow sets how recently a holder must have been seen for a
// claim with its owner token from another machine to be refused as a
// probable clone (default 5 minutes). With a registry, Open refuses a
// window shorter than twice the heartbeat plus the registry timeout (see
// WithHeartbeat, WithRegistryTimeout), so that one lost heartbeat does not
// make a live holder look gone; 0 turns the check off. Every host should use
// the same heartbeat and window: the window is the claimant's, the
// heartbeat the holder's. The check compares the claimant's clock with the
// holder's last heartbeat, which can be an interval and seven eighths plus
// the registry timeout old while the holder runs: a claimant whose clock is
// ahead of the holder's by the window less that (2 min 52.5 s with the
// defaults, an eighth of the heartbeat at the smallest window) can take a
// live host's name. Keep the hosts' clocks within that (NTP does;
// `snapctl check-names` reports rows ahead of its clock).
func WithCloneWindow(d time.Duration) Option { return engine.WithCloneWindow(d) }

// WithFileMode sets the permission bits of a counter file the call creates,
// and of the files beside it (default 0600). It has no effect on an
// existing file. The owner must be able to read and write (0600 at
// least): a mode without them is refused, since the library could not
// use its own file.
func WithFileMode(mode fs.FileMode) Option { return engine.WithFileMode(mode) }

// WithFollowSymlinks lets the counter path be a symbolic link. By default a
// symbolic link at the counter path is refused with ErrSymlink, so that a
// link planted there cannot redirect writes to another file.
func WithFollowSymlinks(on bool) Option { return engine.WithFollowSymlinks(on) }

// WithFormat sets the form of the ids UniqueID, AppendUniqueID and NextID
// hand out (default FormatName). The numeric forms need a node number:
// with WithRegistry the registry's (NumberRegistry), otherwise
// WithNodeNumber; FormatStriped also a stride (the registry's, or
// WithStride). In FormatDecimal numbers ending in 0 are skipped (Next
// too), and NextN is refused (its range would hold some): NextIDsContext
// takes n decimal ids with one counter update.
func WithFormat(f Format) Option { return engine.WithFormat(f) }

// WithHeartbeat sets how often the host refreshes its claim's last-seen
// time in the registry (default 1 minute): one process of the host does
// it for all of them, and another takes over at its next poll (a quarter
// of the interval) when it exits or crashes. The clone window
// must be at least twice the heartbeat plus the registry timeout (see
// WithCloneWindow). Give the host's processes one interval.
func WithHeartbeat(d time.Duration) Option { return engine.WithHeartbeat(d) }

// WithHostInfo sets how this machine is described in the registry (default
// LocalHostInfo()).
func WithHostInfo(h HostInfo) Option { return engine.WithHostInfo(h) }

// WithLogger sets the logger for notices (a counter raised to the
// registry's mark, a background reservation that failed, a name binding
// moved). The default is slog.Default() as it is when Open is called, so
// that these notices reach the program's log unless it chooses otherwise;
// pass slog.New(slog.DiscardHandler) to silence them.
func WithLogger(l *slog.Logger) Option { return engine.WithLogger(l) }

// WithMaxID sets the largest id the Generator hands out: for FormatStriped
// the integer (default math.MaxInt64; MaxSafeInteger for JavaScript, math.MaxUint32
// for 32 bits), for the other forms the counter's number. Past it every
// call returns ErrExhausted; nothing ever overflows. max must be at least
// 1.
func WithMaxID(max uint64) Option { return engine.WithMaxID(max) }

// WithNodeNumber sets the node number the numeric forms carry (1 to
// registry.MaxNodeNumber). Without a registry it is how the number is given, and
// the host's records of names (see WithBindingDir) refuse one number
// under two names. With a registry the registry's number is used, and a
// different one given here is refused (ErrNumberMismatch).
func WithNodeNumber(n uint64) Option { return engine.WithNodeNumber(n) }

// WithOutageHorizon sizes each reservation step to at least what the host
// issued in the last d (default 2 hours; counted over d, not
// extrapolated from a shorter burst), so that a
// registry outage of about d/2 (the next step is reserved when half of the
// current one is used) does not stop issuance, whatever the rate. A crash
// skips at most one step, so a longer horizon means larger gaps after a
// crash at high rates.
func WithOutageHorizon(d time.Duration) Option { return engine.WithOutageHorizon(d) }

// WithOwner makes admin.Init and admin.Repair give the counter file to the user uid
// and the group gid (-1 leaves one unchanged; changing the user needs
// root): an administrator running as root makes the counter of a service
// that runs as another user. The file is given through the descriptor
// admin.Init or admin.Repair opened, checked and locked, right after checking again
// on that descriptor that it is a regular file with one name whose owner
// is trusted (see admin.Init), never by path: a user who can rename entries in
// the counter's directory cannot have another file (a hard link to a file
// of root's) given away in its place. Open and admin.ReadCounter refuse it
// (ErrInvalidOption).
func WithOwner(uid int, gid int) Option { return engine.WithOwner(uid, gid) }

// WithReclaim lets Open claim a name that this host released before
// (admin.Release, snapctl release); without it, Open refuses such a name with
// ErrReleased. snapctl register uses it.
func WithReclaim() Option { return engine.WithReclaim() }

// WithRegistry makes Open claim the node name in r before it issues
// anything, and bounds issuance by the registry's reserved-up-to mark.
// Without it the Generator is standalone: the name is not checked against
// other hosts.
func WithRegistry(r registry.Registry) Option { return engine.WithRegistry(r) }

// WithRegistryTimeout bounds each registry call the Generator makes on its
// own (extensions, heartbeats, the return of the reservation at Close);
// default 15 seconds.
func WithRegistryTimeout(d time.Duration) Option { return engine.WithRegistryTimeout(d) }

// WithReserveStep sets the least number of numbers the host reserves in
// the registry at a time (default 1,000 numbers; more at high rates,
// see WithOutageHorizon). The next step is reserved in the background when
// half of the current one is used.
func WithReserveStep(n uint64) Option { return engine.WithReserveStep(n) }

// WithStride sets the stride of FormatStriped (2 to registry.MaxNodeNumber+1):
// ids are number × stride + node number. Every host of a cluster must use
// the same stride; with a registry it is the one recorded there
// (NumberRegistry.SetStride), and a different one given here is refused.
func WithStride(s uint64) Option { return engine.WithStride(s) }

// WithSync turns fdatasync after each counter update on (the default) or
// off. With sync on, a number is handed out only after the counter value
// covering it is on stable storage, so ids survive an OS crash or a power
// loss. With sync off the counter is synced only once a step of numbers,
// when the host's record of the name is written ahead of it: after a
// crash of the host the first start raises the counter to the record's
// mark, so a power loss leaves a gap of up to a step (1024), never a
// repeat; sequences' leases are not covered so (they need sync on).
func WithSync(on bool) Option { return engine.WithSync(on) }

// WithTakeover lets Open take the name over from an active holder of
// another owner, which is only right when that holder is known to be gone
// for good. The counter starts above floor and above the old holder's
// reserved mark. A floor of 2^64-1 leaves no number to issue (the
// name would be exhausted for every later host) and is refused with
// ErrInvalidOption.
func WithTakeover(floor uint64) Option { return engine.WithTakeover(floor) }
