package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/snapid/snapid/internal/claim"
	"github.com/snapid/snapid/registry"
)

// Release gives up the node name held in the registry by the counter file
// at counterPath, recording the last number this host may have issued (the
// counter's value, or the registry's mark if that is higher, as after a
// crash), so that whoever takes the name over continues above it. The
// registry is given with WithRegistry. It refuses while a process on this
// host uses the counter with the registry, and changes nothing then.
// After Release, Open with a registry refuses the name on this host
// (ErrReleased) until it is claimed again with WithReclaim (snapctl
// register): a routine restart must not take back a name released for
// another host.
func Release(ctx context.Context, counterPath, name string, opts ...Option) (final uint64, err error) {
	counterPath, o, err := releaseOptions(counterPath, name, opts)
	if err != nil {
		return 0, err
	}
	c, err := openExisting(counterPath, &o)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	owner, err := claim.LoadOwner(counterPath, false, o.claimFiles())
	if err != nil {
		return 0, err
	}
	hs, err := claim.OpenFiles(counterPath, o.claimFiles())
	if err != nil {
		return 0, err
	}
	defer hs.Close()
	if err := hs.LockGate(ctx); err != nil {
		return 0, err
	}
	defer hs.Gate().Unlock()
	alone, err := hs.Presence().TryLock()
	if err != nil {
		return 0, &FileError{Op: "lock", Path: hs.Presence().Path(), Err: err}
	}
	if !alone {
		return 0, fmt.Errorf("snapid: cannot release %q: %w (%s); stop it first", name, ErrInUse, counterPath)
	}
	defer hs.Presence().Unlock()
	// Programs without the registry show only in the host's record.
	recMark, done, err := holdRecordAlone(ctx, c, name, &o)
	if err != nil {
		return 0, err
	}
	defer done()
	h, err := o.reg.registry.Get(ctx, name)
	if err != nil {
		return 0, err
	}
	if h.Owner != owner {
		return 0, fmt.Errorf("snapid: %w: %q is not held by this counter (%s); use a forced release from the registry only if that holder is gone", ErrNameTaken, name, h)
	}
	return releaseHeld(ctx, c, counterPath, name, owner, h, recMark, &o)
}

// releaseOptions checks Release's name and options, and returns the
// counter's absolute path and the options.
func releaseOptions(counterPath, name string, opts []Option) (string, options, error) {
	counterPath = absPath(counterPath)
	if err := ValidateName(name); err != nil {
		return counterPath, options{}, err
	}
	o, err := buildOptions(opts)
	if err == nil {
		err = o.refuseOwner("Release")
	}
	if err != nil {
		return counterPath, o, err
	}
	if o.reg.registry == nil {
		return counterPath, o, fmt.Errorf("snapid: %w: Release needs WithRegistry", ErrInvalidOption)
	}
	if counterPath, err = filepath.Abs(counterPath); err != nil {
		return counterPath, o, &FileError{Op: "open", Path: counterPath, Err: err}
	}
	return counterPath, o, nil
}

// releaseHeld is the rest of Release once the host's processes are kept
// out and the registry shows name held by this counter's owner (h): it
// records the release in the host's record of the name, then in the
// registry, with the last number this host may have issued (recMark: the
// mark of the host's record), and returns that number.
func releaseHeld(ctx context.Context, c *counterFile, counterPath, name, owner string, h registry.Holder, recMark uint64, o *options) (uint64, error) {
	lctx, cancel := o.clock.WithTimeout(ctx, o.reg.timeout)
	defer cancel()
	cur, err := c.ReadContext(lctx)
	if err != nil {
		return 0, err
	}
	m, _, err := claim.ReadMarkFile(counterPath, o.followSymlinks)
	if err != nil {
		return 0, err
	}
	// Above every number this host may have issued: the counter, its
	// floor (if it went backwards), what was reserved, and the host's
	// record's mark (after a crash, a program without the registry may
	// have handed out numbers up to it).
	final := max(cur, m.Floor, m.Mark, h.Reserved, recMark)
	// Recorded first: from here on this host's processes refuse the name
	// until it is claimed again on purpose, also if the release's outcome
	// turns out unknown.
	if final, err = markRecordReleased(ctx, c, name, final, o); err != nil {
		return 0, err
	}
	if err := o.reg.registry.Release(ctx, name, owner, final); err != nil {
		return 0, err
	}
	return final, nil
}

// ForceRelease releases name on behalf of a holder that is gone for good
// (a dead host that cannot run Release), recording as the last issued
// number the higher of the holder's reserved mark and next-1, so that the
// next holder starts at next or above. It is conditional on the holder
// read: if the row changes meanwhile, nothing is changed and an error is
// returned.
func ForceRelease(ctx context.Context, r registry.Registry, name string, next uint64) (final uint64, err error) {
	if err := ValidateName(name); err != nil {
		return 0, err
	}
	if next == 0 {
		return 0, fmt.Errorf("snapid: %w: the next number cannot be 0", ErrInvalidOption)
	}
	h, err := r.Get(ctx, name)
	if err != nil {
		return 0, err
	}
	if h.Owner == "" {
		return 0, fmt.Errorf("snapid: %w: the row for %q has no owner; fix it by hand", ErrRegistry, name)
	}
	final = max(h.Reserved, next-1)
	if err := r.Release(ctx, name, h.Owner, final); err != nil {
		if errors.Is(err, ErrNameTaken) {
			return 0, fmt.Errorf("snapid: %q changed hands while being released; look again: %w", name, err)
		}
		return 0, err
	}
	return final, nil
}
