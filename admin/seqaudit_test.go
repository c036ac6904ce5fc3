package admin_test

import (
	"testing"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// AuditSequences finds overlapping ranges, ranges beyond GLOBAL and
// numbers above max, and nothing in a sequence used normally.
func TestAuditSequences(t *testing.T) {
	base := registry.SequenceStatus{
		SequenceInfo: registry.SequenceInfo{Name: "s", Start: 1, Max: 1000, Next: 201},
		Grants:       []registry.SequenceRange{{DC: "dc1", First: 1, Last: 100}, {DC: "dc2", First: 101, Last: 200}},
		Ranges:       []registry.SequenceRange{{DC: "dc1", First: 1, Last: 100, Next: 51}, {DC: "dc2", First: 101, Last: 200, Next: 121}},
		Leases: []registry.SequenceLease{{Name: "h1", DC: "dc1", First: 41, Last: 50},
			{Name: "h2", DC: "dc2", First: 111, Last: 120}},
	}
	require.Empty(t, admin.AuditSequences([]registry.SequenceStatus{base}))
	for _, tc := range []struct {
		what string
		mod  func(s *registry.SequenceStatus)
		want string
	}{
		{"GLOBAL past max", func(s *registry.SequenceStatus) { s.Max = 150 }, admin.ProblemSeqAboveMax},
		{"next past max+1", func(s *registry.SequenceStatus) { s.Next = 1002 }, admin.ProblemSeqAboveMax},
		{"range next past its end", func(s *registry.SequenceStatus) { s.Ranges[0].Next = 102 }, admin.ProblemSeqAboveMax},
		{"lease above max", func(s *registry.SequenceStatus) { s.Max = 115; s.Next = 116 }, admin.ProblemSeqAboveMax},
		{"next below start", func(s *registry.SequenceStatus) { s.Start = 202 }, admin.ProblemSeqBelowStart},
		{"grant and range below start", func(s *registry.SequenceStatus) { s.Start = 2 }, admin.ProblemSeqBelowStart},
		{"lease below start", func(s *registry.SequenceStatus) { s.Start = 42 }, admin.ProblemSeqBelowStart},
		{"grant at GLOBAL's next", func(s *registry.SequenceStatus) { s.Next = 150 }, admin.ProblemSeqBeyondGlobal},
		{"range not granted", func(s *registry.SequenceStatus) { s.Ranges[1].DC = "dc1" }, admin.ProblemSeqBeyondGlobal},
		{"lease beyond the leased part", func(s *registry.SequenceStatus) {
			s.Leases[0] = registry.SequenceLease{Name: "h1", DC: "dc1", First: 45, Last: 60}
		}, admin.ProblemSeqBeyondGlobal},
		{"lease in another DC's range", func(s *registry.SequenceStatus) { s.Leases[0].DC = "dc2" }, admin.ProblemSeqBeyondGlobal},
		{"grants overlap", func(s *registry.SequenceStatus) { s.Grants[1].First = 100 }, admin.ProblemSeqOverlap},
		{"ranges overlap", func(s *registry.SequenceStatus) {
			s.Ranges = append(s.Ranges, registry.SequenceRange{DC: "dc1", First: 90, Last: 95, Next: 90})
		}, admin.ProblemSeqOverlap},
		{"leases overlap", func(s *registry.SequenceStatus) {
			s.Leases = append(s.Leases, registry.SequenceLease{Name: "h3", DC: "dc1", First: 50, Last: 50})
		}, admin.ProblemSeqOverlap},
	} {
		st := base
		st.Grants = append([]registry.SequenceRange(nil), base.Grants...)
		st.Ranges = append([]registry.SequenceRange(nil), base.Ranges...)
		st.Leases = append([]registry.SequenceLease(nil), base.Leases...)
		tc.mod(&st)
		probs := admin.AuditSequences([]registry.SequenceStatus{st})
		kinds := map[string]bool{}
		for _, p := range probs {
			kinds[p.Kind] = true
			require.Equal(t, "s", p.Name)
			require.Contains(t, p.Detail, `sequence "s"`)
		}
		require.True(t, kinds[tc.want], "%s: want %s, got %+v", tc.what, tc.want, probs)
	}
}

// Every overlapping pair is reported, not only neighbours once sorted: in
// [1,100], [10,20], [30,40] the first shares numbers with both others,
// and the other two share none.
func TestAuditSequencesEveryOverlappingPair(t *testing.T) {
	lease := func(name string, first, last uint64) registry.SequenceLease {
		return registry.SequenceLease{Name: name, DC: "dc1", First: first, Last: last}
	}
	st := registry.SequenceStatus{
		SequenceInfo: registry.SequenceInfo{Name: "s", Start: 1, Max: 1000, Next: 1001},
		Grants:       []registry.SequenceRange{{DC: "dc1", First: 1, Last: 1000}},
		Ranges:       []registry.SequenceRange{{DC: "dc1", First: 1, Last: 1000, Next: 101}},
		// Listed out of order: the audit sorts them itself.
		Leases: []registry.SequenceLease{lease("c", 30, 40), lease("a", 1, 100), lease("b", 10, 20)},
	}
	var got []string
	for _, p := range admin.AuditSequences([]registry.SequenceStatus{st}) {
		require.Equal(t, admin.ProblemSeqOverlap, p.Kind, "%+v", p)
		got = append(got, p.Detail)
	}
	require.Equal(t, []string{
		`sequence "s": lease of host a in dc1 [1, 100] and lease of host b in dc1 [10, 20] share numbers`,
		`sequence "s": lease of host a in dc1 [1, 100] and lease of host c in dc1 [30, 40] share numbers`,
	}, got)

	// The same for data-centre ranges and GLOBAL's grants.
	st.Leases = nil
	st.Next = 1001
	st.Grants = []registry.SequenceRange{{DC: "dc1", First: 1, Last: 100}, {DC: "dc2", First: 10, Last: 20}, {DC: "dc3", First: 30, Last: 40}}
	st.Ranges = append([]registry.SequenceRange(nil), st.Grants...)
	for i := range st.Ranges {
		st.Ranges[i].Next = st.Ranges[i].First
	}
	n := 0
	for _, p := range admin.AuditSequences([]registry.SequenceStatus{st}) {
		require.Equal(t, admin.ProblemSeqOverlap, p.Kind, "%+v", p)
		require.Contains(t, p.Detail, "dc1 [1, 100] and")
		n++
	}
	require.Equal(t, 4, n, "two pairs of grants and two of ranges")
}
