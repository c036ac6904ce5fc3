package engine

import (
	"context"
	"path/filepath"

	"github.com/snapid/snapid/internal/claim"
)

// startClaim claims the name in the registry, or joins the host's claim
// (package claim), with what the engine decides around the claim: the
// name's node number and the cluster's stride (numberClaim), the name the
// host's records say was released with this counter, for the host's last
// process where the host's sequence leases stand (closeLeases), and for
// a first Open refused by the registry what it made (unmakeRefused).
func startClaim(ctx context.Context, path, name string, o *options, rec *hostRecord,
	withFile func(context.Context, func(*counterFile) error) error) (*claim.Reservation, *numberClaim, error) {
	nums := &numberClaim{o: &o.reg, name: name, form: o.form, log: o.logger, rec: rec, withFile: withFile, recorded: rec.number}
	var r *claim.Reservation
	reg := o.reg.registry
	r, err := claim.Start(ctx, claim.Config{
		Registry: reg, Name: name, Path: path, Files: o.claimFiles(), Options: o.reg.claimOptions(), Log: o.logger,
		WithCounter: func(ctx context.Context, fn func(c claim.Counter) error) error {
			return withFile(ctx, func(c *counterFile) error { return fn(c) })
		},
		Released: releasedInRecords(path, o),
		Precheck: nums.precheckNumber,
		Claimed:  nums.claimNumber,
		Joined:   nums.joinNumber,
		Closing: func(ctx context.Context, session string) {
			closeLeases(ctx, path, reg, name, r.Files().Owner(), session, o.logger)
		},
		Unmake: func(ctx context.Context) { unmakeRefused(ctx, path, name, o, rec, withFile) },
	})
	if err != nil {
		return nil, nil, err
	}
	return r, nums, nil
}

// unmakeRefused, for the host's first Open refused by the registry before
// anything was claimed (claim.Config.Unmake: under the host's gate, with
// no other registry process of the host), removes the host's record of
// the name if this Open made it and no other program is present on it,
// and then the counter if this Open made it too and nothing was issued
// from it (it still holds 0), both under the counter's lock. The record
// goes first, so that a failure between the two leaves a counter without
// a record (the next Open records it again), never a record naming a
// counter that is gone (which refuses the name). A program that opened
// the counter or the record meanwhile finds it removed when it takes its
// lock (ErrReplaced, ErrInUse) and is refused: it opens again.
func unmakeRefused(ctx context.Context, path, name string, o *options, rec *hostRecord,
	withFile func(context.Context, func(*counterFile) error) error) {
	if !rec.made {
		return
	}
	// The claim's context may have ended: the counter's lock, which
	// programs hold for one update, is waited for the registry timeout.
	ctx, cancel := o.clock.WithTimeout(context.WithoutCancel(ctx), o.reg.timeout)
	defer cancel()
	err := withFile(ctx, func(c *counterFile) error {
		if !rec.Last() {
			return nil // another program uses the name: it keeps what it uses
		}
		if err := rec.p.Remove(name); err != nil {
			return err
		}
		if v, err := c.Load(); err != nil || v != 0 || !c.made {
			return err
		}
		if err := o.fs.Remove(path); err != nil {
			return err
		}
		return o.fs.SyncDir(filepath.Dir(path))
	})
	if err != nil {
		o.logger.Warn("snapid: could not remove what a refused Open made", "path", path, "err", err)
	}
}
