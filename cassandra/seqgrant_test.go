package cassandra

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// A sequence whose max is 2^63-1 is used up over many grants and leases of
// two hosts: every number from start to 2^63-1 exactly once (the last one
// included: ErrExhausted is not one number early), none below start,
// then ErrExhausted saying GLOBAL and the data centre are used up.
func TestSequenceExhaustMaxInt64OverGrants(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	// Ranges of 16 numbers whatever the rate (a horizon of 1 ns).
	require.NoError(t, reg.SetSequenceSizing(time.Nanosecond, 16))
	// 6 ranges of 16, then GLOBAL has one number left: the last grant is
	// of exactly one number.
	const count = 97
	start := registry.MaxSequence - count + 1
	_, err := reg.CreateSequence(t.Context(), "top", start, registry.MaxSequence)
	require.NoError(t, err)
	hosts := []registry.Holder{reg.claimForTest(t, "host_a"), reg.claimForTest(t, "host_b")}
	prev := map[string]registry.SequenceLease{}
	seen := map[uint64]bool{}
	var last uint64
	var exhausted error
	for i := 0; i < 4*count && exhausted == nil; i++ {
		h := hosts[i%2]
		p := prev[h.Name]
		l, err := reg.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: "top", Name: h.Name, Owner: h.Owner, Session: h.Session,
			PrevFirst: p.First, PrevLast: p.Last, Size: 5, Min: 1})
		if errors.Is(err, snapid.ErrExhausted) {
			exhausted = err
			break
		}
		require.NoError(t, err, "lease %d", i)
		prev[h.Name] = l
		for n := l.First; n <= l.Last && n >= l.First; n++ {
			require.False(t, n < start || seen[n], "lease %v: %d below start or leased twice", l, n)
			seen[n] = true
			last = max(last, n)
			if n == registry.MaxSequence {
				break
			}
		}
	}
	reg.seqs.wg.Wait()
	require.Equal(t, count, len(seen), "every number from start to 2^63-1")
	require.Equal(t, registry.MaxSequence, last, "the last number leased is 2^63-1")
	var e *snapid.SequenceExhaustedError
	require.ErrorAs(t, exhausted, &e)
	require.Zero(t, e.DCLeft+e.GlobalLeft, "nothing left: %v", e)
	st, err := reg.SequenceStatus(t.Context(), "top")
	require.NoError(t, err)
	require.Equal(t, registry.MaxSequence+1, st.Next)
	require.GreaterOrEqual(t, len(st.Grants), 5, "used up over several grants")
}

// A host's lease takes at most an eighth of its data centre's range (or
// the fewest numbers the host asked for), however large a lease it asks
// for: the data centre's hosts share each range.
func TestSequenceLeaseCappedByRange(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	require.NoError(t, reg.SetSequenceSizing(DefaultSequenceHorizon, 80))
	_, err := reg.CreateSequence(t.Context(), "cap", 1, 1_000_000)
	require.NoError(t, err)
	h := reg.claimForTest(t, "host_a")
	var prev registry.SequenceLease
	for i, tc := range []struct{ size, min uint64 }{{1000, 1}, {1000, 1}, {1000, 20}, {5, 1}} {
		l, err := reg.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: "cap", Name: h.Name, Owner: h.Owner, Session: h.Session,
			PrevFirst: prev.First, PrevLast: prev.Last, Size: tc.size, Min: tc.min})
		require.NoError(t, err, "lease %d", i)
		prev = l
		st, err := reg.SequenceStatus(t.Context(), "cap")
		require.NoError(t, err)
		var rg *registry.SequenceRange
		for j := range st.Ranges {
			if r := &st.Ranges[j]; l.First >= r.First && l.Last <= r.Last {
				rg = r
			}
		}
		require.NotNil(t, rg, "lease %v lies in a range of %v", l, st.Ranges)
		want := min(tc.size, max(tc.min, (rg.Last-rg.First+1)/8))
		require.Equal(t, want, l.Last-l.First+1, "lease %d %v from range [%d, %d], size %d min %d", i, l, rg.First, rg.Last, tc.size, tc.min)
	}
	reg.seqs.wg.Wait()
}

// A stored next number that cannot have been written (negative, or past
// its row's last+1) is ErrCorruptSequence, not 0: nothing is leased from
// it, and nothing changes. Null is "used up" (last+1) only when a grant
// reaches max.
func TestSequenceStoredNextBoundaries(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	h := reg.claimForTest(t, "host_a")
	dc, err := reg.DataCentre(t.Context())
	require.NoError(t, err)
	table := `"` + ks.Name + `".sequences`
	_, err = reg.CreateSequence(t.Context(), "first", 1, 10) // creates the table
	require.NoError(t, err)
	lease := func(seq string) error {
		_, err := reg.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: seq, Name: h.Name, Owner: h.Owner, Session: h.Session, Size: 1, Min: 1})
		return err
	}
	const top = int64(registry.MaxSequence)
	for i, tc := range []struct {
		next    *int64 // GLOBAL's stored next, max 2^63-1, start 1
		corrupt bool
	}{
		{ptr(0), true}, {ptr(-1), true}, {ptr(-top - 1), true}, {ptr(1), false}, {ptr(top - 1), false}, {ptr(top), false}, {nil, false},
	} {
		seq := fmt.Sprintf("g%d", i)
		require.NoError(t, ks.Admin.Query(`INSERT INTO `+table+` (seq, part, kind, key, first, start, max, next) VALUES (?, 'global', 'global', '', 0, 1, ?, ?)`,
			seq, top, tc.next).Exec())
		err := lease(seq)
		_, serr := reg.SequenceStatus(t.Context(), seq)
		if tc.corrupt {
			require.ErrorIs(t, err, registry.ErrCorruptSequence, "GLOBAL next %d", *tc.next)
			require.ErrorIs(t, serr, registry.ErrCorruptSequence)
			continue
		}
		if tc.next == nil {
			// Null is "used up" only when a grant reaches max; on a
			// sequence that granted nothing it is corruption.
			require.ErrorIs(t, err, registry.ErrCorruptSequence, "GLOBAL next null with no grant")
			require.NotErrorIs(t, err, snapid.ErrExhausted)
			continue
		}
		require.NoError(t, serr)
		require.NoError(t, err, "GLOBAL next %d", *tc.next)
	}
	// A range whose stored next is negative.
	seq := "r"
	_, err = reg.CreateSequence(t.Context(), seq, 10, 100)
	require.NoError(t, err)
	require.NoError(t, ks.Admin.Query(`INSERT INTO `+table+` (seq, part, kind, key, first, last, next) VALUES (?, ?, 'range', '', 10, 100, ?)`,
		seq, cql.DCPart(dc), int64(-1<<63)).Exec())
	require.ErrorIs(t, lease(seq), registry.ErrCorruptSequence)
	st, err := reg.SequenceStatus(t.Context(), seq)
	require.ErrorIs(t, err, registry.ErrCorruptSequence)
	require.Equal(t, uint64(10), st.Next, "GLOBAL read before the range: unchanged")
}

func ptr(v int64) *int64 { return &v }

// A data centre whose partition lost its range and host rows (a replica
// that lost the table, a restore that predates the grant) never leases a
// number again: the ranges GLOBAL records as granted to it come back used
// up, and the next lease comes from a new grant above them, for a new host
// and for the host that leased before. Whichever way the partition is
// kept.
func TestSequenceLostRangeRowsNeverLeasedAgain(t *testing.T) {
	for _, p := range []dcPaxos{{global: true}, {}} {
		t.Run(p.String(), func(t *testing.T) {
			ks := newTestKeyspace(t)
			reg := ks.registry(t)
			keepAt(reg, p)
			require.NoError(t, reg.SetSequenceSizing(DefaultSequenceHorizon, 40))
			_, err := reg.CreateSequence(t.Context(), "lost", 1, registry.MaxSequence)
			require.NoError(t, err)
			dc, err := reg.DataCentre(t.Context())
			require.NoError(t, err)
			require.Equal(t, p, reg.dcPaxos())
			a, b := reg.claimForTest(t, "host_a"), reg.claimForTest(t, "host_b")
			leased := map[uint64]string{}
			prev := map[string]registry.SequenceLease{}
			lease := func(h registry.Holder) {
				t.Helper()
				p := prev[h.Name]
				l, err := reg.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: "lost", Name: h.Name, Owner: h.Owner, Session: h.Session,
					PrevFirst: p.First, PrevLast: p.Last, Size: 5, Min: 1})
				require.NoError(t, err)
				for n := l.First; n <= l.Last; n++ {
					require.Empty(t, leased[n], "%d leased to %s and again to %s", n, leased[n], h.Name)
					leased[n] = h.Name
				}
				prev[h.Name] = l
			}
			lease(a)
			lease(a)
			reg.seqs.wg.Wait()
			// The grant is older than SequenceRepairAfter when its range is found
			// missing: taken for lost, not for one still being written.
			reg.now = func() time.Time { return time.Now().Add(SequenceRepairAfter + time.Minute) }
			ks.Exec(t, `DELETE FROM "`+ks.Name+`".sequences WHERE seq = ? AND part = ?`, "lost", cql.DCPart(dc))
			delete(prev, a.Name) // the registry no longer has a's row: its next lease is a new one
			lease(b)
			lease(a)
			lease(b)
			reg.seqs.wg.Wait()
			st, err := reg.SequenceStatus(t.Context(), "lost")
			require.NoError(t, err)
			for _, rg := range st.Ranges {
				if rg.First == 1 {
					require.Equal(t, rg.Last+1, rg.Next, "the lost range %v comes back used up", rg)
				}
			}
		})
	}
}

// keepAt makes r keep its data centre's partitions as p says, whatever the
// keyspace's replication (the test node's one replica would keep them at
// SERIAL); call it before r is used for sequences.
func keepAt(r *Registry, p dcPaxos) {
	r.seqs.paxosFor = func(map[string]string, string) (dcPaxos, int) { return p, 0 }
}
