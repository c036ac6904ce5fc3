package cassandra

import (
	"context"
	"testing"

	"github.com/snapid/snapid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// registryOnSession returns a registry on ks.tbl sharing r's session (so
// that its set-up can be run by hand), whose waits for schema agreement are
// counted in *waits.
func registryOnSession(r *Registry, ks, tbl string, waits *int) *Registry {
	q := r.q.(*gocqlQuerier)
	r2 := newRegistry(r.session, &gocqlQuerier{s: r.session, cons: q.cons, serial: q.serial}, ks, tbl, nil)
	r2.awaitSchema = func(ctx context.Context) error {
		*waits++
		return r.session.AwaitSchemaAgreement(ctx)
	}
	return r2
}

// setUpErr drops setUp's report of what it created.
func setUpErr(_ bool, err error) error { return err }

// Waiting for schema agreement can last until its timeout when a node is
// down (gocql counts it), so a start on an existing schema must not wait;
// a start that created something waits once.
func TestCassandraSchemaAgreementOnlyAfterChange(t *testing.T) {
	k, ctx, r := oneRegistry(t)
	cfg := k.config()

	waits := 0
	require.NoError(t, setUpErr(registryOnSession(r, k.Name, DefaultTable, &waits).setUp(ctx, cfg, !cfg.NoCreate)))
	assert.Zero(t, waits, "the schema existed: no wait")
	cfg.NoCreate = true
	require.NoError(t, setUpErr(registryOnSession(r, k.Name, DefaultTable, &waits).setUp(ctx, cfg, !cfg.NoCreate)))
	assert.Zero(t, waits, "check-names' read-only start does not wait")

	cfg.NoCreate = false
	require.NoError(t, setUpErr(registryOnSession(r, k.Name, "other_names", &waits).setUp(ctx, cfg, !cfg.NoCreate)))
	assert.Equal(t, 1, waits, "creating the table waits once")

	k2 := newTestKeyspace(t) // not created yet: keyspace and table are made
	waits = 0
	require.NoError(t, setUpErr(registryOnSession(r, k2.Name, DefaultTable, &waits).setUp(ctx, k2.config(), true)))
	assert.Equal(t, 1, waits, "creating keyspace and table waits once")
	assert.True(t, k2.keyspaceExists(t, k2.Name))
}

func TestCreateSchema(t *testing.T) {
	k := newTestKeyspace(t)
	ctx := testCtx(t)
	dc := k.LocalDC(t)
	cfg := k.config()
	cfg.Replication = map[string]string{"class": "NetworkTopologyStrategy", dc: "1"}
	cfg.NoCreate = true // ignored: creating is what it is for

	created, err := CreateSchema(ctx, cfg)
	require.NoError(t, err)
	assert.True(t, created)
	assert.Equal(t, map[string]string{"class": "org.apache.cassandra.locator.NetworkTopologyStrategy", dc: "1"},
		k.Replication(t, k.Name))
	assert.True(t, k.tableExists(t, DefaultTable))
	assert.True(t, k.tableExists(t, seqTable), "the sequences' table too, so that hosts need no CREATE for it")

	created, err = CreateSchema(ctx, cfg)
	require.NoError(t, err)
	assert.False(t, created, "idempotent: nothing to create the second time")

	// The registry works on it without creating anything.
	r := k.registry(t, func(c *Config) { c.NoCreate = true })
	mustClaim(t, ctx, r, testName(t), "owner_a")

	// Invalid replication: refused before connecting, nothing created.
	k2 := newTestKeyspace(t)
	cfg2 := k2.config()
	cfg2.Replication = map[string]string{"class": "NetworkTopologyStrategy", dc: "0"}
	_, err = CreateSchema(ctx, cfg2)
	require.ErrorIs(t, err, snapid.ErrInvalidOption)
	assert.False(t, k2.keyspaceExists(t, k2.Name))
}
