package admin

import (
	"fmt"
	"sort"

	"github.com/snapid/snapid/registry"
)

// Problem kinds reported by AuditSequences (stable, like the others).
const (
	// Two ranges of one sequence that share numbers: grants of GLOBAL,
	// data-centre ranges, or host leases. Two holders of one number would
	// issue it twice.
	ProblemSeqOverlap = "sequence_overlap"
	// A data-centre range that GLOBAL did not grant to that data centre (or
	// that lies at or above GLOBAL's next number), or a host lease outside
	// the leased part of its data centre's ranges.
	ProblemSeqBeyondGlobal = "sequence_beyond_global"
	// A number above the sequence's max: GLOBAL's next number past max+1,
	// or a grant, range or lease reaching above max.
	ProblemSeqAboveMax = "sequence_above_max"
	// A number below the sequence's start: GLOBAL's next number, or a
	// grant, range or lease starting below start.
	ProblemSeqBelowStart = "sequence_below_start"
)

type seqSpan struct {
	what        string
	first, last uint64
}

// AuditSequences checks the sequences' rows (see SequenceRegistry) for
// anything that could make two holders issue the same number: overlapping
// ranges, ranges beyond what GLOBAL handed out, numbers above max or below
// start. It is a pure function. Problems are ordered by sequence, then kind.
func AuditSequences(seqs []registry.SequenceStatus) []Problem {
	var out []Problem
	for _, st := range seqs {
		a := &seqAudit{st: st, out: out}
		a.global()
		grants := a.grants()
		ranges := a.ranges()
		leases := a.leases()
		for _, set := range [][]seqSpan{grants, ranges, leases} {
			a.overlaps(set)
		}
		out = a.out
	}
	return out
}

// seqAudit gathers the problems of one sequence, st, after those of the
// sequences audited before it.
type seqAudit struct {
	st  registry.SequenceStatus
	out []Problem
}

// add appends a problem of kind about the sequence, its detail formatted
// after the sequence's name.
func (a *seqAudit) add(kind, format string, args ...any) {
	a.out = append(a.out, Problem{Kind: kind, Name: a.st.Name, Detail: fmt.Sprintf("sequence %q: ", a.st.Name) + fmt.Sprintf(format, args...)})
}

// below reports span s if it starts below the sequence's start.
func (a *seqAudit) below(s seqSpan) {
	if s.first < a.st.Start {
		a.add(ProblemSeqBelowStart, "%s starts below start %d", s.what, a.st.Start)
	}
}

// global reports GLOBAL's next number if it is past max + 1 or below
// start.
func (a *seqAudit) global() {
	st := a.st
	if st.Next > st.Max && st.Next-st.Max > 1 {
		a.add(ProblemSeqAboveMax, "GLOBAL's next number %d is past max %d + 1", st.Next, st.Max)
	}
	if st.Next < st.Start {
		a.add(ProblemSeqBelowStart, "GLOBAL's next number %d is below start %d", st.Next, st.Start)
	}
}

// grants reports GLOBAL's grants that start below start, reach above max
// or reach GLOBAL's next number, and returns them as spans.
func (a *seqAudit) grants() []seqSpan {
	st := a.st
	var grants []seqSpan
	for _, g := range st.Grants {
		s := seqSpan{fmt.Sprintf("grant to %s [%d, %d]", g.DC, g.First, g.Last), g.First, g.Last}
		grants = append(grants, s)
		a.below(s)
		if g.Last > st.Max {
			a.add(ProblemSeqAboveMax, "%s reaches above max %d", s.what, st.Max)
		}
		if g.Last >= st.Next {
			a.add(ProblemSeqBeyondGlobal, "%s reaches GLOBAL's next number %d (never handed out)", s.what, st.Next)
		}
	}
	return grants
}

// ranges reports the data-centre ranges that start below start, reach
// above max or past their end, or lie outside GLOBAL's grants to their
// data centre, and returns them as spans.
func (a *seqAudit) ranges() []seqSpan {
	st := a.st
	var ranges []seqSpan
	for _, r := range st.Ranges {
		s := seqSpan{fmt.Sprintf("range of %s [%d, %d]", r.DC, r.First, r.Last), r.First, r.Last}
		ranges = append(ranges, s)
		a.below(s)
		if r.Last > st.Max || r.Next > r.Last+1 {
			a.add(ProblemSeqAboveMax, "%s (next %d) reaches above max %d or past its end", s.what, r.Next, st.Max)
		}
		granted := false
		for _, g := range st.Grants {
			granted = granted || g.DC == r.DC && g.First <= r.First && r.Last <= g.Last
		}
		if !granted {
			a.add(ProblemSeqBeyondGlobal, "%s is not a range GLOBAL granted to %s", s.what, r.DC)
		}
	}
	return ranges
}

// leases reports the host leases (those with a first number) that start
// below start, reach above max, or lie outside the leased part of their
// data centre's ranges, and returns them as spans.
func (a *seqAudit) leases() []seqSpan {
	st := a.st
	var leases []seqSpan
	for _, l := range st.Leases {
		if l.First == 0 {
			continue
		}
		s := seqSpan{fmt.Sprintf("lease of host %s in %s [%d, %d]", l.Name, l.DC, l.First, l.Last), l.First, l.Last}
		leases = append(leases, s)
		a.below(s)
		if l.Last > st.Max {
			a.add(ProblemSeqAboveMax, "%s reaches above max %d", s.what, st.Max)
		}
		inRange := false
		for _, r := range st.Ranges {
			inRange = inRange || r.DC == l.DC && r.First <= l.First && l.Last < r.Next && l.Last <= r.Last
		}
		if !inRange {
			a.add(ProblemSeqBeyondGlobal, "%s is outside the leased part of %s's ranges", s.what, l.DC)
		}
	}
	return leases
}

// overlaps reports each pair of spans in set that share numbers. It sorts
// set by first number.
func (a *seqAudit) overlaps(set []seqSpan) {
	// Sorted by first, span i shares numbers with every later span
	// that starts at or before i's last: each overlapping pair is
	// reported, not only neighbours.
	sort.SliceStable(set, func(i, j int) bool { return set[i].first < set[j].first })
	for i := range set {
		for j := i + 1; j < len(set) && set[j].first <= set[i].last; j++ {
			a.add(ProblemSeqOverlap, "%s and %s share numbers", set[i].what, set[j].what)
		}
	}
}
