package sequence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/snapid/snapid/internal/alloc"
	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/internal/leasefile"
	"github.com/snapid/snapid/internal/retry"
	"github.com/snapid/snapid/registry"
)

// verify checks the lease file against the registry's record of this
// host's lease, and drops its ranges if they are not the host's current
// lease. It holds the host's refill lock, so that no lease of another
// process of the host is between the registry and the file meanwhile, and
// reads the registry's record under it. reachable is false if the
// registry could not be reached at open.
func (s *Sequence) verify(ctx context.Context, reachable bool) error {
	if err := s.lockRefill(ctx); err != nil {
		return err
	}
	defer s.unlockRefill()
	session := s.h.Session
	old, check, earlier, err := s.inspectFile(ctx, session)
	if err != nil || !check && !earlier {
		return err
	}
	var rec registry.SequenceLease
	if reachable {
		// The registry answered that the sequence exists: a file that
		// cannot be checked now (the registry no longer answering, the
		// caller's context ended) is refused, not used unchecked.
		if rec, err = s.hostLease(ctx); err != nil {
			return fmt.Errorf("snapid: sequence %q: checking the host's lease file against the registry: %w", s.name, err)
		}
	}
	if earlier {
		return s.adopt(ctx, old, rec, reachable)
	}
	if !reachable {
		s.log.Warn("snapid: registry unreachable; using this host's sequence lease file unchecked",
			"sequence", s.name)
		return nil
	}
	return s.dropUnrecorded(ctx, rec, session)
}

// inspectFile looks at the lease file for verify: one of an earlier
// claim with no ranges is bound to this claim (session) at once; one of
// an earlier claim with ranges is returned as old (earlier), for adopt to
// carry over or drop; one of this claim with ranges is to be checked
// against the registry (check).
func (s *Sequence) inspectFile(ctx context.Context, session string) (old leasefile.Record, check, earlier bool, err error) {
	err = s.update(ctx, false, func(l *leasefile.Record) (bool, error) {
		switch {
		case l.Session != session && l.Cur.None() && l.Session != "":
			l.Void(session)
			return true, nil
		case l.Session != session && !l.Cur.None():
			old, earlier = *l, true
		case !l.Cur.None():
			check = true
		}
		return false, nil
	})
	return old, check, earlier, err
}

// hostLease asks the registry for its record of this host's lease of the
// sequence, waiting at most the registry timeout.
func (s *Sequence) hostLease(ctx context.Context) (registry.SequenceLease, error) {
	ctx, cancel := s.h.Clock.WithTimeout(ctx, s.h.Timeout)
	defer cancel()
	return s.reg.HostLease(ctx, s.name, s.h.Node)
}

// dropUnrecorded drops the lease file's ranges (a gap), binding it to this
// claim (session), unless they are the host's lease the registry records
// (rec).
func (s *Sequence) dropUnrecorded(ctx context.Context, rec registry.SequenceLease, session string) error {
	return s.update(ctx, false, func(l *leasefile.Record) (bool, error) {
		latest := l.Latest()
		if !l.Cur.None() && (rec.Session != session || rec.First != latest.First || rec.Last != latest.Last) {
			s.log.Warn("snapid: the sequence lease file is not the host's lease the registry records (restored or copied?); its ranges are dropped (a gap)",
				"sequence", s.name, "file", latest, "registry_first", rec.First, "registry_last", rec.Last)
			l.Void(session)
			return true, nil
		}
		return false, nil
	})
}

// adopt carries the lease file of an earlier claim of the host (old) over
// to this claim, if the registry's record rec shows that the host's last
// process closed cleanly with the file exactly as it is (the same latest
// range and position); otherwise the file's ranges are dropped (a gap).
func (s *Sequence) adopt(ctx context.Context, old leasefile.Record, rec registry.SequenceLease, reachable bool) error {
	session := s.h.Session
	latest := old.Latest()
	adopted := false
	if reachable && rec.Session == old.Session && rec.First == latest.First && rec.Last == latest.Last &&
		rec.ClosedAt != 0 && rec.ClosedAt == old.Pos {
		actx, cancel := s.h.Clock.WithTimeout(ctx, s.h.Timeout)
		_, err := s.reg.AdoptLease(actx, registry.LeaseAdoption{Sequence: s.name, Name: s.h.Node, Owner: s.h.Owner, Session: session,
			OldSession: old.Session, First: latest.First, Last: latest.Last, Pos: old.Pos})
		cancel()
		adopted = err == nil
		if err != nil {
			s.log.Warn("snapid: could not carry the host's sequence lease over; it is dropped (a gap)", "sequence", s.name, "err", err)
		}
	}
	return s.update(ctx, false, func(l *leasefile.Record) (bool, error) {
		if adopted && l.Session == old.Session && l.Cur == old.Cur && l.Ahead == old.Ahead && l.Pos == old.Pos {
			l.Session = session
			return true, nil
		}
		if l.Session != session {
			s.log.Info("snapid: sequence lease file of an earlier claim of this host; its ranges are dropped (a gap)",
				"sequence", s.name, "cur", l.Cur, "ahead", l.Ahead)
			l.Void(session)
			return true, nil
		}
		return false, nil
	})
}

// lockRefill takes the host's refill lock, waiting at most the registry
// timeout, and no longer than ctx allows: first the process's own (a flock
// is held per open file, so it does not keep the process's goroutines
// apart), then the host's.
func (s *Sequence) lockRefill(ctx context.Context) error {
	ctx, cancel := s.h.Clock.WithTimeout(ctx, s.h.Timeout)
	defer cancel()
	select {
	case s.refillSem <- struct{}{}:
	case <-ctx.Done():
		return &errs.FileError{Op: "lock", Path: s.refill.Path(), Err: fmt.Errorf("waiting for another caller of this process to take the next lease: %w", alloc.ContextError(ctx))}
	}
	ok, err := s.refill.TryLockContext(ctx, 2*time.Millisecond)
	if err == nil && !ok {
		err = ctx.Err()
	}
	if err != nil {
		<-s.refillSem
		return &errs.FileError{Op: "lock", Path: s.refill.Path(), Err: fmt.Errorf("waiting for another process of this host to take the next lease: %w", err)}
	}
	return nil
}

// tryLockRefill takes the refill locks if no one holds them.
func (s *Sequence) tryLockRefill() (bool, error) {
	select {
	case s.refillSem <- struct{}{}:
	default:
		return false, nil
	}
	ok, err := s.refill.TryLock()
	if err != nil || !ok {
		<-s.refillSem
	}
	return ok, err
}

// unlockRefill lets the refill locks go.
func (s *Sequence) unlockRefill() {
	s.refill.Unlock()
	<-s.refillSem
}

// Leases grow likewise (up to maxLeaseGrowth times SequenceLeaseSize)
// while they last less than fastLease, and shrink back once they last
// longer than slowLease: a busy host does not wait for the registry, an
// idle one loses little when its claim changes.
const (
	fastLease      = time.Second
	slowLease      = time.Minute
	maxLeaseGrowth = 128
)

// nextLeaseSize returns the size of the next lease (see fastLease).
func (s *Sequence) nextLeaseSize() uint64 {
	now := s.h.Clock.Now().UnixNano()
	last := s.lastLease.Swap(now)
	size := s.leaseSize.Load()
	switch elapsed := time.Duration(now - last); {
	case last == 0:
	case elapsed < fastLease && size < s.o.lease*maxLeaseGrowth:
		size *= 2
	case elapsed > slowLease && size > s.o.lease:
		size = max(size/2, s.o.lease)
	}
	s.leaseSize.Store(size)
	return size
}

// refillLease takes the host's next lease from the registry, if the file
// still needs one: for prefetch, when the current range is half used and
// there is no next one; otherwise, when the file has fewer than min
// numbers left. It holds the host's refill lock meanwhile, so that one
// process of the host leases at a time, but not the lease file's lock:
// other processes go on taking from the file. A prefetch gives up if
// another process is leasing.
func (s *Sequence) refillLease(ctx context.Context, min uint64, prefetch bool) error {
	if prefetch {
		ok, err := s.tryLockRefill()
		if err != nil || !ok {
			return err
		}
	} else if err := s.lockRefill(ctx); err != nil {
		return err
	}
	defer s.unlockRefill()
	var prev leasefile.Range
	need := false
	err := s.update(ctx, true, func(l *leasefile.Record) (bool, error) {
		if prefetch {
			need = l.Ahead.None() && !l.Cur.None() && l.Left() < s.leaseSize.Load()/2
		} else {
			need = l.Left() < min && l.Ahead.None()
		}
		prev = l.Latest()
		return false, nil
	})
	if err != nil || !need {
		return err
	}
	return s.lease(ctx, prev, min)
}

// lease takes the host's next lease from the registry and installs it in
// the file, whose latest range is prev; the caller holds the refill lock.
// The registry leases only if its record of this host's lease is prev
// (ErrLeaseMoved otherwise): then the file is older than the registry
// (restored or copied, or a process died between a lease and recording it)
// and its ranges are dropped, and the next lease is asked for against the
// registry's record.
func (s *Sequence) lease(ctx context.Context, prev leasefile.Range, min uint64) error {
	inFile := prev   // the file's latest range; prev is what the registry is shown
	failures := 0    // transient failures so far (see retry.Do)
	retried := false // the last attempt failed transiently
	for attempt := 0; attempt < 3; attempt++ {
		if err := s.h.Lost(); err != nil {
			return err
		}
		lctx, cancel := s.h.Clock.WithTimeout(ctx, s.h.Timeout)
		got, err := s.reg.LeaseSequence(lctx, registry.LeaseRequest{
			Sequence: s.name, Name: s.h.Node, Owner: s.h.Owner, Session: s.h.Session,
			PrevFirst: prev.First, PrevLast: prev.Last, Size: max(s.nextLeaseSize(), min), Min: min,
		})
		cancel()
		switch {
		case errors.Is(err, registry.ErrLeaseMoved):
			if retried {
				// Most likely moved by this host's own lease whose answer
				// was lost: not a race with another process, so it does
				// not count (failures bounds these).
				attempt--
				retried = false
			}
			recorded := leasefile.Range{First: got.First, Last: got.Last}
			s.log.Warn("snapid: the host's sequence lease in the registry is not the lease file's; dropping the file's ranges (a gap)",
				"sequence", s.name, "file", prev, "registry", recorded)
			err := s.update(ctx, true, func(l *leasefile.Record) (bool, error) {
				if l.Latest() == inFile {
					l.Void(s.h.Session)
				}
				inFile = l.Latest()
				return true, nil
			})
			if err != nil {
				return err
			}
			prev = recorded
			continue
		case retry.Transient(err) && failures < retry.Attempts-1 && retry.Pause(ctx, s.h.Clock, s.h.RetryWait, failures, s.log, "op", "lease", "sequence", s.name, "err", err):
			// Contention or an overloaded registry (a data centre's hosts
			// all taking their first lease at once): again, after a wait.
			// A lease whose answer was lost shows as moved next time.
			failures++
			attempt--
			retried = true
			continue
		case err != nil:
			if cerr := alloc.ContextError(ctx); cerr != nil {
				return fmt.Errorf("snapid: sequence %q: %w: %w", s.name, cerr, err)
			}
			return fmt.Errorf("snapid: sequence %q: %w", s.name, err)
		}
		s.leases.Add(1)
		next := leasefile.Range{First: got.First, Last: got.Last}
		return s.update(ctx, true, func(l *leasefile.Record) (bool, error) {
			switch {
			case l.Latest() != inFile:
				// Cannot happen under the refill lock, short of a file
				// replaced by hand meanwhile: next stays unused (a gap).
				s.log.Warn("snapid: the sequence lease file changed while a lease was taken; the lease is left unused (a gap)",
					"sequence", s.name, "lease", next)
			case l.Left() == 0:
				l.Cur, l.Ahead, l.Pos = next, leasefile.Range{}, next.First
			default:
				l.Ahead = next
			}
			return true, nil
		})
	}
	return fmt.Errorf("snapid: %w: sequence %q: the host's lease in the registry kept moving", errs.ErrRegistry, s.name)
}

// prefetch takes the host's next lease in the background, one at a time
// in this process.
func (s *Sequence) prefetch() {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.stopping || !s.prefetching.CompareAndSwap(false, true) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.prefetching.Store(false)
		err := s.refillLease(s.stopCtx, 1, true)
		if err != nil && !errors.Is(err, errs.ErrExhausted) && !errors.Is(err, errs.ErrSequenceShort) && !errors.Is(err, errs.ErrClosed) {
			s.log.Warn("snapid: could not take the host's next sequence lease in advance; numbers keep flowing from the current one",
				"sequence", s.name, "err", err)
		}
	}()
}
