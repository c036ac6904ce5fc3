package engine

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// asUser makes this whole process (every thread) run with the effective
// uid and gid of testfs.OtherUID, keeping root as the saved ids, until
// the returned function makes it root again.
func asUser(t *testing.T) (back func()) {
	t.Helper()
	require.NoError(t, syscall.Setresgid(-1, testfs.OtherUID, -1))
	require.NoError(t, syscall.Setresuid(-1, testfs.OtherUID, -1))
	back = func() {
		_ = syscall.Setresuid(-1, 0, -1)
		_ = syscall.Setresgid(-1, 0, -1)
	}
	t.Cleanup(back)
	return back
}

// userHost sets up, as root, a host whose default place of records
// (hostPlace, not made yet) is under root's lib, and a directory of the
// other user's (its counters, and its own place via XDG_STATE_HOME).
func userHost(t *testing.T) (hostPlace, udir string) {
	testfs.RequireRoot(t)
	shared := testfs.SharedTempDir(t, "own-place")
	lib := filepath.Join(shared, "lib")
	require.NoError(t, os.Mkdir(lib, 0o755))
	hostPlace = filepath.Join(lib, "snapid", "records")
	ExportBindingDefaults(t, hostPlace)
	udir = filepath.Join(shared, "u")
	require.NoError(t, os.Mkdir(udir, 0o700))
	require.NoError(t, os.Chown(udir, testfs.OtherUID, testfs.OtherUID))
	t.Setenv("XDG_STATE_HOME", filepath.Join(udir, "state"))
	t.Setenv("HOME", udir)
	return hostPlace, udir
}

// rootMakesPlace makes the host's place as root's first Open would.
func rootMakesPlace(t *testing.T, hostPlace string) {
	require.NoError(t, os.MkdirAll(filepath.Dir(hostPlace), 0o755))
	require.NoError(t, os.Mkdir(hostPlace, 0o755))
	require.NoError(t, os.Chmod(hostPlace, os.ModeSticky|0o777))
}

// A user's Release sees the user's own place of records: a program
// started before root made the host's place keeps its record there, and
// Release takes that record into the host's place first, refused with
// ErrInUse while the program runs. Were the own place not looked at,
// Release would find no program of the name, record a final number, and
// the program would go on issuing above it while the name's next holder
// starts from it.
func TestReleaseByAUserSeesItsOwnPlace(t *testing.T) {
	hostPlace, udir := userHost(t)
	counter := filepath.Join(udir, "c")
	other := filepath.Join(udir, "other") // another host's place
	reg := registrytest.NewRegistry()
	ctx := context.Background()

	back := asUser(t)
	g0, err := Open(counter, "web", WithRegistry(reg)) // the host has no place: the user's own
	require.NoError(t, err)
	_, err = g0.Next()
	require.NoError(t, err)
	require.NoError(t, g0.Close())
	_, err = os.Stat(filepath.Join(udir, "state", "snapid", "records", "web"))
	require.NoError(t, err, "the record is in the user's own place")

	a, err := Open(counter, "web") // program A, without the registry
	require.NoError(t, err)
	defer a.Close()
	for range 10 {
		_, err := a.Next()
		require.NoError(t, err)
	}

	back()
	rootMakesPlace(t, hostPlace) // root runs any snapid program
	asUser(t)

	final, err := Release(ctx, counter, "web", WithRegistry(reg))
	if err == nil {
		first, nerr := a.NextN(2 * recordStep)
		require.NoError(t, nerr, "A goes on issuing after the Release")
		last := first + 2*recordStep - 1
		b, err := Open(filepath.Join(udir, "c2"), "web", WithRegistry(reg), WithBindingDir(other))
		require.NoError(t, err)
		defer b.Close()
		m, err := b.Next()
		require.NoError(t, err)
		t.Fatalf("the user's Release succeeded (final %d) while A, whose record is in the user's own place, runs: "+
			"A issued web-%d..web-%d after it, and the name's next holder issued web-%d (issued twice: %v)", final, first, last, m, m >= first && m <= last)
	}
	require.ErrorIs(t, err, ErrInUse)
}

// A hardened service (ProtectHome=yes: the user's home, and so its own
// place of records, cannot be looked at) is refused rather than read the
// user's own place as "no record": a second record of the name in the
// host's place would have no form history and no stride claim, and a
// program running on the own record (stride 10) and the service (stride
// 100) would hand out the same ids from one counter.
func TestHiddenOwnPlaceRefused(t *testing.T) {
	hostPlace, udir := userHost(t)
	counter := filepath.Join(udir, "c")
	back := asUser(t)
	striped := func(stride uint64) []Option {
		return []Option{WithFormat(FormatStriped), WithNodeNumber(1), WithStride(stride)}
	}
	a, err := Open(counter, "svc", striped(10)...) // the host has no place: the user's own
	require.NoError(t, err)
	defer a.Close()
	seen := map[string]string{}
	for range 5 {
		id, err := a.NextID()
		require.NoError(t, err)
		seen[id.String()] = "A"
	}

	back()
	rootMakesPlace(t, hostPlace)
	asUser(t)

	// Unhardened, the same Open is refused while A runs.
	_, err = Open(counter, "svc", striped(100)...)
	require.Error(t, err, "unhardened")
	t.Logf("unhardened Open: %v", err)

	// The hardened service: the user's home inaccessible.
	state := filepath.Join(udir, "state")
	require.NoError(t, os.Chmod(state, 0))
	defer os.Chmod(state, 0o700)
	b, err := Open(counter, "svc", striped(100)...)
	if err != nil {
		require.ErrorIs(t, err, fs.ErrPermission, "refused for the own place it cannot look at")
		return
	}
	defer b.Close()
	for range 3 {
		id, err := b.NextID()
		require.NoError(t, err)
		seen[id.String()] = "B"
	}
	for range 2000 {
		id, err := a.NextID()
		require.NoError(t, err)
		if seen[id.String()] == "B" {
			t.Fatalf("with the user's own place hidden, a second record of %q was made in the host's place (stride 100) while A runs with stride 10 "+
				"on its record in the own place: both issued %s", "svc", id)
		}
		seen[id.String()] = "A"
	}
	t.Fatalf("the hardened Open succeeded where the unhardened one was refused")
}
