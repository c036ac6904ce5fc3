package engine

import (
	"context"

	"github.com/snapid/snapid/internal/claim"
)

// startClaim claims the name in the registry, or joins the host's claim
// (package claim), with what the engine decides around the claim: the
// name's node number and the cluster's stride (numberClaim), the name the
// host's records say was released with this counter, and, for the host's
// last process, where the host's sequence leases stand (closeLeases).
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
	})
	if err != nil {
		return nil, nil, err
	}
	return r, nums, nil
}
