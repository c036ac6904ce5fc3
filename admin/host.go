package admin

import (
	"context"
	"fmt"

	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// CounterSize is the size of a counter file: 8 bytes.
const CounterSize = engine.CounterSize

// HostFiles is what ReadHostFiles found beside a counter and in the
// host's records.
type HostFiles = engine.HostFiles

// Init makes sure the counter file at path exists and that the next number
// it issues is at least next (next >= 1): it creates the file if it is
// missing and raises a lower counter. It returns the counter's value as the
// call found it under the lock: for a file it created, that is next-1. A
// counter already past next-1 is left alone and reported with ErrLowered;
// use Repair to lower it.
func Init(path string, next uint64, opts ...Option) (before uint64, err error) {
	return engine.Init(path, next, opts...)
}

// InitContext is Init waiting for the counter's lock no longer than ctx
// allows: past it, the error wraps ErrLocked, names the process holding the
// lock, and the counter is left as it was.
func InitContext(ctx context.Context, path string, next uint64, opts ...Option) (before uint64, err error) {
	return engine.InitContext(ctx, path, next, opts...)
}

// Repair rewrites the counter file at path, whatever it holds, so that the
// next number is next: it is the only operation that may lower a counter,
// and the only one that accepts a corrupt file. It writes in place under the
// lock (the file is never replaced), truncates the file to 8 bytes and syncs
// it always. It returns up to 64 bytes of what the file held
// before, for the operator's record. Numbers issued before and at or above
// next will be issued again: only repair with a floor you know to be above
// every number issued.
func Repair(path string, next uint64, opts ...Option) (previous []byte, err error) {
	return engine.Repair(path, next, opts...)
}

// RepairContext is Repair waiting for the host's gate and the counter's lock
// no longer than ctx allows: past it, the error wraps ErrLocked, names the
// process holding the lock, and the counter is left as it was.
func RepairContext(ctx context.Context, path string, next uint64, opts ...Option) (previous []byte, err error) {
	return engine.RepairContext(ctx, path, next, opts...)
}

// ReadCounter returns the last issued number of the counter file at path,
// read under the lock. It never creates the file.
func ReadCounter(path string, opts ...Option) (uint64, error) {
	return engine.ReadCounter(path, opts...)
}

// ReadCounterContext is ReadCounter waiting for the counter's lock no longer
// than ctx allows: past it, the error wraps ErrLocked and names the process
// holding the lock.
func ReadCounterContext(ctx context.Context, path string, opts ...Option) (uint64, error) {
	return engine.ReadCounterContext(ctx, path, opts...)
}

// DecodeCounter decodes the content of a counter file. Anything but exactly
// 8 bytes is an error wrapping ErrCorrupt; in particular an empty or short
// file is never read as 0.
func DecodeCounter(b []byte) (uint64, error) {
	return engine.DecodeCounter(b)
}

// EncodeCounter returns the on-disk form of a counter whose last issued
// number is v: 8 bytes, unsigned little-endian (the bytes of Snap!'s
// counter.u64 on x86).
func EncodeCounter(v uint64) [CounterSize]byte {
	return engine.EncodeCounter(v)
}

// CheckBindingDir checks a directory given for name bindings (by
// WithBindingDir or SNAPID_BINDING_DIR): an absolute path, and not the
// filesystem root (the bindings and their lock would be written among the
// system's top-level directories). The error says what is wrong, for the
// caller to name where the value came from.
func CheckBindingDir(dir string) error {
	return engine.CheckBindingDir(dir)
}

// ReadHostFiles reads the owner, mark and session files beside the counter
// at counterPath, and the name the host's records (WithBindingDir names
// their place) give that counter and whether it was released. A missing file
// is reported as absent; a damaged one is an error that matches ErrCorrupt
// naming the file. It changes nothing.
func ReadHostFiles(counterPath string, opts ...Option) (HostFiles, error) {
	return engine.ReadHostFiles(counterPath, opts...)
}

// ReadMark returns the reserved-up-to mark this host keeps beside the
// counter file at counterPath (the highest number the registry lets it
// issue), and false if the counter has never been used with a registry.
func ReadMark(counterPath string) (mark uint64, ok bool, err error) {
	return engine.ReadMark(counterPath)
}

// ReadNodeNumber returns the node name and number (and the cluster's stride,
// 0 if not recorded) a registry gave a name of the counter at counterPath,
// as the host's record of that name keeps them (WithBindingDir names the
// place of records); ok is false if there is none. Only records that speak
// for the counter count ; a name still in use is preferred to one released
// with the counter.
func ReadNodeNumber(counterPath string, opts ...Option) (name string, number, stride uint64, ok bool, err error) {
	return engine.ReadNodeNumber(counterPath, opts...)
}

// ReadLeaseFile returns what the lease file of sequence beside the counter
// at counterPath holds: the current range, the position in it and the next
// range; ok is false if there is no file. It takes the file's lock,
// waiting for it no longer than the default registry timeout (ErrLocked).
func ReadLeaseFile(counterPath, sequence string) (cur, ahead registry.SequenceLease, pos uint64, ok bool, err error) {
	return engine.ReadLeaseFile(counterPath, sequence)
}

// OwnerToken returns the owner token stored beside the counter file at
// counterPath (in counterPath+".owner"). A counter that never used a
// registry has none: the error then wraps fs.ErrNotExist.
func OwnerToken(counterPath string, opts ...Option) (string, error) {
	return engine.OwnerToken(counterPath, opts...)
}

// Release gives up the node name held in the registry by the counter file at
// counterPath, recording the last number this host may have issued (the
// counter's value, or the registry's mark if that is higher, as after a
// crash), so that whoever takes the name over continues above it, in r.
// It refuses while a process on this host uses the counter with the
// registry, and changes nothing then. After Release, Open with a registry
// refuses the name on this host (snapid.ErrReleased) until it is claimed
// again with snapid.RegistryConfig.Reclaim (snapctl register): a routine
// restart must not take back a name released for another host.
func Release(ctx context.Context, r registry.Registry, counterPath, name string, opts ...Option) (final uint64, err error) {
	if r == nil {
		return 0, fmt.Errorf("snapid: %w: admin.Release needs the registry that holds the name", engine.ErrInvalidOption)
	}
	return engine.Release(ctx, counterPath, name, append(opts[:len(opts):len(opts)], engine.WithRegistry(r))...)
}

// ForceRelease releases name on behalf of a holder that is gone for good (a
// dead host that cannot run Release), recording as the last issued number
// the higher of the holder's reserved mark and next-1, so that the next
// holder starts at next or above. It is conditional on the holder read: if
// the row changes meanwhile, nothing is changed and an error is returned.
func ForceRelease(ctx context.Context, r registry.Registry, name string, next uint64) (final uint64, err error) {
	return engine.ForceRelease(ctx, r, name, next)
}

// ErrInUse is returned by operations that need every process of the host
// to have stopped using the counter (Release, Repair).
var ErrInUse = engine.ErrInUse

// ErrLowered is returned by Init when the counter is already past the
// number asked for: Init never lowers a counter (Repair does).
var ErrLowered = engine.ErrLowered
