package cassandra

import (
	"errors"
	"fmt"
	"testing"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// A GLOBAL row whose next number is below its start (or 0) cannot have
// been written by the registry: it is ErrCorruptSequence, and nothing is
// granted or leased from it.
func TestSequenceCorruptGlobalNextBelowStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		next int64
	}{{"zero", 0}, {"one", 1}, {"below_start", 999}} {
		t.Run(tc.name, func(t *testing.T) {
			ks := newTestKeyspace(t)
			reg := ks.registry(t)
			_, err := reg.CreateSequence(t.Context(), "s", 1000, 2000)
			require.NoError(t, err)
			require.NoError(t, ks.Admin.Query(`UPDATE "`+ks.Name+`".sequences SET next = ? WHERE seq = 's' AND part = 'global' AND kind = 'global' AND key = '' AND first = 0`, tc.next).Exec())
			h := reg.claimForTest(t, "cs_host")
			_, err = reg.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: "s", Name: h.Name, Owner: h.Owner, Session: h.Session, Size: 10, Min: 1})
			require.ErrorIs(t, err, registry.ErrCorruptSequence)
			_, err = reg.SequenceStatus(t.Context(), "s")
			require.ErrorIs(t, err, registry.ErrCorruptSequence)
			var n int
			require.NoError(t, ks.Admin.Query(`SELECT count(*) FROM "`+ks.Name+`".sequences WHERE seq = 's' ALLOW FILTERING`).Scan(&n))
			require.Equal(t, 1, n, "nothing written on a corrupt GLOBAL row")
		})
	}
}

// Re-creating a sequence with a max below its start (a lower --start keeps
// the start) is refused and changes nothing; the sequence stays usable.
func TestSequenceRecreateMaxBelowStartRefused(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	_, err := reg.CreateSequence(t.Context(), "s", 1000, 5000)
	require.NoError(t, err)
	for _, c := range []struct{ start, max uint64 }{{1, 999}, {999, 999}, {1, 1}} {
		_, err = reg.CreateSequence(t.Context(), "s", c.start, c.max)
		require.ErrorIs(t, err, registry.ErrInvalidSequence, "start %d max %d", c.start, c.max)
	}
	st, err := reg.SequenceStatus(t.Context(), "s")
	require.NoError(t, err)
	require.Equal(t, uint64(1000), st.Start)
	require.Equal(t, uint64(5000), st.Max)
	info, err := reg.CreateSequence(t.Context(), "s", 1, 1000)
	require.NoError(t, err, "max equal to the kept start")
	require.Equal(t, uint64(1000), info.Max)
}

// A data centre's range row reaching above the sequence's max (or below
// its start), which the registry cannot have written, is refused as
// ErrCorruptSequence before anything is leased from it.
func TestSequenceCorruptRangeOutsideBounds(t *testing.T) {
	for _, tc := range []struct {
		name, set string
		v         int64
	}{{"last_above_max", "last", 1000000}, {"last_max_plus_1", "last", 101}} {
		t.Run(tc.name, func(t *testing.T) {
			ks := newTestKeyspace(t)
			reg := ks.registry(t)
			_, err := reg.CreateSequence(t.Context(), "s", 1, 100)
			require.NoError(t, err)
			h := reg.claimForTest(t, "cs_host")
			l1, err := reg.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: "s", Name: h.Name, Owner: h.Owner, Session: h.Session, Size: 10, Min: 10})
			require.NoError(t, err)
			reg.seqs.wg.Wait()
			require.NoError(t, ks.Admin.Query(`UPDATE "`+ks.Name+`".sequences SET `+tc.set+` = ? WHERE seq = 's' AND part = ? AND kind = 'range' AND key = '' AND first = 1`,
				tc.v, cql.DCPart(l1.DC)).Exec())
			l2, err := reg.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: "s", Name: h.Name, Owner: h.Owner, Session: h.Session,
				PrevFirst: l1.First, PrevLast: l1.Last, Size: 1000, Min: 1})
			require.ErrorIs(t, err, registry.ErrCorruptSequence, "lease %d-%d", l2.First, l2.Last)
			_, err = reg.SequenceStatus(t.Context(), "s")
			require.ErrorIs(t, err, registry.ErrCorruptSequence)
		})
	}
}

// A sequence whose GLOBAL row was lost while its grants, ranges and leases
// remain is not silently created anew (it would hand the same numbers out
// again): ErrCorruptSequence, nothing written, and leases stay refused.
func TestSequenceGlobalRowLostNotRecreated(t *testing.T) {
	for _, tc := range []struct {
		name, del string
	}{
		{"global_row", `DELETE FROM "%s".sequences WHERE seq = 's' AND part = 'global' AND kind = 'global' AND key = '' AND first = 0`},
		{"global_partition", `DELETE FROM "%s".sequences WHERE seq = 's' AND part = 'global'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ks := newTestKeyspace(t)
			reg := ks.registry(t)
			_, err := reg.CreateSequence(t.Context(), "s", 1, 1000000)
			require.NoError(t, err)
			h := reg.claimForTest(t, "cs_host")
			l1, err := reg.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: "s", Name: h.Name, Owner: h.Owner, Session: h.Session, Size: 10, Min: 10})
			require.NoError(t, err)
			reg.seqs.wg.Wait()
			require.NoError(t, ks.Admin.Query(fmt.Sprintf(tc.del, ks.Name)).Exec())
			var before int
			require.NoError(t, ks.Admin.Query(`SELECT count(*) FROM "`+ks.Name+`".sequences WHERE seq = 's' ALLOW FILTERING`).Scan(&before))
			for _, start := range []uint64{1, l1.Last} {
				_, err = reg.CreateSequence(t.Context(), "s", start, 1000000)
				require.ErrorIs(t, err, registry.ErrCorruptSequence, "start %d", start)
				require.Contains(t, err.Error(), "restore the GLOBAL row")
			}
			var after int
			require.NoError(t, ks.Admin.Query(`SELECT count(*) FROM "`+ks.Name+`".sequences WHERE seq = 's' ALLOW FILTERING`).Scan(&after))
			require.Equal(t, before, after, "nothing written")
		})
	}
}

// GLOBAL's next lost (null) on a sequence that granted nothing is
// corruption, not exhaustion: a null next is written only with the grant
// that reaches max.
func TestSequenceCorruptGlobalNextNullNotExhausted(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	_, err := reg.CreateSequence(t.Context(), "s", 1, 1000)
	require.NoError(t, err)
	require.NoError(t, ks.Admin.Query(`UPDATE "`+ks.Name+`".sequences SET next = null WHERE seq = 's' AND part = 'global' AND kind = 'global' AND key = '' AND first = 0`).Exec())
	h := reg.claimForTest(t, "cs_host")
	_, err = reg.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: "s", Name: h.Name, Owner: h.Owner, Session: h.Session, Size: 10, Min: 1})
	require.ErrorIs(t, err, registry.ErrCorruptSequence)
	require.False(t, errors.Is(err, snapid.ErrExhausted))
}

// CreateSequenceKeepMax keeps the max the conditional update finds (a cap
// set by another host is not undone) and gives a new sequence MaxSequence.
func TestSequenceCreateKeepMax(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	info, err := admin.CreateSequenceKeepMax(t.Context(), reg, "s", 1)
	require.NoError(t, err)
	require.Equal(t, registry.MaxSequence, info.Max)
	_, err = reg.CreateSequence(t.Context(), "s", 1, 2147483647) // another host's 32-bit cap
	require.NoError(t, err)
	info, err = admin.CreateSequenceKeepMax(t.Context(), reg, "s", 5)
	require.NoError(t, err)
	require.Equal(t, uint64(2147483647), info.Max)
	st, err := reg.SequenceStatus(t.Context(), "s")
	require.NoError(t, err)
	require.Equal(t, uint64(2147483647), st.Max, "the cap stays")
	require.Equal(t, uint64(5), st.Start)
	_, err = admin.CreateSequenceKeepMax(t.Context(), reg, "s", 0)
	require.ErrorIs(t, err, registry.ErrInvalidSequence)
}
