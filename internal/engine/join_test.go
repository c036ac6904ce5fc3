package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A process joining its host's claim while the registry is down does not
// join a name the host's record says the registry gave to another owner:
// it is refused with ErrNameTaken and issues nothing, although a join with
// the registry down is otherwise let through on the host's reserved range.
func TestJoinRefusesNameTheRecordSaysTaken(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(path), 0o755))
	// An hour between polls: only what the test does writes the record.
	opts := []Option{WithHeartbeat(time.Hour), WithCloneWindow(0), WithReserveStep(1 << 20)}
	first := openReg(t, path, "web_1", reg, opts...)
	defer first.Close()
	draw(t, first, 3)

	other := filepath.Join(dir, "b", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(other), 0o755))
	taker, err := Open(other, "web_1", WithRegistry(reg), WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()),
		WithTakeover(0), WithSync(false), WithCloneWindow(0))
	require.NoError(t, err)
	defer taker.Close()
	// The first process learns of the take-over (here at an extension)
	// and writes it to the host's record.
	mark, _, err := ReadMark(path)
	require.NoError(t, err)
	require.ErrorIs(t, first.ExportExtend(context.Background(), mark+1), ErrNameTaken)

	reg.SetDown(true)
	defer reg.SetDown(false)
	before := ctValue(t, path)
	joiner, err := Open(path, "web_1", append([]Option{WithRegistry(reg), WithSync(false),
		WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"})}, opts...)...)
	if err == nil {
		v, nerr := joiner.Next()
		joiner.Close()
		t.Fatalf("a process joined a name the host knew was taken over (registry down) and issued %d, %v", v, nerr)
	}
	require.ErrorIs(t, err, ErrNameTaken)
	t.Log(err)
	assert.Equal(t, before, ctValue(t, path), "the refused join issued nothing")
}

// A process joining its host's claim after a copy of the host's state
// directory (same owner token, another machine) claimed the name: the
// registry's row carries the owner token of this host but another session,
// and the join is refused with ErrNameTaken; it does not start issuing on
// a claim that no longer stands.
func TestJoinRefusesRowOfAnotherSession(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	for _, d := range []string{"a", "clone"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, d), 0o700))
	}
	path := filepath.Join(dir, "a", "c.u64")
	opts := []Option{WithHeartbeat(time.Hour), WithCloneWindow(0), WithReserveStep(1 << 20)}
	first := openReg(t, path, "web_1", reg, opts...)
	defer first.Close()
	draw(t, first, 3)
	before, ok := reg.Row("web_1")
	require.True(t, ok)

	testfs.CopyFiles(t, filepath.Join(dir, "a"), filepath.Join(dir, "clone"), "c.u64", "c.u64.owner")
	clone, err := Open(filepath.Join(dir, "clone", "c.u64"), "web_1", WithRegistry(reg), WithSync(false),
		WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()), WithCloneWindow(0))
	require.NoError(t, err)
	defer clone.Close()
	row, _ := reg.Row("web_1")
	require.Equal(t, before.Owner, row.Owner, "the clone holds the name with this host's owner token")
	require.NotEqual(t, before.Session, row.Session, "under a session of its own")
	require.Equal(t, registry.StateActive, row.State)

	// The joiner's clock is two intervals on: the host's record is not
	// fresh, so the join reads the registry's row.
	later := ExportWithNow(func() time.Time { return time.Now().Add(2 * time.Hour) })
	counter := ctValue(t, path)
	joiner, err := Open(path, "web_1", append([]Option{WithRegistry(reg), WithSync(false),
		WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}), later}, opts...)...)
	if err == nil {
		v, nerr := joiner.Next()
		joiner.Close()
		t.Fatalf("a process joined a claim a clone had taken over and issued %d, %v", v, nerr)
	}
	require.ErrorIs(t, err, ErrNameTaken)
	t.Log(err)
	assert.Equal(t, counter, ctValue(t, path), "the refused join issued nothing")
}
