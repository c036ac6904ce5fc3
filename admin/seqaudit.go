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
		add := func(kind, format string, args ...any) {
			out = append(out, Problem{Kind: kind, Name: st.Name, Detail: fmt.Sprintf("sequence %q: ", st.Name) + fmt.Sprintf(format, args...)})
		}
		if st.Next > st.Max && st.Next-st.Max > 1 {
			add(ProblemSeqAboveMax, "GLOBAL's next number %d is past max %d + 1", st.Next, st.Max)
		}
		if st.Next < st.Start {
			add(ProblemSeqBelowStart, "GLOBAL's next number %d is below start %d", st.Next, st.Start)
		}
		below := func(s seqSpan) {
			if s.first < st.Start {
				add(ProblemSeqBelowStart, "%s starts below start %d", s.what, st.Start)
			}
		}
		var grants, ranges, leases []seqSpan
		for _, g := range st.Grants {
			s := seqSpan{fmt.Sprintf("grant to %s [%d, %d]", g.DC, g.First, g.Last), g.First, g.Last}
			grants = append(grants, s)
			below(s)
			if g.Last > st.Max {
				add(ProblemSeqAboveMax, "%s reaches above max %d", s.what, st.Max)
			}
			if g.Last >= st.Next {
				add(ProblemSeqBeyondGlobal, "%s reaches GLOBAL's next number %d (never handed out)", s.what, st.Next)
			}
		}
		for _, r := range st.Ranges {
			s := seqSpan{fmt.Sprintf("range of %s [%d, %d]", r.DC, r.First, r.Last), r.First, r.Last}
			ranges = append(ranges, s)
			below(s)
			if r.Last > st.Max || r.Next > r.Last+1 {
				add(ProblemSeqAboveMax, "%s (next %d) reaches above max %d or past its end", s.what, r.Next, st.Max)
			}
			granted := false
			for _, g := range st.Grants {
				granted = granted || g.DC == r.DC && g.First <= r.First && r.Last <= g.Last
			}
			if !granted {
				add(ProblemSeqBeyondGlobal, "%s is not a range GLOBAL granted to %s", s.what, r.DC)
			}
		}
		for _, l := range st.Leases {
			if l.First == 0 {
				continue
			}
			s := seqSpan{fmt.Sprintf("lease of host %s in %s [%d, %d]", l.Name, l.DC, l.First, l.Last), l.First, l.Last}
			leases = append(leases, s)
			below(s)
			if l.Last > st.Max {
				add(ProblemSeqAboveMax, "%s reaches above max %d", s.what, st.Max)
			}
			inRange := false
			for _, r := range st.Ranges {
				inRange = inRange || r.DC == l.DC && r.First <= l.First && l.Last < r.Next && l.Last <= r.Last
			}
			if !inRange {
				add(ProblemSeqBeyondGlobal, "%s is outside the leased part of %s's ranges", s.what, l.DC)
			}
		}
		for _, set := range [][]seqSpan{grants, ranges, leases} {
			// Sorted by first, span i shares numbers with every later span
			// that starts at or before i's last: each overlapping pair is
			// reported, not only neighbours.
			sort.SliceStable(set, func(i, j int) bool { return set[i].first < set[j].first })
			for i := range set {
				for j := i + 1; j < len(set) && set[j].first <= set[i].last; j++ {
					add(ProblemSeqOverlap, "%s and %s share numbers", set[i].what, set[j].what)
				}
			}
		}
	}
	return out
}
