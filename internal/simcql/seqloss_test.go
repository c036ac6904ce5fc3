package simcql

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// hookedSeqQuerier is the simulated sequences querier with hooks run before
// (fail: an error instead of sending) and after every conditional batch
// (after; reply: an error replacing its reply once it ran, an unknown
// outcome).
type hookedSeqQuerier struct {
	simSeqQuerier
	fail   func(serial gocql.SerialConsistency, stmts []cql.SeqStmt) error
	after  func(serial gocql.SerialConsistency, stmts []cql.SeqStmt, applied bool)
	reply  func(serial gocql.SerialConsistency, stmts []cql.SeqStmt, applied bool) error
	onRead func(cons gocql.Consistency, part string) // after each partition read
}

func (q *hookedSeqQuerier) ReadPartition(ctx context.Context, cons gocql.Consistency, seq, part string) ([]cql.SeqRow, error) {
	rows, err := q.simSeqQuerier.ReadPartition(ctx, cons, seq, part)
	if q.onRead != nil {
		q.onRead(cons, part)
	}
	return rows, err
}

func (q *hookedSeqQuerier) CASBatch(ctx context.Context, serial gocql.SerialConsistency, cons gocql.Consistency, stmts ...cql.SeqStmt) (bool, error) {
	if q.fail != nil {
		if err := q.fail(serial, stmts); err != nil {
			return false, err
		}
	}
	applied, err := q.simSeqQuerier.CASBatch(ctx, serial, cons, stmts...)
	if q.after != nil && err == nil {
		q.after(serial, stmts, applied)
	}
	if q.reply != nil && err == nil {
		if rerr := q.reply(serial, stmts, applied); rerr != nil {
			return false, rerr
		}
	}
	return applied, err
}

// hookedRegistry is a Registry of data centre dc over c whose sequences
// querier runs after after every batch.
func hookedRegistry(t *testing.T, c *simCluster, dc string, q *hookedSeqQuerier) cql.Registry {
	t.Helper()
	return hookedRegistryAt(t, c, dc, q, time.Now)
}

// hookedRegistryAt is hookedRegistry with now as its clock.
func hookedRegistryAt(t *testing.T, c *simCluster, dc string, q *hookedSeqQuerier, now func() time.Time) cql.Registry {
	t.Helper()
	q.simSeqQuerier = simSeqQuerier{c: c, dc: dc}
	c.mu.Lock()
	c.dcs[dc] = true
	c.mu.Unlock()
	r, _ := cassandra.NewBackendRegistry(cql.Backend{
		DC: dc, Consistency: gocql.Quorum, Serial: gocql.Serial, Now: now, Wait: c.wait(dc),
		Names:      &simQuerier{c: c, dc: dc, serial: gocql.Serial},
		Numbers:    &simNumQuerier{c: c, dc: dc},
		Seqs:       q,
		SeqHorizon: time.Hour, SeqFloor: simRangeFloor,
	})
	t.Cleanup(r.Close)
	return r
}

// claimAndLease claims name in r and leases n numbers of seq for it.
func claimAndLease(t *testing.T, r cql.Registry, seq, name string, n uint64) registry.SequenceLease {
	t.Helper()
	ctx := context.Background()
	h, err := r.Claim(ctx, registry.Claim{Name: name, Owner: strings.Repeat("a", 31) + name[len(name)-1:]})
	require.NoError(t, err)
	l, err := r.LeaseSequence(ctx, registry.LeaseRequest{Sequence: seq, Name: name, Owner: h.Owner, Session: h.Session, Size: n, Min: n})
	require.NoError(t, err)
	return l
}

// isRangeInsert is whether stmts is insertRange's INSERT … IF NOT EXISTS.
func isRangeInsert(stmts []cql.SeqStmt) bool {
	return len(stmts) == 1 && strings.Contains(stmts[0].Stmt, "IF NOT EXISTS") && len(stmts[0].Args) > 2 && stmts[0].Args[2] == cql.KindRange
}

func leasesOverlap(a, b registry.SequenceLease) bool { return a.First <= b.Last && b.First <= a.Last }

// A data centre cut off from the cluster's quorum right after its range
// was written leases from it all the same; its replicas then lose its
// partition. The next lease, right after, leaves the grant (younger than
// repairAfter) alone and takes a new range; a minute on, the next grant
// adds the lost range back used up. Nothing is leased twice.
func TestSimLossRightAfterAGrant(t *testing.T) {
	c := newSimCluster(rand.New(rand.NewPCG(7, 7)))
	const dc, seq = "dc1", "s"
	cutOnce := true
	q := &hookedSeqQuerier{after: func(serial gocql.SerialConsistency, stmts []cql.SeqStmt, applied bool) {
		// The range row written at LOCAL_SERIAL: the DC is cut off now.
		if cutOnce && applied && serial == gocql.LocalSerial && isRangeInsert(stmts) {
			cutOnce = false
			c.SetCut(dc, true)
		}
	}}
	now := time.Now()
	r := hookedRegistryAt(t, c, dc, q, func() time.Time { return now })
	_, err := r.CreateSequence(context.Background(), seq, 1, 1_000_000)
	require.NoError(t, err)

	l1 := claimAndLease(t, r, seq, "h1", 8)
	require.False(t, cutOnce, "the data centre was cut off after the range was written")
	c.LoseSequences(dc)
	c.SetCut(dc, false)
	l2 := claimAndLease(t, r, seq, "h2", 8)
	require.False(t, leasesOverlap(l1, l2), "h1 leased [%d, %d], h2 leased [%d, %d] again", l1.First, l1.Last, l2.First, l2.Last)

	now = now.Add(2 * cassandra.SequenceRepairAfter)
	c.LoseSequences(dc)
	l3 := claimAndLease(t, r, seq, "h3", 8)
	for _, l := range []registry.SequenceLease{l1, l2} {
		require.False(t, leasesOverlap(l, l3), "[%d, %d] leased again as [%d, %d]", l.First, l.Last, l3.First, l3.Last)
	}
	st, err := r.SequenceStatus(context.Background(), seq)
	require.NoError(t, err)
	for _, rg := range st.Ranges {
		if rg.First <= l1.First && l1.Last <= rg.Last {
			require.Equal(t, rg.Last+1, rg.Next, "the lost range %v is back used up", rg)
		}
	}
}

// A granter that dies after its grant batch and before the range's insert
// (here: the insert fails, and the lease with it) leaves a grant without
// its range. A minute on, the next grant adds it used up (a gap), whoever
// takes it.
func TestSimLossAfterAGranterDied(t *testing.T) {
	c := newSimCluster(rand.New(rand.NewPCG(8, 8)))
	const dc, seq = "dc1", "s"
	insertFails := true
	q := &hookedSeqQuerier{fail: func(_ gocql.SerialConsistency, stmts []cql.SeqStmt) error {
		if insertFails && isRangeInsert(stmts) {
			return simErrUnavailable
		}
		return nil
	}}
	now := time.Now()
	r := hookedRegistryAt(t, c, dc, q, func() time.Time { return now })
	ctx := context.Background()
	_, err := r.CreateSequence(ctx, seq, 1, 1_000_000)
	require.NoError(t, err)
	h, err := r.Claim(ctx, registry.Claim{Name: "h1", Owner: strings.Repeat("a", 32)})
	require.NoError(t, err)
	_, err = r.LeaseSequence(ctx, registry.LeaseRequest{Sequence: seq, Name: "h1", Owner: h.Owner, Session: h.Session, Size: 8, Min: 8})
	require.ErrorIs(t, err, registry.ErrRegistry, "the range could not be written")
	insertFails = false
	now = now.Add(2 * cassandra.SequenceRepairAfter)
	l := claimAndLease(t, r, seq, "h2", 8)
	st, err := r.SequenceStatus(ctx, seq)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(st.Grants), 2, "the grant without its range, and the one leased from")
	first := st.Grants[0]
	require.False(t, first.First <= l.Last && l.First <= first.Last, "lease [%d, %d] from the abandoned grant [%d, %d]", l.First, l.Last, first.First, first.Last)
}

// A sequence ending at 2^63-1, leased to its end, its data centre's
// partition lost on the way: nothing is leased twice, and the sequence
// ends in exhaustion.
func TestSimLossAtTheTop(t *testing.T) {
	c := newSimCluster(rand.New(rand.NewPCG(10, 10)))
	const dc, seq = "dc1", "s"
	r := hookedRegistry(t, c, dc, &hookedSeqQuerier{})
	ctx := context.Background()
	top := registry.MaxSequence
	_, err := r.CreateSequence(ctx, seq, top-199, top)
	require.NoError(t, err)
	h, err := r.Claim(ctx, registry.Claim{Name: "h1", Owner: strings.Repeat("a", 32)})
	require.NoError(t, err)
	seen := map[uint64]bool{}
	var prev registry.SequenceLease
	lease := func() (registry.SequenceLease, error) {
		l, err := r.LeaseSequence(ctx, registry.LeaseRequest{Sequence: seq, Name: "h1", Owner: h.Owner, Session: h.Session,
			PrevFirst: prev.First, PrevLast: prev.Last, Size: 16, Min: 1})
		if err == nil {
			for n := l.First; n <= l.Last && n >= l.First; n++ {
				require.False(t, seen[n], "%d leased twice", n)
				seen[n] = true
				if n == top {
					break
				}
			}
			prev = l
		}
		return l, err
	}
	for i := 0; ; i++ {
		require.Less(t, i, 100)
		if _, err := lease(); err != nil {
			require.ErrorIs(t, err, registry.ErrExhausted)
			break
		}
		if i == 5 {
			c.Settle()
			require.True(t, c.LoseSequences(dc))
			prev = registry.SequenceLease{}
		}
	}
}

// SequenceStatus reads GLOBAL (grants), then each data centre's
// partition. A grant in between would show a range that the GLOBAL it read
// did not grant, and check-names's audit would report a healthy sequence
// as sequence_beyond_global: GLOBAL is read again, and the status made
// again.
func TestSimStatusReadDuringAGrant(t *testing.T) {
	c := newSimCluster(rand.New(rand.NewPCG(11, 11)))
	const dc, seq = "dc1", "s"
	ctx := context.Background()
	granter := hookedRegistry(t, c, dc, &hookedSeqQuerier{})
	_, err := granter.CreateSequence(ctx, seq, 1, 1_000_000)
	require.NoError(t, err)
	h, err := granter.Claim(ctx, registry.Claim{Name: "h1", Owner: strings.Repeat("a", 32)})
	require.NoError(t, err)
	l, err := granter.LeaseSequence(ctx, registry.LeaseRequest{Sequence: seq, Name: "h1", Owner: h.Owner, Session: h.Session, Size: 8, Min: 8})
	require.NoError(t, err)
	armed := true
	auditor := hookedRegistry(t, c, dc, &hookedSeqQuerier{onRead: func(cons gocql.Consistency, part string) {
		if armed && cons == gocql.Quorum && part == cql.PartGlobal {
			armed = false
			// Right after the auditor's read of GLOBAL: a lease that
			// needs a new range (the data centre's has 56 left).
			_, err := granter.LeaseSequence(ctx, registry.LeaseRequest{Sequence: seq, Name: "h1", Owner: h.Owner, Session: h.Session,
				PrevFirst: l.First, PrevLast: l.Last, Size: 60, Min: 60})
			require.NoError(t, err)
		}
	}})
	st, err := auditor.SequenceStatus(ctx, seq)
	require.NoError(t, err)
	require.False(t, armed)
	require.Empty(t, admin.AuditSequences([]registry.SequenceStatus{st}), "a healthy sequence, read during a grant")
}
