package simcql

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

func simRegistry(t *testing.T, c *simCluster, dc string) cql.Registry {
	t.Helper()
	r := c.Registry(dc, time.Now)
	t.Cleanup(r.Close)
	return r
}

// TestSimClusterConformance: the Registry over the simulated cluster,
// with no fault, passes registrytest's conformance suites (names, sequences,
// node numbers): the statements are interpreted as Cassandra runs them.
func TestSimClusterConformance(t *testing.T) {
	c := newSimCluster(rand.New(rand.NewPCG(1, 2)))
	r := simRegistry(t, c, "dc1")
	registrytest.TestRegistry(t, func(*testing.T) registry.Registry { return r })
	registrytest.TestNumberRegistry(t, func(t *testing.T) registry.NumberRegistry {
		return simRegistry(t, newSimCluster(rand.New(rand.NewPCG(3, 4))), "dc1")
	})
}

// TestSimClusterInterprets: a statement is run as written, so a
// condition left out of it is not checked (the simulator finds a
// statement that lost a condition).
func TestSimClusterInterprets(t *testing.T) {
	c := newSimCluster(rand.New(rand.NewPCG(1, 2)))
	r := simRegistry(t, c, "dc1")
	ctx := context.Background()
	owner := strings.Repeat("a", 32)
	h, err := r.Claim(ctx, registry.Claim{Name: "n1", Owner: owner})
	require.NoError(t, err)
	_, err = r.Extend(ctx, "n1", owner, "other-session", 0, 10)
	require.ErrorIs(t, err, snapid.ErrNameTaken, "the session condition holds")

	// The adapter's extend, its session condition left out.
	q := &simQuerier{c: c, dc: "dc1", serial: gocql.Serial}
	noSession := `UPDATE "snapid"."node_names" SET reserved = ?, last_seen = ? WHERE name = ? IF owner = ? AND state = ? AND reserved = ?`
	applied, err := q.CAS(ctx, &cql.Record{}, noSession, int64(10), time.Now(), "n1", owner, registry.StateActive, int64(0))
	require.NoError(t, err)
	require.True(t, applied, "without its session condition the update is applied")
	row, _ := c.Row("n1")
	require.Equal(t, uint64(10), row.Reserved)
	require.Equal(t, h.Session, row.Session)
}

// TestSimClusterAppliedLater: a proposal accepted by a minority, whose
// client got a timeout, may be missed by a serial read and completed
// by the next round; one accepted by a quorum is completed by any read.
func TestSimClusterAppliedLater(t *testing.T) {
	c := newSimCluster(rand.New(rand.NewPCG(1, 2)))
	c.dcs["dc1"] = true
	w := []simWrite{{cols: map[string]any{"name": "n", "state": "x"}}}
	p := c.part(simNames + "n")
	p.pending = &simProposal{writes: w, dc: "dc1", fate: true}
	row, ok := c.Row("n")
	require.True(t, ok)
	require.Equal(t, "x", row.State, "the settled state has it")
	missed := 0
	for range 20 {
		p.pending = &simProposal{writes: w, dc: "dc1", fate: true}
		p.rows = simRows{}
		rs, err := c.read("dc1", gocql.Serial, simNames+"n")
		require.NoError(t, err)
		if _, ok := rs[""]; !ok {
			missed++
			require.NotNil(t, p.pending, "missed by the read, still in flight")
			applied, _, err := c.lwt("dc1", gocql.Serial, simNames+"n", []simCond{{notExists: true}}, w)
			require.NoError(t, err)
			require.False(t, applied, "the next round completes it first: the row exists")
		}
	}
	require.Positive(t, missed, "a serial read may miss a minority's proposal")
	require.Positive(t, c.Reached()["applied-later"])

	p.pending = &simProposal{writes: w, dc: "dc1", decided: true}
	p.rows = simRows{}
	rs, err := c.read("dc1", gocql.Serial, simNames+"n")
	require.NoError(t, err)
	require.Contains(t, rs, "", "a quorum's proposal is completed by a serial read")
}

// TestSimClusterLocalSerialAcrossDCs: LOCAL_SERIAL rounds of two data
// centres on one partition are not linearizable (each sees its own
// replicas); SERIAL ones are.
func TestSimClusterLocalSerialAcrossDCs(t *testing.T) {
	c := newSimCluster(rand.New(rand.NewPCG(1, 2)))
	c.dcs["dc0"], c.dcs["dc1"] = true, true
	pk := simSeqs + "s"
	set := func(v int64) []simWrite { return []simWrite{{cols: map[string]any{"next": v}}} }
	cond := func(v int64) []simCond { return []simCond{{eq: map[string]any{"next": v}}} }
	ok, _, err := c.lwt("dc0", gocql.Serial, pk, []simCond{{notExists: true}}, set(1))
	require.NoError(t, err)
	require.True(t, ok)
	ok, _, err = c.lwt("dc0", gocql.LocalSerial, pk, cond(1), set(2))
	require.NoError(t, err)
	require.True(t, ok)
	ok, _, err = c.lwt("dc1", gocql.LocalSerial, pk, cond(1), set(3))
	require.NoError(t, err)
	require.True(t, ok, "dc1's replicas had not seen dc0's LOCAL_SERIAL commit")
	ok, _, err = c.lwt("dc1", gocql.Serial, pk, cond(1), set(4))
	require.NoError(t, err)
	require.False(t, ok, "SERIAL sees every commit")
}

// TestSimClusterFaults: with faults on, requests fail as gocql reports
// them, and the Registry classifies them: every call either succeeds or
// fails with snapid.ErrRegistry (or a definite refusal), and a cut data
// centre works at LOCAL_SERIAL only.
func TestSimClusterFaults(t *testing.T) {
	c := newSimCluster(rand.New(rand.NewPCG(5, 6)))
	r := simRegistry(t, c, "dc1")
	c.SetFaultRate(0.5)
	ctx := context.Background()
	owner := strings.Repeat("b", 32)
	var okN, failN int
	for i := range 200 {
		_, err := r.Claim(ctx, registry.Claim{Name: "n" + string(rune('a'+i%26)), Owner: owner})
		switch {
		case err == nil:
			okN++
		case errors.Is(err, snapid.ErrRegistry):
			failN++
		default:
			t.Fatalf("claim: %v", err)
		}
	}
	require.Positive(t, okN)
	require.Positive(t, failN)
	require.Positive(t, c.Faults())

	c.SetFaultRate(0)
	c.SetCut("dc1", true)
	_, err := r.Get(ctx, "na")
	require.ErrorIs(t, err, snapid.ErrRegistry, "SERIAL from a cut data centre")
	var re gocql.RequestError
	require.ErrorAs(t, err, &re)
	require.Equal(t, gocql.ErrCodeUnavailable, re.Code())
	_, err = (&simSeqQuerier{c: c, dc: "dc1"}).ReadPartition(ctx, gocql.LocalSerial, "s", cql.DCPart("dc1"))
	require.NoError(t, err, "LOCAL_SERIAL in a cut data centre")
}
