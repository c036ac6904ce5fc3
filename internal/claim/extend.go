package claim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/internal/idform"
	"github.com/snapid/snapid/internal/retry"
	"github.com/snapid/snapid/registry"
)

// The reserved range's extension: one step ahead in the background when
// half of it is used, synchronously when an update needs more, and how
// large a step is (it grows with the rate numbers are taken at).

func (r *Reservation) extendInBackground() {
	r.bgMu.Lock()
	defer r.bgMu.Unlock()
	if r.stopping || !r.extending.CompareAndSwap(false, true) {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.extending.Store(false)
		// Not cancelled by close, which waits for it instead: an LWT
		// abandoned by its caller may still be applied, after the last
		// process has set the mark back.
		ctx, cancel := r.o.Clock.WithTimeout(context.Background(), r.o.Timeout)
		defer cancel()
		switch err := r.Extend(ctx, 0); {
		case errors.Is(err, errs.ErrNameTaken):
			// extend marked the name lost: nothing more is issued, not
			// even what is left below the mark.
			r.log.Error("snapid: node name taken over by another owner while extending the reserved range; no more ids will be issued (calls fail with errs.ErrNameTaken)",
				"name", r.name, "err", err)
		case err != nil:
			r.extendLog.failed(err, "name", r.name)
		}
	}()
}

// extend raises the registry's mark to one step (see nextStep) above the
// counter (and to at least need), then the mark file. It does nothing when another caller
// already made enough room.
func (r *Reservation) Extend(ctx context.Context, need uint64) error {
	if !r.extendMu.LockOrDone(ctx.Done()) {
		return fmt.Errorf("snapid: waiting for this process's extension of the mark in progress: %w", context.Cause(ctx))
	}
	defer r.extendMu.Unlock()
	if r.closed {
		// A caller that needed room when the Generator closed: the last
		// process may have set the mark back, which must stay so.
		return errs.ErrClosed
	}
	// Each failed attempt means another process of the host moved the mark
	// (progress), so a few more attempts are bounded and cheap.
	for attempt := 0; attempt < 10; attempt++ {
		var cur uint64
		var old Mark
		err := r.withFile(ctx, func(c Counter) error {
			var err error
			if cur, err = c.Load(); err != nil {
				return err
			}
			old, err = r.host.ReadMark()
			return err
		})
		if err != nil {
			return err
		}
		switch {
		case need > 0 && old.Mark >= need:
			return nil // room for the caller waiting on it
		case need == 0 && old.Mark > cur && old.Mark-cur >= r.Step()/2:
			return nil // another caller made room meanwhile
		}
		// The mark goes one step above the counter, never further, so a
		// crash costs at most one step of numbers.
		from := max(cur, old.Floor) // the counter, or where a roll-back will be raised to
		if need > 0 {
			from = max(from, need-1)
		}
		step := r.nextStep(cur)
		next := from + min(step, idform.MaxNumber-from)
		if next <= old.Mark {
			if old.Mark == idform.MaxNumber {
				return fmt.Errorf("snapid: %w: the mark is at 2^64-1", errs.ErrExhausted)
			}
			return nil
		}
		h, err := r.reg.Extend(ctx, r.name, r.host.Owner(), r.session, old.Mark, next)
		switch {
		case err == nil:
			r.extendLog.succeeded("name", r.name, "mark", next)
			return r.adopt(ctx, next, cur)
		case errors.Is(err, registry.ErrMarkMoved) && h.Owner == r.host.Owner() && h.Session == r.session && h.State == registry.StateActive:
			if h.Reserved > old.Mark {
				// Another process of this host extended first.
				if err := r.adopt(ctx, h.Reserved, cur); err != nil {
					return err
				}
				continue
			}
			return retry.Definite{Err: fmt.Errorf("snapid: %w: the registry's mark %d is below this host's %d", errs.ErrRegistry, h.Reserved, old.Mark)}
		case errors.Is(err, errs.ErrNameTaken):
			r.tellTaken(err)
			return err
		default:
			return err
		}
	}
	return fmt.Errorf("snapid: %w: the registry's mark kept moving", errs.ErrReservationExhausted)
}

// step is the size of the current reservation step.
func (r *Reservation) Step() uint64 {
	if v := r.curStep.Load(); v > 0 {
		return v
	}
	return r.o.Step
}

// rateSample is the counter's value when an extension was sized.
type rateSample struct {
	at      time.Time
	counter uint64
}

// nextStep sizes the next extension: the configured step, or as many
// numbers as the host issued in the last horizon, whichever is more (but
// at most MaxStepGrowth times the current step), so that a registry
// outage of about half the horizon does not stop issuance at a steady
// rate, and a crash costs at most one horizon's worth of numbers, or the
// configured step on a host that issues fewer per horizon. The count is
// measured over the horizon, never extrapolated from a shorter span: a
// burst of a few hundred ids in a minute does not grow the step. A window
// longer than the horizon (samples are taken only at extensions) is
// scaled down to it. The caller holds extendMu.
func (r *Reservation) nextStep(cur uint64) uint64 {
	now := r.o.Clock.Now()
	step := r.o.Step
	r.rates = append(r.rates, rateSample{now, cur})
	// The base: the newest sample at least a horizon old, or the oldest.
	from := now.Add(-r.o.Horizon)
	i := 0
	for i+1 < len(r.rates) && !r.rates[i+1].at.After(from) {
		i++
	}
	if len(r.rates)-i > maxRateSamples {
		i = len(r.rates) - maxRateSamples
	}
	r.rates = append(r.rates[:0], r.rates[i:]...)
	if base := r.rates[0]; cur > base.counter && r.o.Horizon > 0 {
		issued := float64(cur - base.counter)
		if elapsed := now.Sub(base.at); elapsed > r.o.Horizon {
			issued = issued / elapsed.Seconds() * r.o.Horizon.Seconds()
		}
		if issued > float64(step) {
			limit := float64(r.Step()) * MaxStepGrowth
			step = uint64(min(issued, limit, float64(idform.MaxNumber/4)))
		}
	}
	r.curStep.Store(step)
	return step
}
