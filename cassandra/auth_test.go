package cassandra

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testcluster"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The password-authentication test needs a node started with
// SNAPID_CASSANDRA_AUTH=1 (PasswordAuthenticator and CassandraAuthorizer),
// so scripts/test.sh runs it in a step of its own, with SNAPID_AUTH_TEST=1.

const (
	authSuperuser = "cassandra" // the default superuser of a fresh node
	authAppRole   = "snapid_app"
	authAppPass   = "app-secret-1"
)

// requireAuthCassandra returns a superuser session on a node that requires
// passwords, waiting for the default superuser to exist. Without
// SNAPID_AUTH_TEST=1 the test is skipped: it runs in its own step.
func requireAuthCassandra(tb testing.TB) ([]string, *gocql.Session) {
	tb.Helper()
	if os.Getenv("SNAPID_AUTH_TEST") != "1" {
		tb.Skip("needs a Cassandra that requires passwords; scripts/test.sh runs it in its own step (SNAPID_AUTH_TEST=1)")
	}
	hosts := requireCassandra(tb)
	return hosts, testcluster.Session(tb, hosts, gocql.PasswordAuthenticator{Username: authSuperuser, Password: authSuperuser})
}

func TestCassandraPasswordAuth(t *testing.T) {
	hosts, admin := requireAuthCassandra(t)
	ctx := testCtx(t)
	exec := func(stmt string) {
		t.Helper()
		require.NoError(t, admin.Query(stmt).ExecContext(ctx), stmt)
	}
	exec(`CREATE ROLE IF NOT EXISTS ` + authAppRole + ` WITH PASSWORD = '` + authAppPass + `' AND LOGIN = true`)
	ks := "snapid_auth_" + randomHex(t, 6)
	t.Cleanup(func() { _ = admin.Query(`DROP KEYSPACE IF EXISTS ` + ks).Exec() })
	keyspaceExists := func() bool {
		var n int
		require.NoError(t, admin.Query(`SELECT COUNT(*) FROM system_schema.keyspaces WHERE keyspace_name = ?`, ks).Scan(&n))
		return n > 0
	}
	connect := func(user, pass string) (*Registry, error) {
		r, err := NewRegistry(ctx, Config{Hosts: hosts, Keyspace: ks, Username: user, Password: pass, ConnectTimeout: 5 * time.Second})
		if err == nil {
			t.Cleanup(r.Close)
		}
		return r, err
	}

	// Refusals: each a clear registry error, nothing created.
	for _, tc := range []struct {
		name, user, pass, want string
	}{
		{"no credentials", "", "", "authentication"},
		{"wrong password", authAppRole, "not-the-password", "password are incorrect"},
		{"unknown user", "nobody_here", authAppPass, "password are incorrect"},
		{"no permission to create the registry", authAppRole, authAppPass, "permission"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := connect(tc.user, tc.pass)
			require.ErrorIs(t, err, snapid.ErrRegistry)
			assert.Contains(t, err.Error(), tc.want)
			assert.False(t, keyspaceExists(), "a refused registry creates nothing")
		})
	}

	// An administrator creates the registry; the application role gets
	// only SELECT and MODIFY on its keyspace, and that is enough.
	_, err := connect(authSuperuser, authSuperuser)
	require.NoError(t, err)
	require.True(t, keyspaceExists())
	exec(`GRANT SELECT ON KEYSPACE ` + ks + ` TO ` + authAppRole)
	exec(`GRANT MODIFY ON KEYSPACE ` + ks + ` TO ` + authAppRole)

	t.Run("least privilege", func(t *testing.T) {
		r, err := connect(authAppRole, authAppPass)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "counter.u64")
		g, err := snapid.Open(path, "auth_host", snapid.Config{
			Registry:   &snapid.RegistryConfig{Registry: r, ReserveStep: 10, OutageHorizon: -1},
			NoSync:     true,
			BindingDir: hostRecords(t, "host"),
		})
		require.NoError(t, err)
		assert.Equal(t, []uint64{1, 2, 3}, draw(t, g, 3))
		require.NoError(t, g.Close())
		h, err := r.Get(ctx, "auth_host")
		require.NoError(t, err)
		assert.Equal(t, uint64(3), h.Reserved, "the unused reservation was returned")
	})

	t.Run("CREATE on an existing keyspace only", func(t *testing.T) {
		// An administrator made the keyspace; the role may create tables in
		// it, not keyspaces: the registry makes only the missing table.
		ks2 := "snapid_auth_" + randomHex(t, 6)
		t.Cleanup(func() { _ = admin.Query(`DROP KEYSPACE IF EXISTS ` + ks2).Exec() })
		exec(`CREATE KEYSPACE ` + ks2 + ` WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}`)
		for _, p := range []string{"CREATE", "SELECT", "MODIFY"} {
			exec(`GRANT ` + p + ` ON KEYSPACE ` + ks2 + ` TO ` + authAppRole)
		}
		r, err := NewRegistry(ctx, Config{Hosts: hosts, Keyspace: ks2, Username: authAppRole, Password: authAppPass})
		require.NoError(t, err)
		defer r.Close()
		mustClaim(t, ctx, r, "ks_only_host", "owner_k")
	})

	t.Run("password and mutual TLS together", func(t *testing.T) {
		f := testcluster.RequireTLS(t)
		r, err := NewRegistry(ctx, Config{Hosts: hosts, Keyspace: ks, Username: authAppRole, Password: authAppPass,
			TLSCAFile: f.CA, TLSCertFile: f.Cert, TLSKeyFile: f.Key})
		require.NoError(t, err)
		defer r.Close()
		h, err := r.Claim(ctx, testClaim("auth_tls_host", "owner_tls"))
		require.NoError(t, err)
		assert.Equal(t, registry.StateActive, h.State)
	})

	t.Run("read-only role", func(t *testing.T) {
		exec(`CREATE ROLE IF NOT EXISTS snapid_reader WITH PASSWORD = 'reader-secret' AND LOGIN = true`)
		exec(`GRANT SELECT ON KEYSPACE ` + ks + ` TO snapid_reader`)
		r, err := connect("snapid_reader", "reader-secret")
		require.NoError(t, err, "reading the schema and the rows needs only SELECT")
		rows, err := r.List(ctx)
		require.NoError(t, err)
		assert.NotEmpty(t, rows)
		before, err := r.Get(ctx, "auth_host")
		require.NoError(t, err)
		_, err = r.Claim(ctx, testClaim("reader_host", "owner_r"))
		require.ErrorIs(t, err, snapid.ErrRegistry)
		assert.Contains(t, err.Error(), "permission")
		_, err = r.Get(ctx, "reader_host")
		require.ErrorIs(t, err, registry.ErrNotRegistered, "a refused claim writes nothing")
		after, err := r.Get(ctx, "auth_host")
		require.NoError(t, err)
		assert.Equal(t, before, after)
	})
}
