package cli

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// With Env.InProcess, register, release, release --force and setup act
// on the registry given (no Cassandra flag needed) with the options
// given, and what they print is what the registry then shows.
func TestInProcessRegistry(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	counter := filepath.Join(dir, "counter")
	bind := t.TempDir()
	run := func(args ...string) result {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), args, Env{
			Getenv:   func(string) string { return "" },
			Hostname: func() (string, error) { return "testhost", nil },
			HomeDir:  func() (string, error) { return dir, nil },
			Stdin:    strings.NewReader(""),
			Stdout:   &stdout,
			Stderr:   &stderr,
			InProcess: &InProcess{Registry: reg, Options: []engine.Option{
				engine.WithBindingDir(bind), engine.WithSync(false)}},
		})
		return result{code, stdout.String(), stderr.String()}
	}

	r := run("register", "--name", "web_1", "--counter", counter)
	require.Equal(t, exitOK, r.code, "%+v", r)
	require.Contains(t, r.stdout, "registered web_1 for "+counter)
	row, ok := reg.Row("web_1")
	require.True(t, ok)
	owner, err := admin.OwnerToken(counter)
	require.NoError(t, err)
	require.Equal(t, owner, row.Owner)
	require.Equal(t, registry.StateActive, row.State)

	r = run("release", "--name", "web_1", "--counter", counter)
	require.Equal(t, exitOK, r.code, "%+v", r)
	row, _ = reg.Row("web_1")
	require.Equal(t, registry.StateReleased, row.State)
	require.Equal(t, fmt.Sprintf("released web_1 (last number %d)\n", row.Reserved), r.stdout)

	// A forced release of another host's name, with the start given.
	r = run("register", "--name", "db_1", "--counter", filepath.Join(t.TempDir(), "counter"))
	require.Equal(t, exitOK, r.code, "%+v", r)
	r = run("release", "--force", "--start", "5000", "--name", "db_1")
	require.Equal(t, exitOK, r.code, "%+v", r)
	row, _ = reg.Row("db_1")
	require.Equal(t, registry.StateReleased, row.State)
	require.Equal(t, uint64(4999), row.Reserved)
	require.Equal(t, "released db_1 (last number 4999)\n", r.stdout)

	r = run("setup", "--replication", "1", "--stride", "1000")
	require.Equal(t, exitOK, r.code, "%+v", r)
	require.Contains(t, r.stdout, "stride 1000 recorded")
	st, err := reg.Stride(context.Background())
	require.NoError(t, err)
	require.Equal(t, uint64(1000), st)
	r = run("setup", "--replication", "1", "--stride", "640")
	require.Equal(t, exitFailure, r.code, "%+v", r)
	st, _ = reg.Stride(context.Background())
	require.Equal(t, uint64(1000), st, "a refused setup changed the stride")
}
