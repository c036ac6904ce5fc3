package claim

import (
	"context"
	"errors"
	"fmt"

	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/registry"
)

// verifyJoin checks, for a process that is not the first of its host, that
// the host's claim still stands. It is an early warning, not a safeguard
// (the mark file never exceeds the registry's mark, and extensions are
// conditional on the session): if the registry cannot be reached, the
// process starts on the host's reserved range with a warning. While the
// host's heartbeat record shows this claim refreshed less than an
// interval ago, the registry is not read: a host whose processes all
// start at once reads it once, at the first one's claim.
func (r *Reservation) verifyJoin(ctx context.Context) error {
	if err := r.host.FindHeartbeat(); err != nil {
		return err
	}
	rec, ok := r.host.ReadHeartbeat()
	if ok && rec.Taken && rec.Session == SessionHash(r.session) {
		return fmt.Errorf("snapid: %w: the registry told another process of this host that %q is another owner's", errs.ErrNameTaken, r.name)
	}
	if FreshClaim(rec, ok, r.session, r.o.Clock.Now(), r.o.Heartbeat) {
		return nil
	}
	h, err := r.reg.Get(ctx, r.name)
	switch {
	case err != nil && errors.Is(err, errs.ErrRegistry):
		r.log.Warn("snapid: registry unreachable; joining this host's claim on its reserved range", "name", r.name, "err", err)
		return nil
	case err != nil:
		return err
	case h.Owner != r.host.Owner() || h.Session != r.session || h.State != registry.StateActive:
		return fmt.Errorf("snapid: %w: the claim of %q made by this host's first process no longer stands (%s)",
			errs.ErrNameTaken, r.name, h)
	}
	return nil
}
