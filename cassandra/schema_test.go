package cassandra

import (
	"context"
	"errors"
	"slices"
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

// Nodes that do not agree on the schema in time stop SetUpSchema where it
// is: its error is ErrSchemaAgreement (and ErrRegistry), its report says
// what it created, which stays, and running it again once the nodes agree
// creates only what is missing. It waits for the nodes to agree before it
// creates anything, so that what it finds is what every node has.
func TestSetUpSchemaAgreementNotReached(t *testing.T) {
	_, ctx, r := oneRegistry(t)
	k := newTestKeyspace(t) // not created yet
	cfg := k.config()
	// setUp returns a registry on k's keyspace whose waits for schema
	// agreement fail when fail says so (the wait's number, from 1), and
	// the count of its waits.
	setUp := func(fail func(n int) bool) (SchemaReport, int, error) {
		waits := 0
		r2 := registryOnSession(r, k.Name, DefaultTable, &waits)
		r2.awaitSchema = func(ctx context.Context) error {
			waits++
			if fail(waits) {
				return errors.New("gocql: cluster schema versions not consistent: [a b]")
			}
			return r.session.AwaitSchemaAgreement(ctx)
		}
		rep, err := r2.setUpSchema(ctx, cfg)
		return rep, waits, err
	}
	tables := []string{DefaultTable, seqTable, DefaultTable + numbersSuffix}

	for i, tc := range []struct {
		name     string
		fail     func(n int) bool
		ks       bool     // KeyspaceCreated
		created  []string // TablesCreated
		agreeErr bool
		waits    int
		exist    []string // the tables there afterwards
	}{
		{"nodes never agree: nothing is created", func(int) bool { return true }, false, nil, true, 1, nil},
		{"no agreement after the keyspace and the first table", func(n int) bool { return n == 2 }, true, []string{DefaultTable}, true, 2, tables[:1]},
		{"run again: only what is missing", func(int) bool { return false }, false, tables[1:], false, 3, tables},
		{"and again: nothing", func(int) bool { return false }, false, nil, false, 1, tables},
	} {
		rep, waits, err := setUp(tc.fail)
		if tc.agreeErr {
			require.ErrorIs(t, err, ErrSchemaAgreement, tc.name)
			require.ErrorIs(t, err, snapid.ErrRegistry, tc.name)
			assert.Contains(t, err.Error(), "the cluster's nodes did not agree on the schema within", tc.name)
		} else {
			require.NoError(t, err, tc.name)
		}
		assert.Equal(t, k.Name, rep.Keyspace, tc.name)
		assert.Equal(t, tc.ks, rep.KeyspaceCreated, tc.name)
		assert.Equal(t, tc.created, rep.TablesCreated, tc.name)
		assert.Equal(t, tc.waits, waits, tc.name)
		assert.Equal(t, i > 0, k.keyspaceExists(t, k.Name), tc.name)
		if i > 0 {
			for _, tbl := range tables {
				assert.Equal(t, slices.Contains(tc.exist, tbl), k.tableExists(t, tbl), "%s: table %s", tc.name, tbl)
			}
		}
		if tc.ks {
			assert.Equal(t, map[string]string{"class": "SimpleStrategy", "replication_factor": "1"}, rep.Replication, "created with")
		}
	}
}
