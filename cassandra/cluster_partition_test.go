package cassandra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sides returns the data centre holding a quorum of the replicas (more
// than half of the nodes) and one that does not.
func (e *clusterEnv) sides(t *testing.T) (quorum, minority string) {
	t.Helper()
	for _, dc := range e.c.DataCentres() {
		if 2*len(e.c.NodesIn(dc)) > e.c.N() {
			quorum = dc
		} else if minority == "" {
			minority = dc
		}
	}
	require.NotEmpty(t, quorum, "no data centre holds a quorum")
	require.NotEmpty(t, minority, "no second data centre")
	return quorum, minority
}

// sideConfig routes a registry to dc's nodes: contact points there and
// LocalDC, so that its statements are coordinated on that side of a cut
// (clients still reach every node; only storage traffic is cut).
func (e *clusterEnv) sideConfig(dc string) func(*Config) {
	return func(c *Config) {
		c.Hosts = nil
		for _, i := range e.c.NodesIn(dc) {
			c.Hosts = append(c.Hosts, e.c.Addr(i))
		}
		c.LocalDC = dc
	}
}

// drawAll issues n ids from g into log and returns the last number.
func drawAll(t *testing.T, g *snapid.Generator, log *idLog, n int) uint64 {
	t.Helper()
	var last uint64
	for range n {
		id, err := g.NextID()
		require.NoError(t, err)
		log.add(id.String())
		last = id.Number
	}
	return last
}

// TestClusterPartition cuts the two data centres apart (nftables on the
// storage port, both ways): running Generators on both sides keep issuing
// up to their marks (the side with a quorum keeps extending them); a new
// claim on the side without a quorum fails cleanly and issues nothing,
// while the same name is claimed on the other side; after healing nothing
// was issued twice and the audit of the registry is clean.
//
// A host restarted during the cut: on the side with a quorum it claims its
// name again (same owner token) and goes on issuing above what it issued;
// on the other side its claim fails (the serial read and the conditional
// write need a quorum of all replicas), so it issues nothing at all, not
// even from the reservation it held before the restart, until the cut
// heals; then it continues above that reservation. (The reservation left
// in its mark file is not used by a new process: only a claim proves the
// name is still this host's.)
func TestClusterPartition(t *testing.T) {
	e := newClusterEnv(t)
	qdc, mdc := e.sides(t)
	regQ := e.registry(t, e.sideConfig(qdc))
	regM := e.registry(t, e.sideConfig(mdc))
	dir := t.TempDir()
	path := func(n string) string { return filepath.Join(dir, n+".u64") }
	const step = 20
	ids := newIDLog()

	gQ, err := openGen(t, path("part_q"), "part_q", regQ, step)
	require.NoError(t, err)
	defer func() { gQ.Close() }()
	// The side without a quorum: its calls fail only at their deadline
	// (an unknown outcome is read at SERIAL until then), so a short one
	// keeps the test short; before the cut, calls take well under it.
	minority := registryTimeout(8 * time.Second)
	gM, err := openGen(t, path("part_m"), "part_m", regM, step, minority)
	require.NoError(t, err)
	defer func() { gM.Close() }()
	drawAll(t, gQ, ids, 5)
	drawAll(t, gM, ids, 5)
	markM := waitMarkSettled(t, regQ, "part_m")

	e.c.Partition(t, qdc, mdc)
	t.Logf("cut %s %v from %s %v; part_m's mark is %d", qdc, e.c.NodesIn(qdc), mdc, e.c.NodesIn(mdc), markM)
	e.c.WaitSeesDown(t, len(e.c.NodesIn(qdc)), e.c.NodesIn(mdc)...)
	e.c.WaitSeesDown(t, len(e.c.NodesIn(mdc)), e.c.NodesIn(qdc)...)

	// The side without a quorum issues up to its mark, then stops.
	var lastM uint64
	for {
		id, err := gM.NextID()
		if err != nil {
			t.Logf("%s side: part_m stops after %d: %v", mdc, lastM, err)
			require.ErrorIs(t, err, snapid.ErrReservationExhausted)
			break
		}
		ids.add(id.String())
		require.LessOrEqual(t, id.Number, markM)
		lastM = id.Number
	}
	require.Equal(t, markM, lastM, "it went on up to its mark")
	// The side with a quorum extends its mark and goes on.
	lastQ := drawAll(t, gQ, ids, 3*step)
	t.Logf("%s side: part_q issued up to %d, past its first steps", qdc, lastQ)

	// One new name claimed on both sides: the side without a quorum fails
	// and issues nothing; the other wins.
	_, err = openGen(t, path("new_m"), "part_new", regM, step, minority)
	t.Logf("%s side: claim of part_new: %v", mdc, err)
	require.ErrorIs(t, err, snapid.ErrRegistry)
	assert.Zero(t, counterOf(t, path("new_m")), "nothing issued by a failed claim")
	gNew, err := openGen(t, path("new_q"), "part_new", regQ, step)
	require.NoError(t, err, "%s side: claim of part_new", qdc)
	drawAll(t, gNew, ids, 3)
	require.NoError(t, gNew.Close())

	// Restarts during the cut.
	err = gM.Close()
	t.Logf("%s side: closing part_m (cannot return its reservation): %v", mdc, err)
	_, err = openGen(t, path("part_m"), "part_m", regM, step, minority)
	t.Logf("%s side: restarting part_m: %v", mdc, err)
	require.ErrorIs(t, err, snapid.ErrRegistry, "a restarted host on the side without a quorum cannot claim")
	assert.Equal(t, markM, counterOf(t, path("part_m")), "and issues nothing")
	require.NoError(t, gQ.Close())
	gQ, err = openGen(t, path("part_q"), "part_q", regQ, step)
	require.NoError(t, err, "a restarted host on the side with a quorum claims again")
	require.Greater(t, drawAll(t, gQ, ids, 5), lastQ)

	e.c.Heal(t)
	e.c.WaitAllUp(t)
	t.Log("healed")
	gM, err = openGen(t, path("part_m"), "part_m", regM, step)
	require.NoError(t, err, "claims work again after healing")
	first, err := gM.Next()
	require.NoError(t, err)
	require.Equal(t, markM+1, first, "part_m continues above its old reservation")
	ids.add(fmt.Sprintf("part_m-%d", first))
	drawAll(t, gM, ids, 2*step)
	drawAll(t, gQ, ids, 2*step)

	assert.Empty(t, ids.duplicates(), "ids issued twice")
	t.Logf("%d ids issued, none twice", ids.count())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := regQ.Get(ctx, "part_new")
	require.NoError(t, err)
	owner, err := os.ReadFile(path("new_q") + ".owner")
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSpace(string(owner)), h.Owner, "part_new is held by the claimer on the side with a quorum")
	rows, err := regQ.List(ctx)
	require.NoError(t, err)
	rep := admin.Audit(rows, admin.AuditConfig{})
	assert.True(t, rep.OK(), "audit after healing: %+v", rep.Problems)
	assert.Equal(t, 3, rep.Rows)
}
