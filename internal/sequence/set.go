package sequence

import (
	"slices"
	"strings"
	"sync"
)

// Set is the Sequences of one Generator: those open, and the counts of
// those closed. Its zero value is empty. It is safe for concurrent use.
type Set struct {
	mu   sync.Mutex
	open []*Sequence              // in the order they were opened
	done map[string]SequenceStats // the counts of the closed Sequences, by name
}

// Totals returns, for every sequence of the set, the counts of its
// Sequences added up, the closed ones included (so that the counts never
// go down when one of two Sequences of a name closes), by name.
func (t *Set) Totals() []SequenceStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	byName := make(map[string]SequenceStats, len(t.done)+len(t.open))
	for name, st := range t.done {
		byName[name] = st
	}
	for _, s := range t.open {
		byName[s.name] = addStats(byName[s.name], s.Stats())
	}
	out := make([]SequenceStats, 0, len(byName))
	for _, st := range byName {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b SequenceStats) int { return strings.Compare(a.Sequence, b.Sequence) })
	return out
}

func addStats(a, b SequenceStats) SequenceStats {
	return SequenceStats{Sequence: b.Sequence, NumbersIssued: a.NumbersIssued + b.NumbersIssued, Leases: a.Leases + b.Leases}
}

// Open returns the Sequences of the set that are open, by name (a
// sequence opened twice appears twice).
func (t *Set) Open() []*Sequence {
	t.mu.Lock()
	out := slices.Clone(t.open)
	t.mu.Unlock()
	slices.SortStableFunc(out, func(a, b *Sequence) int { return strings.Compare(a.name, b.name) })
	return out
}

func (t *Set) add(s *Sequence) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.open = append(t.open, s)
}

// Settle raises the lease file of each Sequence still open to what this
// process saw of it (see Sequence.Close), as the Generator closes.
func (t *Set) Settle() {
	t.mu.Lock()
	seqs := slices.Clone(t.open)
	t.mu.Unlock()
	for _, s := range seqs {
		s.stop() // a take waiting for the lease file's lock gives up (it takes nothing more after Close anyway)
	}
	for _, s := range seqs {
		s.settle()
	}
}

// remove records s as closed, keeping its counts for Totals.
func (t *Set) remove(s *Sequence) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.open)
	t.open = slices.DeleteFunc(t.open, func(o *Sequence) bool { return o == s })
	if len(t.open) == n {
		return
	}
	if t.done == nil {
		t.done = map[string]SequenceStats{}
	}
	t.done[s.name] = addStats(t.done[s.name], s.Stats())
}
