package engine_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// calls returns the count of one kind of registry call with one outcome.
func calls(t *testing.T, st Stats, call, outcome string) uint64 {
	t.Helper()
	require.NotNil(t, st.Registry)
	for _, c := range st.Registry.Calls {
		if c.Call == call && c.Outcome == outcome {
			return c.Count
		}
	}
	t.Fatalf("no count for %s/%s", call, outcome)
	return 0
}

// The registry calls of a Generator are counted by kind and outcome, with
// the times of the last extension and heartbeat, and the loss of the
// session shows.
func TestStatsRegistry(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	_, path := ctPath(t)
	g := openReg(t, path, "web_1", reg, WithReserveStep(10), WithOutageHorizon(0), WithHeartbeat(time.Hour), WithCloneWindow(0))
	defer g.Close()

	st := g.Stats()
	assert.Equal(t, uint64(1), calls(t, st, "claim", RegistryApplied))
	assert.Equal(t, uint64(1), calls(t, st, "extend", RegistryApplied), "the first step is reserved at Open")
	assert.False(t, st.Registry.LastExtension.IsZero())
	assert.False(t, st.Registry.LastContact.IsZero())
	assert.Equal(t, uint64(0), calls(t, st, "touch", RegistryApplied), "no heartbeat yet")
	assert.False(t, st.Registry.LastHeartbeat.IsZero(), "the claim refreshed last-seen: it counts as the host's first heartbeat")
	assert.WithinDuration(t, time.Now(), st.Registry.LastHeartbeat, time.Minute)
	assert.True(t, st.Registry.SessionHeld)

	rs, err := g.Reservation()
	require.NoError(t, err)
	assert.Equal(t, ReservationStatus{Counter: 0, Registry: true, Mark: 10, LeftNumbers: 10, SessionHeld: true}, rs)
	draw(t, g, 4)
	rs, err = g.Reservation()
	require.NoError(t, err)
	assert.Equal(t, uint64(4), rs.Counter)
	assert.Equal(t, rs.Mark-4, rs.LeftNumbers)

	// A call whose outcome the registry had to resolve.
	reg.SetHook(func(ctx context.Context, op, _ string) error {
		if op == "extend" {
			registry.NoteOutcomeResolved(ctx)
		}
		return nil
	})
	require.NoError(t, g.ExportExtend(context.Background(), rs.Mark+5))
	assert.Equal(t, uint64(1), calls(t, g.Stats(), "extend", RegistryResolved))
	reg.SetHook(nil)

	reg.SetDown(true)
	require.ErrorIs(t, g.ExportExtend(context.Background(), rs.Mark+100), ErrRegistry)
	assert.Equal(t, uint64(1), calls(t, g.Stats(), "extend", RegistryError))
	reg.SetDown(false)

	// Another owner takes the name: the next extension fails its
	// condition, and the session is no longer this host's.
	_, err = reg.Claim(context.Background(), registry.Claim{Name: "web_1", Owner: "other-owner-token-0123456789abcdef", Force: true})
	require.NoError(t, err)
	require.ErrorIs(t, g.ExportExtend(context.Background(), rs.Mark+100), ErrNameTaken)
	st = g.Stats()
	assert.Equal(t, uint64(1), calls(t, st, "extend", RegistryConditionFailed))
	assert.False(t, st.Registry.SessionHeld)
	rs, err = g.Reservation()
	require.NoError(t, err)
	assert.False(t, rs.SessionHeld)

	b, err := json.Marshal(st)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"update_latency_seconds":{"bounds":[`)
	assert.Contains(t, string(b), `"session_held":false`)
}

// A heartbeat that reaches the registry is timed.
func TestStatsHeartbeat(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	_, path := ctPath(t)
	g := openReg(t, path, "web_1", reg, WithHeartbeat(5*time.Millisecond), WithCloneWindow(0))
	defer g.Close()
	require.Eventually(t, func() bool {
		st := g.Stats()
		return !st.Registry.LastHeartbeat.IsZero() && calls(t, st, "touch", RegistryApplied) > 0
	}, 10*time.Second, time.Millisecond)
}

// After Close, Reservation says so and Stats still answer.
func TestReservationAfterClose(t *testing.T) {
	t.Parallel()
	_, path := ctPath(t)
	g, err := Open(path, "web_1", WithSync(false))
	require.NoError(t, err)
	draw(t, g, 3)
	rs, err := g.Reservation()
	require.NoError(t, err)
	assert.Equal(t, ReservationStatus{Counter: 3}, rs)
	require.NoError(t, g.Close())
	_, err = g.Reservation()
	require.ErrorIs(t, err, ErrClosed)
	assert.Equal(t, uint64(3), g.Stats().IDsIssued)
}

// OpenContext with a context already ended says so, and changes nothing.
func TestOpenContextEnded(t *testing.T) {
	t.Parallel()
	dir, path := ctPath(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := OpenContext(ctx, path, "web_1", WithRegistry(registrytest.NewRegistry()))
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "context ended before the name could be claimed")
	assert.NotContains(t, err.Error(), "another process")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing created")
}

// ReadHostFiles reports the owner's and the session's fingerprints, the
// cached mark, and whether a row is held by this counter's session.
func TestReadHostFiles(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	_, path := ctPath(t)
	hf, err := ReadHostFiles(path)
	require.NoError(t, err)
	assert.Equal(t, HostFiles{}, hf, "a counter never registered")

	g := openReg(t, path, "web_1", reg, WithReserveStep(10), WithOutageHorizon(0))
	defer g.Close()
	hf, err = ReadHostFiles(path)
	require.NoError(t, err)
	owner, err := OwnerToken(path)
	require.NoError(t, err)
	row, ok := reg.Row("web_1")
	require.True(t, ok)
	assert.Equal(t, registry.OwnerID(owner), hf.OwnerID)
	assert.Equal(t, "web_1", hf.SessionName)
	assert.Equal(t, registry.OwnerID(row.Session), hf.SessionID)
	assert.True(t, hf.MarkFile)
	assert.Equal(t, row.Reserved, hf.Mark)
	assert.True(t, hf.OwnedBy(row))
	assert.True(t, hf.HoldsSession(row))
	for _, tc := range []struct {
		name  string
		edit  func(h *registry.Holder)
		owned bool
	}{
		{"another session", func(h *registry.Holder) { h.Session = "later-claim" }, true},
		{"released", func(h *registry.Holder) { h.State = registry.StateReleased }, true},
		{"another owner", func(h *registry.Holder) { h.Owner = "someone-else" }, false},
	} {
		h := row
		tc.edit(&h)
		assert.False(t, hf.HoldsSession(h), tc.name)
		assert.Equal(t, tc.owned, hf.OwnedBy(h), tc.name)
	}

	b, err := os.ReadFile(path + ".session")
	require.NoError(t, err)
	other := strings.Replace(string(b), "owner "+owner, "owner "+strings.Repeat("0", 32), 1)
	require.NotEqual(t, string(b), other)
	require.NoError(t, os.WriteFile(path+".session", []byte(other), 0o600))
	_, err = ReadHostFiles(path)
	requireCorruptFile(t, err, ExportSessionSuffix, "a session of another owner token")
	require.NoError(t, os.WriteFile(path+".session", []byte("garbage\n"), 0o600))
	_, err = ReadHostFiles(path)
	requireCorruptFile(t, err, ExportSessionSuffix)
}
