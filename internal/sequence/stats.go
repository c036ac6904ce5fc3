package sequence

import (
	"context"
	"fmt"

	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/registry"
)

// SequenceStats describes a Sequence's work in this process since it was
// opened, for metrics (package github.com/snapid/snapid/prometheus) and
// logs. The JSON names are stable.
type SequenceStats struct {
	Sequence string `json:"sequence"`
	// NumbersIssued counts the numbers Next, NextN and their Context forms
	// handed to callers. What Next hands out is counted from the process's
	// blocks, not per call (the hot path stays one atomic add): the count
	// is exact between calls, and may run ahead by up to one block while a
	// block is being installed; it never goes down.
	NumbersIssued uint64 `json:"numbers_issued"`
	// Leases counts the leases this process took from the registry for
	// its host.
	Leases uint64 `json:"leases"`
}

// Stats returns the Sequence's counts. It is safe for concurrent use, and
// after Close.
func (s *Sequence) Stats() SequenceStats {
	issued := s.alloc.Issued(s.blockTaken.Load(), &s.issuedHigh) + s.nextN.Load()
	return SequenceStats{Sequence: s.name, NumbersIssued: issued, Leases: s.leases.Load()}
}

// SequenceLeaseState is the host's lease of a sequence as the lease file
// beside the counter holds it (shared by the host's processes). A range's
// bounds are 0 when the file has no such range.
type SequenceLeaseState struct {
	Sequence string `json:"sequence"`
	// CurrentFirst and CurrentLast bound the range numbers are taken
	// from; Next is the next number of it to hand out (CurrentLast+1 once
	// used up).
	CurrentFirst uint64 `json:"current_first"`
	CurrentLast  uint64 `json:"current_last"`
	Next         uint64 `json:"next"`
	// AheadFirst and AheadLast bound the host's next lease, taken in
	// advance.
	AheadFirst uint64 `json:"ahead_first"`
	AheadLast  uint64 `json:"ahead_last"`
	// LeftNumbers is how many numbers the host may still hand out before
	// it needs the registry again: the rest of the current range and the
	// range ahead. Blocks processes already took from the file are not in
	// it.
	LeftNumbers uint64 `json:"left_numbers"`
}

// Lease reads the host's lease file under its lock (it waits for an
// update in progress, and for any other holder of the lock no longer
// than the registry timeout: ErrLocked). It is safe for concurrent use;
// after Close it returns ErrClosed.
func (s *Sequence) Lease() (SequenceLeaseState, error) {
	st := SequenceLeaseState{Sequence: s.name}
	// One bound for both waits: for the Sequence's mutex (a take left
	// behind by a caller gone at its deadline may hold it while it
	// waits for the lock), then for the lease file's lock.
	ctx, cancel := s.h.Clock.WithTimeout(context.Background(), s.h.Timeout)
	defer cancel()
	if !s.mu.LockOrDone(ctx.Done()) {
		return st, &errs.FileError{Op: "lock", Path: s.lf.Lease().Path(), Err: fmt.Errorf("%w: waiting for this process's update of the lease file in progress: %w", errs.ErrLocked, context.Cause(ctx))}
	}
	defer s.mu.Unlock()
	if s.fileClosed || s.h.Closed() {
		return st, errs.ErrClosed
	}
	err := s.lf.Lease().WithLockContext(ctx, func() error {
		l, err := s.lf.Load()
		if err != nil {
			return err
		}
		st.CurrentFirst, st.CurrentLast, st.Next = l.Cur.First, l.Cur.Last, l.Pos
		st.AheadFirst, st.AheadLast = l.Ahead.First, l.Ahead.Last
		st.LeftNumbers = l.Left()
		if !l.Ahead.None() {
			st.LeftNumbers += l.Ahead.Last - l.Ahead.First + 1
		}
		return nil
	})
	return st, err
}

// Space asks the registry how much of the sequence is left to lease (see
// SequenceStatus.Space). It reads the sequence's whole status
// (SequenceRegistry.SequenceStatus): call it every minute or so, not per
// number. It is safe for concurrent use, and after Close.
func (s *Sequence) Space(ctx context.Context) (registry.SequenceSpace, error) {
	st, err := s.reg.SequenceStatus(ctx, s.name)
	if err != nil {
		return registry.SequenceSpace{Sequence: s.name}, err
	}
	return st.Space(), nil
}
