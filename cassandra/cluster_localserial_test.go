package cassandra

import (
	"context"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/cql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClusterLocalSerialSplitBrain shows why name rows are
// read-compare-written at SERIAL only (LOCAL_SERIAL would let two cut-off data centres both win one name). With the two data
// centres cut apart, raw claims of one new name (INSERT … IF NOT EXISTS,
// as the registry's) through a coordinator on each side both apply at
// LOCAL_SERIAL: each side's Paxos round involves only its own replicas,
// so two hosts would each believe they hold the name. At SERIAL the Paxos
// round needs a quorum of all replicas: at most one side (the one holding
// a quorum) wins.
func TestClusterLocalSerialSplitBrain(t *testing.T) {
	e := newClusterEnv(t)
	qdc, mdc := e.sides(t)
	nq, nm := e.c.NodesIn(qdc)[0], e.c.NodesIn(mdc)[0]
	sides := []struct {
		dc string
		s  *gocql.Session
	}{{qdc, e.c.Session(t, nq)}, {mdc, e.c.Session(t, nm)}}
	insert := newStatements(e.ks.Name, DefaultTable).insert
	claim := func(s *gocql.Session, name, owner string, cons, serial gocql.Consistency) (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		now := time.Now()
		var rec cql.Record
		q := s.Query(insert, name, owner, owner+".example", "192.0.2.9", "m-"+owner, now, now, int64(0), "active", owner).
			Consistency(cons).SerialConsistency(serial)
		return q.MapScanCASContext(ctx, rec.DestMap())
	}

	e.c.Partition(t, qdc, mdc)
	e.c.WaitSeesDown(t, len(e.c.NodesIn(qdc)), e.c.NodesIn(mdc)...)
	e.c.WaitSeesDown(t, len(e.c.NodesIn(mdc)), e.c.NodesIn(qdc)...)

	// LOCAL_SERIAL (commit at LOCAL_QUORUM): both sides win one name.
	won := 0
	for _, side := range sides {
		applied, err := claim(side.s, "split_local", "owner_"+side.dc, gocql.LocalQuorum, gocql.LocalSerial)
		t.Logf("LOCAL_SERIAL claim of split_local through %s: applied %v, err %v", side.dc, applied, err)
		require.NoError(t, err)
		if applied {
			won++
		}
	}
	assert.Equal(t, 2, won, "at LOCAL_SERIAL both sides of the cut claim the same name")

	// SERIAL (commit at QUORUM): at most one side wins, the one with a
	// quorum of the replicas.
	won = 0
	for _, side := range sides {
		applied, err := claim(side.s, "split_serial", "owner_"+side.dc, gocql.Quorum, gocql.Serial)
		t.Logf("SERIAL claim of split_serial through %s: applied %v, err %v", side.dc, applied, err)
		if side.dc == qdc {
			require.NoError(t, err)
			require.True(t, applied, "the side with a quorum wins")
		}
		if err == nil && applied {
			won++
		}
	}
	assert.Equal(t, 1, won, "at SERIAL at most one side wins")

	e.c.Heal(t)
	e.c.WaitAllUp(t)
	s := e.c.Session(t)
	rec, found := e.serialRow(t, s, "split_local")
	require.True(t, found)
	t.Logf("after healing, split_local is held by %s: the other side's win at LOCAL_SERIAL is silently lost", str(rec.Owner))
	rec, found = e.serialRow(t, s, "split_serial")
	require.True(t, found)
	assert.Equal(t, "owner_"+qdc, str(rec.Owner), "split_serial is held by the side that won at SERIAL")
}
