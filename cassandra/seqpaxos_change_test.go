package cassandra

import (
	"fmt"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// A Registry decides how its data centre's partition is kept at its first
// sequence call. After ALTER KEYSPACE gives the data centre 3 replicas, a
// Registry opened before it (a host not restarted) would run SERIAL on the
// partition while one opened after runs LOCAL_SERIAL: once it reads the
// replication again (at most paxosRecheck later), it refuses to write the
// partition, saying what changed and what to do, and writes nothing.
func TestSequenceReplicationChangeRefused(t *testing.T) {
	ks := newTestKeyspace(t)
	old := ks.registry(t)
	_, err := old.CreateSequence(t.Context(), "change", 1, registry.MaxSequence)
	require.NoError(t, err)
	dc, err := old.DataCentre(t.Context())
	require.NoError(t, err)
	require.Equal(t, dcPaxos{global: true}, old.dcPaxos(), "one replica: SERIAL")
	h := old.claimForTest(t, "host_old")
	req := registry.LeaseRequest{Sequence: "change", Name: h.Name, Owner: h.Owner, Session: h.Session, Size: 5, Min: 1}
	l, err := old.LeaseSequence(t.Context(), req)
	require.NoError(t, err)
	old.seqs.wg.Wait()

	ks.Exec(t, fmt.Sprintf(`ALTER KEYSPACE "%s" WITH replication = {'class': 'NetworkTopologyStrategy', '%s': 3}`, ks.Name, dc))
	fresh := ks.registry(t)
	_, err = fresh.DataCentre(t.Context())
	require.NoError(t, err)
	require.Equal(t, dcPaxos{}, fresh.dcPaxos(), "three replicas: LOCAL_SERIAL")

	old.now = func() time.Time { return time.Now().Add(paxosRecheck) }
	req.PrevFirst, req.PrevLast = l.First, l.Last
	_, err = old.LeaseSequence(t.Context(), req)
	require.ErrorIs(t, err, registry.ErrRegistry)
	require.ErrorContains(t, err, "replication changed while this program ran")
	require.ErrorContains(t, err, "kept at SERIAL, now at LOCAL_SERIAL")
	var last int64
	require.NoError(t, ks.Admin.Query(`SELECT lease_last FROM "`+ks.Name+`".sequences WHERE seq = ? AND part = ? AND kind = ? AND key = ? AND first = 0`,
		"change", cql.DCPart(dc), cql.KindHost, h.Name).Consistency(gocql.One).Scan(&last))
	require.Equal(t, int64(l.Last), last, "nothing was leased")
}
