package cassandra

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// outageEnv turns on TestCassandraOutage. scripts/test.sh runs it in a
// step of its own, after the other tests, because it stops and restarts
// the Cassandra they use.
const outageEnv = "SNAPID_OUTAGE_TEST"

func cassandraScript(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join("..", "scripts", "cassandra.sh")}, args...)...)
	cmd.Env = append(os.Environ(), "SNAPID_CASSANDRA_KEEP=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "scripts/cassandra.sh %v: %s", args, out)
}

// TestCassandraOutage stops the real Cassandra while a snapid.Generator runs: ids
// keep flowing from the reserved range, then stop with a clear error;
// claims fail; nothing on disk is corrupted; and issuance resumes, without
// a repeat, once Cassandra is back.
func TestCassandraOutage(t *testing.T) {
	if os.Getenv(outageEnv) != "1" {
		t.Skipf("stops Cassandra: run by scripts/test.sh in its own step (%s=1)", outageEnv)
	}
	ks := newTestKeyspace(t)
	reg := ks.registry(t, func(c *Config) {
		c.ReconnectInterval = time.Second
		c.Timeout = 5 * time.Second
		c.ConnectTimeout = 2 * time.Second
	})
	dir := t.TempDir()
	path := filepath.Join(dir, "counter.u64")
	g, err := snapid.Open(path, "web_1", snapid.Config{
		Registry: &snapid.RegistryConfig{Registry: reg, ReserveStep: 100, OutageHorizon: -1,
			Timeout: 5 * time.Second, Heartbeat: 500 * time.Millisecond},
		BindingDir: hostRecords(t, "host"),
	})
	require.NoError(t, err)
	defer g.Close()
	assert.Equal(t, []uint64{1, 2, 3}, draw(t, g, 3))
	h, err := reg.Get(t.Context(), "web_1")
	require.NoError(t, err)
	mark := h.Reserved
	require.Equal(t, uint64(100), mark)

	cassandraScript(t, "stop")
	restarted := false
	defer func() {
		if !restarted {
			cassandraScript(t, "start")
		}
	}()

	for n := uint64(4); n <= mark; n++ {
		v, err := g.Next()
		require.NoError(t, err, "ids keep flowing from the reserved range while Cassandra is down")
		require.Equal(t, n, v)
	}
	_, err = g.Next()
	require.ErrorIs(t, err, snapid.ErrReservationExhausted)
	require.ErrorIs(t, err, snapid.ErrRegistry)
	t.Logf("with Cassandra down, past the mark: %v", err)

	otherPath := filepath.Join(dir, "other.u64")
	_, err = snapid.Open(otherPath, "web_2", snapid.Config{
		Registry:   &snapid.RegistryConfig{Registry: reg, Timeout: 5 * time.Second},
		BindingDir: hostRecords(t, "host"),
	})
	require.ErrorIs(t, err, snapid.ErrRegistry, "a claim fails clearly")
	if v, err := admin.ReadCounter(otherPath); err == nil {
		assert.Zero(t, v, "a failed claim issues nothing (its new counter and token stay for the retry)")
	}

	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, b, admin.CounterSize, "the counter is intact")
	v, err := admin.DecodeCounter(b)
	require.NoError(t, err)
	assert.Equal(t, mark, v, "refused numbers were not taken from the counter")

	cassandraScript(t, "start")
	restarted = true
	deadline := time.Now().Add(2 * time.Minute)
	for {
		v, err := g.Next()
		if err == nil {
			assert.Equal(t, mark+1, v, "issuance resumes where it stopped")
			break
		}
		require.True(t, errors.Is(err, snapid.ErrReservationExhausted), "unexpected error: %v", err)
		require.True(t, time.Now().Before(deadline), "no ids two minutes after Cassandra came back: %v", err)
		time.Sleep(500 * time.Millisecond)
	}
	_, err = snapid.Open(otherPath, "web_2", snapid.Config{Registry: &snapid.RegistryConfig{Registry: reg}, BindingDir: hostRecords(t, "host")})
	require.NoError(t, err, "claims work again")
}
