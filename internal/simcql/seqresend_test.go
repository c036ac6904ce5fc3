package simcql

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// The granter's range insert is applied but its reply is lost (a write
// timeout). Before the granter resolves that outcome, another host leases
// from the range, and the data centre's partition is lost (the case
// TestSimLossRightAfterAGrant covers). The granter's resolving read finds
// no range row and sends the insert again used up, never whole: nothing
// the other host leased is leased again.
func TestSimRangeResentUsedUpAfterALoss(t *testing.T) {
	c := newSimCluster(rand.New(rand.NewPCG(21, 21)))
	const dc, seq = "dc1", "s"
	ctx := context.Background()
	now := time.Now()
	clock := func() time.Time { return now }
	other := hookedRegistryAt(t, c, dc, &hookedSeqQuerier{}, clock)
	var l2 registry.SequenceLease
	armed := true
	g := hookedRegistryAt(t, c, dc, &hookedSeqQuerier{reply: func(serial gocql.SerialConsistency, stmts []cql.SeqStmt, applied bool) error {
		if !armed || !applied || serial != gocql.LocalSerial || !isRangeInsert(stmts) {
			return nil
		}
		armed = false
		// The range is there: another host leases from it, then the data
		// centre's replicas lose the partition; the granter's reply is lost.
		l2 = claimAndLease(t, other, seq, "h2", 8)
		require.True(t, c.LoseSequences(dc))
		return simErrWriteTimeout
	}}, clock)
	_, err := g.CreateSequence(ctx, seq, 1, 1_000_000)
	require.NoError(t, err)
	l1 := claimAndLease(t, g, seq, "h1", 8)
	require.False(t, armed, "the range insert's reply was lost")
	require.False(t, leasesOverlap(l1, l2), "h2 leased [%d, %d] from the range, lost with the partition; h1 leased [%d, %d] again",
		l2.First, l2.Last, l1.First, l1.Last)
}

// With a repairer's clock more than SequenceRepairAfter ahead
// of the granter's, the grant looks old at once; a third host adds the lost
// range back used up before the granter's resend, which then finds it
// (IF NOT EXISTS). Nothing is leased twice.
func TestSimResendAfterLossRepairedFirstHolds(t *testing.T) {
	c := newSimCluster(rand.New(rand.NewPCG(22, 22)))
	const dc, seq = "dc1", "s"
	ctx := context.Background()
	now := time.Now()
	clock := func() time.Time { return now }
	ahead := func() time.Time { return now.Add(2 * cassandra.SequenceRepairAfter) }
	other := hookedRegistryAt(t, c, dc, &hookedSeqQuerier{}, clock)
	repairer := hookedRegistryAt(t, c, dc, &hookedSeqQuerier{}, ahead)
	var l2, l3 registry.SequenceLease
	armed := true
	g := hookedRegistryAt(t, c, dc, &hookedSeqQuerier{reply: func(serial gocql.SerialConsistency, stmts []cql.SeqStmt, applied bool) error {
		if !armed || !applied || serial != gocql.LocalSerial || !isRangeInsert(stmts) {
			return nil
		}
		armed = false
		l2 = claimAndLease(t, other, seq, "h2", 8)
		require.True(t, c.LoseSequences(dc))
		l3 = claimAndLease(t, repairer, seq, "h3", 8)
		return simErrWriteTimeout
	}}, clock)
	_, err := g.CreateSequence(ctx, seq, 1, 1_000_000)
	require.NoError(t, err)
	h, err := g.Claim(ctx, registry.Claim{Name: "h1", Owner: strings.Repeat("a", 31) + "1"})
	require.NoError(t, err)
	l1, err := g.LeaseSequence(ctx, registry.LeaseRequest{Sequence: seq, Name: "h1", Owner: h.Owner, Session: h.Session, Size: 8, Min: 8})
	require.NoError(t, err)
	require.False(t, armed)
	ls := []registry.SequenceLease{l1, l2, l3}
	for i := range ls {
		for j := i + 1; j < len(ls); j++ {
			require.False(t, leasesOverlap(ls[i], ls[j]), "[%d, %d] and [%d, %d]", ls[i].First, ls[i].Last, ls[j].First, ls[j].Last)
		}
	}
}

// rangeSize estimates the data centre's rate from its latest range's use
// over the time since its grant, by the grant row's `at` (the granter's
// clock) and the Registry's own clock. A host whose clock is 1 ms ahead
// of the granter's (or a lease right after a grant) would make that time
// tiny and the rate huge, and the next grant take the whole rest of a
// capped sequence, leaving another data centre, which never takes a range
// of this one's, exhausted: the interval counts at least
// SequenceRepairAfter, and a range takes at most half of what is left.
func TestSimSkewedClockLeavesOtherDataCentresNumbers(t *testing.T) {
	c := newSimCluster(rand.New(rand.NewPCG(23, 23)))
	const seq = "s"
	ctx := context.Background()
	now := time.Now()
	granter := hookedRegistryAt(t, c, "dc1", &hookedSeqQuerier{}, func() time.Time { return now })
	ahead := hookedRegistryAt(t, c, "dc1", &hookedSeqQuerier{}, func() time.Time { return now.Add(time.Millisecond) })
	other := hookedRegistryAt(t, c, "dc2", &hookedSeqQuerier{}, func() time.Time { return now })
	_, err := granter.CreateSequence(ctx, seq, 1, 1_000_000)
	require.NoError(t, err)
	claimAndLease(t, granter, seq, "h1", simRangeFloor) // dc1's first range, used up
	claimAndLease(t, ahead, seq, "h2", simRangeFloor)   // dc1's second range
	c.Settle()
	st, err := granter.SequenceStatus(ctx, seq)
	require.NoError(t, err)
	for _, g := range st.Grants {
		t.Logf("grant %s [%d, %d]", g.DC, g.First, g.Last)
	}
	h, err := other.Claim(ctx, registry.Claim{Name: "h3", Owner: strings.Repeat("a", 31) + "3"})
	require.NoError(t, err)
	_, err = other.LeaseSequence(ctx, registry.LeaseRequest{Sequence: seq, Name: "h3", Owner: h.Owner, Session: h.Session, Size: 8, Min: 8})
	require.NoError(t, err, "dc2 cannot lease 8 numbers of a million after dc1 leased %d", 2*simRangeFloor)
}
