package cassandra

import (
	"context"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// SequenceStatus, which every host with a sequence open asks for once a
// minute for its metrics, runs no Paxos round: GLOBAL at QUORUM (before
// and after the data centres, to see that no grant came between), its own
// data centre's partition at that data centre's commit consistency. It
// still sees every committed lease.
func TestSequenceStatusReadsWithoutPaxos(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	a := reg.claimForTest(t, "host_a")
	_, err := reg.CreateSequence(t.Context(), "s", 1, 1000)
	require.NoError(t, err)
	got, err := reg.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: "s", Name: a.Name, Owner: a.Owner, Session: a.Session, Size: 7, Min: 1})
	require.NoError(t, err)
	reg.seqs.wg.Wait()
	l := lossySeq(t, reg, func(int, []cql.SeqStmt) lossPlan { return lossPlan{} })
	for range 3 {
		st, err := reg.SequenceStatus(t.Context(), "s")
		require.NoError(t, err)
		require.Len(t, st.Leases, 1)
		require.Equal(t, got.First, st.Leases[0].First, "the committed lease shows")
	}
	dc, err := reg.DataCentre(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]map[gocql.Consistency]int{
		cql.PartGlobal: {gocql.Quorum: 6},
		cql.DCPart(dc): {reg.dcPaxos().commit(): 3},
	}, l.readCounts(), "status reads by partition and consistency")
}

// A lease's wait after losing a round ends with its context, and a wait
// is never longer than its bound (2 s).
func TestLeaseBackoffBounded(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, leaseBackoff(ctx, 30), context.Canceled)
	ctx, cancel = context.WithTimeout(t.Context(), 2100*time.Millisecond)
	defer cancel()
	require.NoError(t, leaseBackoff(ctx, 30), "a wait past its 2 s bound")
}
