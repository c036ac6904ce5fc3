package snapid

// The names below are those of package internal/engine, where the
// library's code lives.

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/internal/idform"
)

type (
	// FileError records an error on the counter file and the path it concerns
	// (for a file beside the counter, Counter names the counter, which its
	// message names first). Its Unwrap method returns the cause, so
	// errors.Is(err, ErrCorrupt) and errors.Is(err, fs.ErrNotExist) work
	// through it.
	FileError = errs.FileError
	// Format is the form of the ids a Generator hands out (Config.Form). Every
	// form carries the counter's number; the numeric forms carry the node's
	// number instead of its name (see the form's NodeNumber and NumberRegistry).
	//
	// 	form     id               example   an integer?  fits
	// 	name     <name>-<number>  web_1-91  no           any number up to 2^64-1
	// 	decimal  <node>.<number>  123.91    no (a        any number up to 2^64-1
	// 	                                    decimal)     not ending in 0
	// 	striped  number×S+node    9123      yes          the bound (the form's MaxID)
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
	// Its method String gives the form's name: "name", "decimal" or "striped".
	Format = idform.Format
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
	ID = idform.ID
	// RegistryCalls counts one kind of registry call with one outcome.
	RegistryCalls = engine.RegistryCalls
	// RegistryStats describes a Generator's calls to its registry.
	RegistryStats = engine.RegistryStats
	// ReservationStatus is the host's reservation as a Generator sees it,
	// read from the files beside the counter.
	ReservationStatus = engine.ReservationStatus
	// SequenceExhaustedError is a sequence lease that cannot be had (see
	// registry.SequenceExhaustedError).
	SequenceExhaustedError = errs.SequenceExhaustedError
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
	FormatDecimal = idform.FormatDecimal
	// FormatName is "<name>-<number>", the default.
	FormatName = idform.FormatName
	// FormatStriped is number × stride + node number, one integer.
	FormatStriped = idform.FormatStriped
	// MaxSafeInteger is JavaScript's Number.MAX_SAFE_INTEGER, the largest
	// integer a float64 holds exactly: Striped{MaxID: MaxSafeInteger} for ids
	// a browser reads.
	MaxSafeInteger = idform.MaxSafeInteger
)

var (
	// ErrClosed is returned by a Generator after Close.
	ErrClosed = errs.ErrClosed
	// ErrCorrupt is returned for a state file that is not as this
	// version writes it: a counter file whose size is not exactly 8 bytes,
	// or a file beside it (owner token, mark, session, sequence lease), the
	// host's record of a name, or a file an earlier version kept. The
	// error is a *FileError naming the file, and says what is wrong with
	// it. The file is left exactly as it was, and nothing is written
	// anywhere, the registry included.
	ErrCorrupt = errs.ErrCorrupt
	// ErrExhausted is returned when the counter cannot advance without
	// passing 2^64-1, and by a sequence lease that cannot be had: the
	// host's data centre has fewer consecutive numbers left than asked for,
	// in its ranges and in what GLOBAL has not handed out yet. For a
	// sequence the error is a *SequenceExhaustedError saying how many are
	// left where: other hosts' leases and other data centres' ranges may
	// still hold numbers. Neither ever wraps.
	ErrExhausted = errs.ErrExhausted
	// ErrFormChanged is returned by a striped Generator's calls once
	// another Generator opened its counter with another stride or node
	// number (and raised the counter past this one's ids): striped ids of
	// two forms meet, so two never issue from one counter at once.
	// Nothing is issued; open the counter again with its form.
	ErrFormChanged = errs.ErrFormChanged
	// ErrInvalidID is returned by ParseID for a string that is not an id
	// in any form (see Format).
	ErrInvalidID = errs.ErrInvalidID
	// ErrInvalidName is returned for a node name that breaks the rule
	// ^[a-z_][a-z0-9_]{0,62}$.
	ErrInvalidName = errs.ErrInvalidName
	// ErrInvalidOption is returned by Open for an option value that cannot
	// be used (for example Block{Size: 0}).
	ErrInvalidOption = errs.ErrInvalidOption
	// ErrLocked is returned when a lock on a state file (the counter, the
	// name bindings' lock) was held by another process for as long as the
	// caller's context allowed; the error names the holder and wraps the
	// context's error.
	ErrLocked = errs.ErrLocked
	// ErrNameBound is returned by Open when the host's record of the name
	// (in /var/lib/snapid/records, or see Config.BindingDir) names another counter file, or a counter
	// that is not there now or was replaced: two counter files under one
	// name would issue the same ids.
	ErrNameBound = errs.ErrNameBound
	// ErrNameMismatch is returned by Open when other processes of the host
	// use the counter under another node name: one counter file serves
	// one name. The error names the name the counter is in use under.
	ErrNameMismatch = errs.ErrNameMismatch
	// ErrNameTaken is returned when the node name is held in the registry
	// by another owner.
	ErrNameTaken = errs.ErrNameTaken
	// ErrNoSequence is returned for a sequence that was never created
	// (see admin.CreateSequence).
	ErrNoSequence = errs.ErrNoSequence
	// ErrNumberBound is returned by Open without a registry when the host
	// uses the node number (the form's NodeNumber) under another node name that
	// is in use: two names under one number hand out the same numeric ids.
	ErrNumberBound = errs.ErrNumberBound
	// ErrNumberMismatch is returned by Open when the node number the
	// registry holds for the name is not the one the host's record of the
	// name holds or given with the form's NodeNumber: ids of two numbers under
	// one name, or one number under two names, could meet. Nothing is
	// issued.
	ErrNumberMismatch = errs.ErrNumberMismatch
	// ErrProbableClone is returned by a claim that carries the right owner
	// token from another machine while the row is active and was seen
	// recently: most likely a copy of a counter directory in use elsewhere.
	ErrProbableClone = errs.ErrProbableClone
	// ErrRegistry wraps failures to reach or use the registry.
	ErrRegistry = errs.ErrRegistry
	// ErrReleased is returned by Open with a registry on a host that
	// released the name (admin.Release, snapctl release): the host's processes
	// refuse it until it is claimed again on purpose (RegistryConfig.Reclaim, snapctl
	// register), so that a routine start cannot take back a name meant for
	// another host.
	ErrReleased = errs.ErrReleased
	// ErrReplaced is returned when the counter file was removed or replaced
	// by another file while a Generator had it open. A replaced file would
	// leave lockers of the old file unprotected, so the Generator stops.
	ErrReplaced = errs.ErrReplaced
	// ErrReservationExhausted is returned when every number the registry
	// reserved for this host is used and no more could be reserved (the
	// registry is unreachable or refused).
	ErrReservationExhausted = errs.ErrReservationExhausted
	// ErrRolledBack is returned by Open when the counter file holds less
	// than the host's record of its name says it reached: it was restored
	// from a backup, copied over or zeroed. Nothing is issued from it.
	ErrRolledBack = errs.ErrRolledBack
	// ErrSequenceShort is returned by Sequence.NextN and
	// SequenceRegistry.LeaseSequence when numbers of the sequence are left
	// for the host's data centre, but fewer consecutive ones than asked
	// for: a *SequenceExhaustedError saying how many (ask for fewer). It
	// does not match ErrExhausted, which means none are left.
	ErrSequenceShort = errs.ErrSequenceShort
	// ErrSequencesUnsupported is returned when the registry does not
	// implement SequenceRegistry, or a Generator has no registry.
	ErrSequencesUnsupported = errs.ErrSequencesUnsupported
	// ErrStrideMismatch is returned when the stride given for
	// FormatStriped is not the one the cluster's registry records (or the
	// host's record of the name, or the host's claim): striped ids of two
	// strides could meet. Nothing is changed.
	ErrStrideMismatch = errs.ErrStrideMismatch
	// ErrUntrusted is returned for a state file, or a directory holding
	// one, that another user could have planted, redirected or could
	// replace, and nothing is read from it or written: a symbolic link at
	// the counter path (unless Config.FollowSymlinks); a counter path that
	// is not a regular file; the counter, or a file beside it, owned by
	// another user who does not own a directory holding it that only its
	// owner can write (in /tmp, say), or with more than one name (a hard
	// link); a directory of the host's records, or one above it, owned by
	// an untrusted user, a symbolic link, or writable by other users; the
	// counter's directory, or one above it, writable by others without
	// being sticky. The error names the file or directory, its owner, and
	// says which.
	ErrUntrusted = errs.ErrUntrusted
)

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
// a symbolic link unless Config.FollowSymlinks), and the host's record of the
// name, which every Open keeps, with a registry or without: a name the host
// issued from another counter is refused (ErrNameBound), as is a counter
// below the floor the record keeps (ErrRolledBack; with a registry it is
// raised instead). A damaged state file is ErrCorrupt in a FileError naming
// it. A failed Open leaves the counter and the record as they were: what
// a first Open the registry refuses made (the counter, the record, the
// files beside the counter) is removed, unless another program of the host
// uses it meanwhile. With a registry, a failure after the claim was made
// (or may have been) leaves the counter this call created and the files
// beside it: the registry's row may name them.
//
// With Config.Registry, Open also claims the name in the registry before it
// returns (see OpenContext), giving the claim the registry timeout; the
// registry refuses a second counter file under the name (ErrNameTaken).
func Open(counterPath string, name string, cfg Config) (*Generator, error) {
	return OpenContext(context.Background(), counterPath, name, cfg)
}

// OpenContext is Open with a context for the registry claim. With
// Config.Registry it claims the name in the registry before it returns: another
// owner's active claim is ErrNameTaken and the Generator is not returned;
// the first process of the host raises the counter to the registry's
// reserved mark and reserves the first step. The other processes of the
// host join its claim; one under another name than the claim's is refused
// with ErrNameMismatch, whether the registry can be reached or not. Only
// the claim uses ctx.
func OpenContext(ctx context.Context, counterPath string, name string, cfg Config) (*Generator, error) {
	opts, err := cfg.options()
	if err != nil {
		return nil, err
	}
	if cfg.BindingDir != "" {
		if abs, aerr := filepath.Abs(counterPath); aerr == nil && counterPath != "" {
			if err := engine.CheckBindingDirFor(abs, cfg.BindingDir); err != nil {
				return nil, fmt.Errorf("snapid: %w: Config.BindingDir %q %v: the host's records of names need a directory of their own", ErrInvalidOption, cfg.BindingDir, err)
			}
		}
	}
	return wrap(engine.OpenContext(ctx, counterPath, name, opts...))
}

// ParseID parses an id in any form: "<name>-<number>" (the name must be
// a valid node name), "<node number>.<number>" (the decimal form; a number
// ending in 0 is never issued in it: 1.50 would equal 1.5 as a decimal)
// or one integer (the striped form: Value set; Unstripe splits it with
// the cluster's stride). Numbers must be decimal, from 1 to 2^64-1 (node
// numbers to registry.MaxNodeNumber), with no sign, no leading zeros and nothing
// around them. Anything else is an error wrapping ErrInvalidID.
func ParseID(s string) (ID, error) { return idform.ParseID(s) }

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
