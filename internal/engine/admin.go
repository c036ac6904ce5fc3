package engine

import (
	"context"
	"fmt"
	"os"

	"github.com/gofrs/flock"

	"github.com/snapid/snapid/internal/claim"
	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// ReadCounter returns the last issued number of the counter file at path,
// read under the lock. It never creates the file.
func ReadCounter(path string, opts ...Option) (uint64, error) {
	return ReadCounterContext(context.Background(), path, opts...)
}

// ReadCounterContext is ReadCounter waiting for the counter's lock no
// longer than ctx allows: past it, the error wraps ErrLocked and names the
// process holding the lock.
func ReadCounterContext(ctx context.Context, path string, opts ...Option) (uint64, error) {
	path = absPath(path)
	o, err := buildOptions(opts)
	if err != nil {
		return 0, err
	}
	if err := o.refuseOwner("ReadCounter"); err != nil {
		return 0, err
	}
	c, err := openReadOnly(path, &o)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.ReadContext(ctx)
}

// Init makes sure the counter file at path exists and that the next number
// it issues is at least next (next >= 1): it creates the file if it is
// missing and raises a lower counter. It returns the counter's value as the
// call found it under the lock: for a file it created, that is next-1. A counter already past next-1
// is left alone and reported with ErrLowered; use Repair to lower it.
func Init(path string, next uint64, opts ...Option) (before uint64, err error) {
	return InitContext(context.Background(), path, next, opts...)
}

// InitContext is Init waiting for the counter's lock no longer than ctx
// allows: past it, the error wraps ErrLocked, names the process holding
// the lock, and the counter is left as it was.
func InitContext(ctx context.Context, path string, next uint64, opts ...Option) (before uint64, err error) {
	path = absPath(path)
	if next == 0 {
		return 0, fmt.Errorf("snapid: %w: the first number is 1, so the next number cannot be 0", ErrInvalidOption)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return 0, err
	}
	o.initDir = true
	if _, err := createIfMissing(path, next-1, &o); err != nil {
		return 0, err
	}
	// An operator's raise lasts whatever sync the programs run with: a
	// power cut taking it would bring back what it raised the counter
	// past (Repair does the same).
	o.sync = true
	c, err := openExisting(path, &o)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	err = c.WithLockContext(ctx, func() error {
		before, err = c.Load()
		switch {
		case err != nil:
			return err
		case before > next-1 && before == MaxNumber:
			return &FileError{Op: "init", Path: path, Err: fmt.Errorf(
				"%w: it has issued up to %d, the last number there is: it is used up (%w)", ErrLowered, before, ErrExhausted)}
		case before > next-1:
			return &FileError{Op: "init", Path: path, Err: fmt.Errorf(
				"%w: it has issued up to %d, so the next number is %d, not %d", ErrLowered, before, before+1, next)}
		case before < next-1:
			if err := c.Store(next - 1); err != nil {
				return err
			}
		}
		return c.giveTo(o.owner)
	})
	return before, err
}

// giveTo gives the counter file to ow (nil: nothing to do), the caller
// holding its lock: on the descriptor c opened and checked, after checking
// again on that descriptor that it is a regular file with one name (no
// hard link another user made to it since) and a trusted owner
// (statefile.CheckOwner), never by path (see WithOwner).
func (c *counterFile) giveTo(ow *fileOwner) error {
	if ow == nil {
		return nil
	}
	st, err := statefile.CheckRegular(c.Fd())
	if err == nil {
		err = statefile.CheckOwner(c.Path(), st)
	}
	if err != nil {
		return &FileError{Op: "chown", Path: c.Path(), Err: classifyOpenError(err)}
	}
	if err := ignoringEINTR(func() error { return unix.Fchown(c.Fd(), ow.uid, ow.gid) }); err != nil {
		return &FileError{Op: "chown", Path: c.Path(), Err: fmt.Errorf("giving the counter to uid %d, gid %d: %w", ow.uid, ow.gid, err)}
	}
	return nil
}

// Repair rewrites the counter file at path, whatever it holds, so that the
// next number is next: it is the only operation that may lower a counter,
// and the only one that accepts a corrupt file. It writes in place under
// the lock (the file is never replaced), truncates the file to 8 bytes and
// syncs it whatever WithSync says. It returns up to 64 bytes of what the
// file held before, for the operator's record. Numbers issued before and
// at or above next will be issued again: only repair with a floor you
// know to be above every number issued.
func Repair(path string, next uint64, opts ...Option) (previous []byte, err error) {
	return RepairContext(context.Background(), path, next, opts...)
}

// RepairContext is Repair waiting for the host's gate and the counter's
// lock no longer than ctx allows: past it, the error wraps ErrLocked,
// names the process holding the lock, and the counter is left as it was.
func RepairContext(ctx context.Context, path string, next uint64, opts ...Option) (previous []byte, err error) {
	path = absPath(path)
	if next == 0 {
		return nil, fmt.Errorf("snapid: %w: the first number is 1, so the next number cannot be 0", ErrInvalidOption)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	release, err := refuseIfInUse(ctx, path, &o)
	if err != nil {
		return nil, err
	}
	defer release()
	o.sync = true
	c, err := openExisting(path, &o)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	err = c.WithLockContext(ctx, func() error {
		var err error
		if previous, err = c.Rewrite(next - 1); err != nil {
			return err
		}
		// The host's records of the counter follow it down: a repair is
		// the one lowering they must not refuse.
		if err := lowerRecords(ctx, c, next-1, &o); err != nil {
			return err
		}
		return c.giveTo(o.owner)
	})
	return previous, err
}

// refuseIfInUse returns ErrInUse if a process uses the counter at path
// with a registry (it holds the presence lock beside it). Otherwise it
// returns with the host's gate held, so that no such process starts until
// release is called. Processes without a registry hold no such lock: in
// strict mode a repaired counter below what they saw is raised back above
// it by their next update, and a mark the repair lowered under them is
// written again before they pass it (hoststate.Hold.Check); in block mode the
// rest of a block held in memory is above anything the counter then says,
// so the documented procedure stops the host's programs first.
func refuseIfInUse(ctx context.Context, path string, o *options) (release func(), err error) {
	release = func() {}
	presence := path + presenceSuffix
	if _, err := os.Lstat(presence); err != nil {
		return release, nil
	}
	// Under the gate, which processes take to start and to close, so that
	// a closing process (holding the presence lock exclusively for a
	// moment) is not taken for none, and none starts meanwhile.
	if _, err := os.Lstat(path + ownerSuffix); err == nil {
		gate := flock.New(path+ownerSuffix, flock.SetFlag(openFlags(o.followSymlinks)))
		if err := claim.LockGateFile(ctx, gate); err != nil {
			return release, err
		}
		release = func() { gate.Unlock() }
	}
	l := flock.New(presence, flock.SetFlag(openFlags(o.followSymlinks)))
	ok, err := l.TryLock()
	if err != nil {
		release()
		return func() {}, &FileError{Op: "lock", Path: presence, Err: err}
	}
	if !ok {
		release()
		return func() {}, &FileError{Op: "repair", Path: path, Err: fmt.Errorf("%w: stop the programs using it first", ErrInUse)}
	}
	l.Unlock()
	return release, nil
}
