package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"

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
	issued := issuedFrom(&s.issuedHigh, s.blockTaken.Load(), s.alloc) + s.nextN.Load()
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
	ctx, cancel := s.g.clock.WithTimeout(context.Background(), s.g.res.o.timeout)
	defer cancel()
	if !s.mu.LockOrDone(ctx.Done()) {
		return st, &FileError{Op: "lock", Path: s.lf.Lease().Path(), Err: fmt.Errorf("%w: waiting for this process's update of the lease file in progress: %w", ErrLocked, context.Cause(ctx))}
	}
	defer s.mu.Unlock()
	if s.fileClosed || s.g.closed.Load() {
		return st, ErrClosed
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

// SequenceTotals returns, for every sequence this Generator opened, the
// counts of its Sequences added up, the closed ones included (so that the
// counts never go down when one of two Sequences of a name closes), by
// name. It is safe for concurrent use.
func (g *Generator) SequenceTotals() []SequenceStats {
	g.seqMu.Lock()
	defer g.seqMu.Unlock()
	byName := make(map[string]SequenceStats, len(g.seqDone)+len(g.seqs))
	for name, st := range g.seqDone {
		byName[name] = st
	}
	for _, s := range g.seqs {
		byName[s.name] = addSequenceStats(byName[s.name], s.Stats())
	}
	out := make([]SequenceStats, 0, len(byName))
	for _, st := range byName {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b SequenceStats) int { return strings.Compare(a.Sequence, b.Sequence) })
	return out
}

func addSequenceStats(a, b SequenceStats) SequenceStats {
	return SequenceStats{Sequence: b.Sequence, NumbersIssued: a.NumbersIssued + b.NumbersIssued, Leases: a.Leases + b.Leases}
}

// Sequences returns the Sequences of this Generator that are open, by
// name (a sequence opened twice appears twice). It is safe for concurrent
// use.
func (g *Generator) Sequences() []*Sequence {
	g.seqMu.Lock()
	out := slices.Clone(g.seqs)
	g.seqMu.Unlock()
	slices.SortStableFunc(out, func(a, b *Sequence) int { return strings.Compare(a.name, b.name) })
	return out
}

// addSequence records s as open.
func (g *Generator) addSequence(s *Sequence) {
	g.seqMu.Lock()
	defer g.seqMu.Unlock()
	g.seqs = append(g.seqs, s)
}

// settleSequences raises the lease file of each Sequence of g still
// open to what this process saw of it (Sequence.settle).
func (g *Generator) settleSequences() {
	g.seqMu.Lock()
	seqs := slices.Clone(g.seqs)
	g.seqMu.Unlock()
	for _, s := range seqs {
		s.stop() // a take waiting for the lease file's lock gives up (it takes nothing more after Close anyway)
	}
	for _, s := range seqs {
		s.settle()
	}
}

// removeSequence records s as closed, keeping its counts for
// SequenceTotals.
func (g *Generator) removeSequence(s *Sequence) {
	g.seqMu.Lock()
	defer g.seqMu.Unlock()
	n := len(g.seqs)
	g.seqs = slices.DeleteFunc(g.seqs, func(o *Sequence) bool { return o == s })
	if len(g.seqs) == n {
		return
	}
	if g.seqDone == nil {
		g.seqDone = map[string]SequenceStats{}
	}
	g.seqDone[s.name] = addSequenceStats(g.seqDone[s.name], s.Stats())
}
