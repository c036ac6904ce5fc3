package engine_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/hoststate"
	"github.com/snapid/snapid/internal/statefile"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// recordHost is a host of its own: a place for records and a directory
// for counters.
func recordHost(t *testing.T) (place, dir string) {
	t.Helper()
	root := t.TempDir()
	place, dir = filepath.Join(root, "records"), filepath.Join(root, "state")
	require.NoError(t, os.Mkdir(dir, 0o700))
	return place, dir
}

// issue opens counter under name with opts, takes n ids and closes.
func issue(t *testing.T, counter, name string, n int, opts ...Option) []string {
	t.Helper()
	g, err := Open(counter, name, opts...)
	require.NoError(t, err)
	var ids []string
	for range n {
		id, err := g.UniqueID()
		require.NoError(t, err)
		ids = append(ids, id)
	}
	require.NoError(t, g.Close())
	return ids
}

// A counter missing at the path its record names (a file system not
// mounted, a link re-pointed) is never made again at 0: the Open is
// refused, creates nothing, and says how far the lost counter went.
func TestRecordRefusesACounterMissingAtItsPath(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	require.Equal(t, []string{"vm1-1", "vm1-2", "vm1-3"}, issue(t, c, "vm1", 3, WithBindingDir(place)))
	require.NoError(t, os.Remove(c))
	_, err := Open(c, "vm1", WithBindingDir(place))
	require.ErrorIs(t, err, ErrNameBound)
	require.Contains(t, err.Error(), "init --start")
	_, serr := os.Lstat(c)
	require.True(t, errors.Is(serr, os.ErrNotExist), "nothing was made at the path")
}

// A counter replaced at its path by another file (re-made, another disk
// mounted there, swapped by whoever owns the directory) is refused.
func TestRecordRefusesAReplacedCounter(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	issue(t, c, "vm1", 3, WithBindingDir(place))
	zero := EncodeCounter(0)
	require.NoError(t, os.WriteFile(c+".new", zero[:], 0o600))
	require.NoError(t, os.Rename(c+".new", c))
	_, err := Open(c, "vm1", WithBindingDir(place))
	require.ErrorIs(t, err, ErrNameBound)
	require.Contains(t, err.Error(), "replaced or made again")
}

// Eight zero bytes written over a counter, or a copy from an older
// backup, are below the record's floor: refused, never issued from; the
// way out (init past the floor) works.
func TestRecordRefusesACounterBelowItsFloor(t *testing.T) {
	t.Parallel()
	for _, back := range []uint64{0, 1, 2} {
		place, dir := recordHost(t)
		c := filepath.Join(dir, "counter.u64")
		issue(t, c, "vm1", 3, WithBindingDir(place))
		f, err := os.OpenFile(c, os.O_WRONLY, 0)
		require.NoError(t, err)
		b := EncodeCounter(back)
		_, err = f.WriteAt(b[:], 0)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		_, err = Open(c, "vm1", WithBindingDir(place))
		require.ErrorIs(t, err, ErrRolledBack, "rolled back to %d", back)
		got, err := ReadCounter(c)
		require.NoError(t, err)
		require.Equal(t, back, got, "nothing changed")

		_, err = Init(c, 4)
		require.NoError(t, err)
		require.Equal(t, []string{"vm1-4"}, issue(t, c, "vm1", 1, WithBindingDir(place)))
	}
}

// The floor follows the counter through the mark a step ahead: a restore
// to a value the record has seen pass is refused even while the counter
// ran far.
func TestRecordFloorFollowsTheCounter(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	g, err := Open(c, "vm1", WithBindingDir(place))
	require.NoError(t, err)
	_, err = g.NextN(5000)
	require.NoError(t, err)
	_, err = g.NextN(5000)
	require.NoError(t, err)
	// Not closed: as if killed. The record saw the counter pass 5000.
	f, err := os.OpenFile(c, os.O_WRONLY, 0)
	require.NoError(t, err)
	b := EncodeCounter(100)
	_, err = f.WriteAt(b[:], 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = Open(c, "vm1", WithBindingDir(place))
	require.ErrorIs(t, err, ErrRolledBack)
	require.NoError(t, g.Close())
}

// A registry-backed Open and a standalone one keep the same record: a
// second counter under the name is refused whichever comes first.
func TestRecordSharedByRegistryAndStandalone(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	a, b := filepath.Join(dir, "a.u64"), filepath.Join(dir, "b.u64")
	reg := registrytest.NewRegistry()
	g, err := Open(a, "vm1", WithBindingDir(place), WithRegistry(reg))
	require.NoError(t, err)
	_, err = g.UniqueID()
	require.NoError(t, err)
	_, err = Open(b, "vm1", WithBindingDir(place))
	require.ErrorIs(t, err, ErrNameBound, "a standalone Open beside a registry one")
	require.NoError(t, g.Close())

	place2, dir2 := recordHost(t)
	a, b = filepath.Join(dir2, "a.u64"), filepath.Join(dir2, "b.u64")
	issue(t, a, "vm1", 3, WithBindingDir(place2))
	_, err = Open(b, "vm1", WithBindingDir(place2), WithRegistry(registrytest.NewRegistry()))
	require.ErrorIs(t, err, ErrNameBound, "a registry Open beside a standalone one")
}

// Two names of a host with striped ids of two strides would collide
// (3021 is 302×10+1 and 30×100+21), whatever path each came by; and two
// names with one node number too.
func TestRecordStrideAndNumberAcrossNames(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	issue(t, filepath.Join(dir, "a.u64"), "a", 1, WithBindingDir(place), WithFormat(FormatStriped), WithNodeNumber(1), WithStride(10))
	_, err := Open(filepath.Join(dir, "b.u64"), "b", WithBindingDir(place), WithFormat(FormatStriped), WithNodeNumber(21), WithStride(100))
	require.ErrorIs(t, err, ErrStrideMismatch)
	_, err = Open(filepath.Join(dir, "c.u64"), "c", WithBindingDir(place), WithFormat(FormatDecimal), WithNodeNumber(1))
	require.ErrorIs(t, err, ErrNumberBound)
	issue(t, filepath.Join(dir, "d.u64"), "d", 1, WithBindingDir(place), WithFormat(FormatStriped), WithNodeNumber(2), WithStride(10))
}

// A damaged record refuses the name (never "no record"), and so does one
// the place cannot tell from a record.
func TestRecordDamagedRefuses(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	issue(t, c, "vm1", 1, WithBindingDir(place))
	require.NoError(t, os.WriteFile(filepath.Join(place, "vm1"), []byte("junk"), 0o644))
	_, err := Open(c, "vm1", WithBindingDir(place))
	requireCorruptFile(t, err, "")
	require.NoError(t, os.Remove(filepath.Join(place, "vm1")))
	require.NoError(t, os.Mkdir(filepath.Join(place, "vm1"), 0o755))
	_, err = Open(c, "vm1", WithBindingDir(place))
	require.Error(t, err)
}

// A name released on the host is refused by every path until it is
// claimed again on purpose.
func TestRecordReleasedHonouredWithoutRegistry(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	reg := registrytest.NewRegistry()
	issue(t, c, "vm1", 3, WithBindingDir(place), WithRegistry(reg))
	_, err := Release(t.Context(), c, "vm1", WithBindingDir(place), WithRegistry(reg))
	require.NoError(t, err)
	_, err = Open(c, "vm1", WithBindingDir(place))
	require.ErrorIs(t, err, ErrReleased)
	other := filepath.Join(dir, "other.u64")
	_, err = Open(other, "vm1", WithBindingDir(place))
	require.ErrorIs(t, err, ErrReleased, "another counter under the released name")
	_, err = os.Stat(other)
	require.ErrorIs(t, err, os.ErrNotExist, "the refused Open makes nothing")
}

// writeCounter writes v over the counter at path in place, as a restore
// from an older copy (cp over the file) does.
func writeCounter(t *testing.T, path string, v uint64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	b := EncodeCounter(v)
	_, err = f.WriteAt(b[:], 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// After a crash (no clean close since), a counter found below the
// record's mark, restored or not, is raised to the mark before anything is
// issued: every number handed out is at most the mark. With or without a
// registry, and from one to the other.
func TestRecordCrashThenRestoreRaisedToTheMark(t *testing.T) {
	t.Parallel()
	for _, reg := range []bool{false, true} {
		place, dir := recordHost(t)
		c := filepath.Join(dir, "counter.u64")
		g, err := Open(c, "vm1", WithBindingDir(place))
		require.NoError(t, err)
		_, err = g.NextN(500)
		require.NoError(t, err)
		crash(t, g)
		writeCounter(t, c, 100)
		opts := []Option{WithBindingDir(place)}
		if reg {
			opts = append(opts, WithRegistry(registrytest.NewRegistry()))
		}
		ids := issue(t, c, "vm1", 1, opts...)
		id, err := ParseID(ids[0])
		require.NoError(t, err)
		require.Greater(t, id.Number, uint64(500), "registry %v: %s repeats an id issued before the crash", reg, ids[0])
	}
}

// A clean close leaves no gap: the last program out sets the mark back to
// the counter, and the next start goes on from it.
func TestRecordCleanRestartLeavesNoGap(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	require.Equal(t, []string{"vm1-1", "vm1-2"}, issue(t, c, "vm1", 2, WithBindingDir(place)))
	a, err := Open(c, "vm1", WithBindingDir(place))
	require.NoError(t, err)
	b, err := Open(c, "vm1", WithBindingDir(place))
	require.NoError(t, err, "a second process of the same counter joins")
	_, err = a.NextN(3)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	require.Equal(t, []string{"vm1-6"}, issue(t, c, "vm1", 1, WithBindingDir(place)))
}

// Two names opened at the same moment with one node number, or with two
// strides: one wins, the other is refused (each claim is one entry created
// without replacing, not a read of the others' records).
func TestRecordNumberAndStrideClaimsRace(t *testing.T) {
	t.Parallel()
	for round := range 20 {
		place, dir := recordHost(t)
		forms := [][]Option{
			{WithFormat(FormatDecimal), WithNodeNumber(7)},
			{WithFormat(FormatDecimal), WithNodeNumber(7)},
		}
		if round%2 == 1 {
			forms = [][]Option{
				{WithFormat(FormatStriped), WithNodeNumber(1), WithStride(10)},
				{WithFormat(FormatStriped), WithNodeNumber(2), WithStride(100)},
			}
		}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, name := range []string{"a", "b"} {
			wg.Go(func() {
				g, err := Open(filepath.Join(dir, name), name, append(forms[i], WithBindingDir(place))...)
				if err == nil {
					g.Close()
				}
				errs[i] = err
			})
		}
		wg.Wait()
		require.True(t, (errs[0] == nil) != (errs[1] == nil), "round %d: exactly one opens: %v", round, errs)
	}
}

// A registry's striped form has no stride before its claim: the stride it
// is given then is the host's, and a standalone name with another is
// refused; a standalone name's stride refuses a registry name's other one.
func TestRecordRegistryStrideIsTheHosts(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	reg := registrytest.NewRegistry()
	_, err := reg.SetStride(t.Context(), 10)
	require.NoError(t, err)
	issue(t, filepath.Join(dir, "a.u64"), "a", 1, WithBindingDir(place), WithRegistry(reg), WithFormat(FormatStriped))
	_, err = Open(filepath.Join(dir, "b.u64"), "b", WithBindingDir(place), WithFormat(FormatStriped), WithNodeNumber(21), WithStride(100))
	require.ErrorIs(t, err, ErrStrideMismatch)
	issue(t, filepath.Join(dir, "c.u64"), "c", 1, WithBindingDir(place), WithFormat(FormatStriped), WithNodeNumber(3), WithStride(10))
}

// A record another user made denies the name for any other counter, and
// is not written nor its path followed; one that names root's very counter
// (device and inode can be read by anyone) is taken by root as the
// counter's, and given to the counter's owner.
func TestRecordOfAnotherUserNotAdopted(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	issue(t, c, "vm1", 3, WithBindingDir(place))
	rec := filepath.Join(place, "vm1")
	b, err := os.ReadFile(rec)
	require.NoError(t, err)
	require.NoError(t, os.Remove(rec))
	require.NoError(t, os.WriteFile(rec, b, 0o644))
	require.NoError(t, os.Chown(rec, nobody, nobody))
	_, err = Open(filepath.Join(dir, "other.u64"), "vm1", WithBindingDir(place))
	require.ErrorIs(t, err, ErrNameBound)
	require.Contains(t, err.Error(), "user nobody")
	after, err := os.ReadFile(rec)
	require.NoError(t, err)
	require.Equal(t, b, after, "not written")

	ids := issue(t, c, "vm1", 1, WithBindingDir(place))
	require.Equal(t, []string{"vm1-4"}, ids)
	var st unix.Stat_t
	require.NoError(t, unix.Stat(rec, &st))
	require.Equal(t, []uint32{0, 0o600}, []uint32{st.Uid, st.Mode & 0o7777}, "the counter's owner's, for its writers alone")
}

// A record is readable by its counter's writers alone: no other user can
// hold its presence lock (and so keep a start from raising a counter
// after a crash) or read what it says.
func TestRecordModeFollowsTheCounter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ counter, record os.FileMode }{{0o600, 0o600}, {0o660, 0o660}, {0o640, 0o600}} {
		place, dir := recordHost(t)
		c := filepath.Join(dir, "counter.u64")
		issue(t, c, "vm1", 1, WithBindingDir(place), WithFileMode(tc.counter))
		st, err := os.Stat(filepath.Join(place, "vm1"))
		require.NoError(t, err)
		require.Equal(t, tc.record, st.Mode().Perm(), "counter %o", tc.counter)
	}
}

// A released name is refused on the host whichever counter comes: also a
// replacement at the recorded path raised past the mark, which would
// otherwise take the name over.
func TestRecordReleasedRefusesAReplacement(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	reg := registrytest.NewRegistry()
	issue(t, c, "vm1", 3, WithBindingDir(place), WithRegistry(reg))
	_, err := Release(t.Context(), c, "vm1", WithBindingDir(place), WithRegistry(reg))
	require.NoError(t, err)
	high := EncodeCounter(1 << 40)
	require.NoError(t, os.WriteFile(c+".new", high[:], 0o600))
	require.NoError(t, os.Rename(c+".new", c))
	_, err = Open(c, "vm1", WithBindingDir(place))
	require.ErrorIs(t, err, ErrReleased)
}

// A node number claimed by another user for a name of root's is not taken
// as root's claim (that user could remove or rewrite it at will): root's
// Open is denied, naming the user, and no second name gets the number.
func TestRecordClaimOfAnotherUserDenies(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	place, dir := recordHost(t)
	require.NoError(t, os.Mkdir(place, 0o755))
	forged := filepath.Join(place, "#node-7")
	require.NoError(t, os.WriteFile(forged, []byte("snapid-claim 1\nvm1\n"), 0o644))
	require.NoError(t, os.Chown(forged, nobody, nobody))
	dec := []Option{WithBindingDir(place), WithFormat(FormatDecimal), WithNodeNumber(7)}
	_, err := Open(filepath.Join(dir, "c1"), "vm1", dec...)
	require.ErrorIs(t, err, ErrNumberBound)
	require.Contains(t, err.Error(), "user nobody")
}

// A standalone program issuing under a mark a registered program raised,
// then a crash, then the counter restored while nothing runs: the first
// program after the crash, registered or not, raises the counter to the
// record's mark, which covers every number handed out.
func TestRecordCrashRaiseWhateverPathKeptTheMark(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	c := filepath.Join(dir, "c")
	reg := registrytest.NewRegistry()
	ropts := []Option{WithBindingDir(place), WithRegistry(reg), WithReserveStep(100)}
	r, err := Open(c, "vm1", ropts...)
	require.NoError(t, err)
	_, err = r.UniqueID()
	require.NoError(t, err)
	s, err := Open(c, "vm1", WithBindingDir(place))
	require.NoError(t, err)
	seen := map[string]bool{}
	var copyAt []byte
	for i := range 90 {
		id, err := s.UniqueID()
		require.NoError(t, err)
		seen[id] = true
		if i == 40 {
			copyAt, err = os.ReadFile(c)
			require.NoError(t, err)
		}
	}
	crash(t, s)
	crash(t, r)
	require.NoError(t, os.WriteFile(c, copyAt, 0o600)) // in place: same file
	ids := issue(t, c, "vm1", 1, ropts...)
	require.False(t, seen[ids[0]], "%s handed out again", ids[0])
}

// A record made by a writer of the counter (its group, the counter being
// group-writable) speaks for that counter: its owner and root use it, as
// the writer does. Once the group no longer writes the counter, root
// still takes the record that names the very counter, and gives it to the
// counter's owner, for its writers alone.
func TestRecordOfAGroupWriterTrusted(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	for _, tc := range []struct {
		mode    os.FileMode
		trusted bool
	}{{0o660, true}, {0o640, false}} {
		place, dir := recordHost(t)
		c := filepath.Join(dir, "counter.u64")
		issue(t, c, "grp", 2, WithBindingDir(place), WithFileMode(0o660))
		require.NoError(t, os.Chmod(c, tc.mode))
		require.NoError(t, os.Chown(dir, 1234, 4321))
		require.NoError(t, os.Chown(c, 1234, 4321))
		require.NoError(t, os.Chown(filepath.Join(place, "grp"), nobody, 4321))
		g, err := Open(c, "grp", WithBindingDir(place))
		require.NoError(t, err, "mode %o", tc.mode)
		id, err := g.UniqueID()
		require.NoError(t, err)
		require.Equal(t, "grp-3", id)
		require.NoError(t, g.Close())
		var st unix.Stat_t
		require.NoError(t, unix.Stat(filepath.Join(place, "grp"), &st))
		if !tc.trusted {
			require.Equal(t, []uint32{1234, 0o600}, []uint32{st.Uid, st.Mode & 0o7777}, "given to the counter's owner")
		}
	}
}

// With sync off the counter is synced once a step, with the record, so
// the record's floor follows it: a counter restored far back while a
// program uses it is refused to the next program, not issued from again.
func TestRecordFloorFollowsWithSyncOff(t *testing.T) {
	t.Parallel()
	for _, per := range []uint64{1, 2900} { // ids per call: a step at a time, or one jump
		place, dir := recordHost(t)
		c := filepath.Join(dir, "counter.u64")
		g, err := Open(c, "so", WithBindingDir(place), WithSync(false))
		require.NoError(t, err)
		_, err = g.NextN(100)
		require.NoError(t, err)
		old, err := os.ReadFile(c)
		require.NoError(t, err)
		for range 2900 / per {
			_, err = g.NextN(per)
			require.NoError(t, err)
		}
		require.NoError(t, os.WriteFile(c, old, 0o600)) // in place, while g runs
		_, err = Open(c, "so", WithBindingDir(place))
		require.ErrorIs(t, err, ErrRolledBack, "%d per call", per)
		require.NoError(t, g.Close())
	}
}

// The host's default place is never one on a tmpfs (a service's
// TemporaryFileSystem over /var/lib, a mount over the place), whose
// emptiness would read as "no records"; nor is it made where its parent's
// parent is missing (a /var not mounted yet).
func TestRecordDefaultPlaceMustLast(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	lib := filepath.Join(root, "lib")
	require.NoError(t, os.Mkdir(lib, 0o755))
	require.NoError(t, unix.Mount("tmpfs", lib, "tmpfs", 0, "mode=0755"))
	t.Cleanup(func() { _ = unix.Unmount(lib, unix.MNT_DETACH) })
	dir := filepath.Join(root, "state")
	require.NoError(t, os.Mkdir(dir, 0o700))
	c := filepath.Join(dir, "counter.u64")

	ExportBindingDefaults(t, filepath.Join(lib, "snapid", "records"))
	_, err := Open(c, "vm1")
	require.Error(t, err)
	require.Contains(t, err.Error(), "tmpfs")
	require.ErrorContains(t, ExportPlaceCanBeMade(), "tmpfs", "a user's Open takes it for hidden, not missing")
	_, serr := os.Stat(c)
	require.ErrorIs(t, serr, os.ErrNotExist, "nothing made for the counter")

	ExportBindingDefaults(t, filepath.Join(root, "var", "lib", "snapid", "records"))
	require.ErrorContains(t, ExportPlaceCanBeMade(), "mounted", "a user's Open takes it for hidden, not missing")
	_, err = Open(c, "vm1")
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Contains(t, err.Error(), "mounted")
	_, serr = os.Stat(filepath.Join(root, "var"))
	require.ErrorIs(t, serr, os.ErrNotExist, "nothing made under a missing parent")
}

// A program starting while a Release holds the name's record (exclusive)
// waits for it, within its context: it never starts uncounted, which the
// Release would not see.
func TestRecordOpenWaitsForARelease(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	issue(t, c, "vm1", 1, WithBindingDir(place))
	f, err := os.Open(filepath.Join(place, "vm1"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)) // as Release holds it
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	g, err := OpenContext(ctx, c, "vm1", WithBindingDir(place))
	if err == nil {
		g.Close()
	}
	require.ErrorIs(t, err, ErrInUse)
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
	issue(t, c, "vm1", 1, WithBindingDir(place))
}

// Records cannot be turned off: WithBindingDir("") is refused before
// anything is made, and the message says to name a place.
func TestRecordPlaceRequired(t *testing.T) {
	t.Parallel()
	_, dir := recordHost(t)
	counter := filepath.Join(dir, "c")
	_, err := Open(counter, "vm", WithBindingDir(""))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Contains(t, err.Error(), "name a directory")
	require.NoFileExists(t, counter)
}

// Status reads the host's records: the name they give the counter, and a
// name released with it, also once the counter took another name on
// purpose (whose record comes first).
func TestReadHostFilesFromTheRecords(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	issue(t, c, "web_1", 1, WithBindingDir(place), WithRegistry(reg))
	hf, err := ReadHostFiles(c, WithBindingDir(place))
	require.NoError(t, err)
	require.Equal(t, "web_1", hf.Name)
	require.Empty(t, hf.Released)

	_, err = Release(t.Context(), c, "web_1", WithBindingDir(place), WithRegistry(reg))
	require.NoError(t, err)
	hf, err = ReadHostFiles(c, WithBindingDir(place))
	require.NoError(t, err)
	require.Equal(t, "web_1", hf.Released)

	issue(t, c, "a_web", 1, WithBindingDir(place), WithReclaim())
	hf, err = ReadHostFiles(c, WithBindingDir(place))
	require.NoError(t, err)
	require.Equal(t, "a_web", hf.Name)
	require.Equal(t, "web_1", hf.Released)
}

// The last program of a name closes the record cleanly even while another
// process holds the counter's lock (one opening the name, which waits for
// this program's presence lock next): the opener finds a clean close, so
// it neither raises the counter nor warns of a crash.
func TestRecordClosedCleanlyWhileAnOpenerHoldsTheCounterLock(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	g, err := Open(c, "vm1", WithBindingDir(place))
	require.NoError(t, err)
	_, err = g.NextN(3)
	require.NoError(t, err)

	f, err := os.Open(c)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
	require.NoError(t, g.Close())
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))

	var log bytes.Buffer
	g, err = Open(c, "vm1", WithBindingDir(place), WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	require.NoError(t, err)
	id, err := g.Next()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.Equal(t, uint64(4), id, "the next number follows the last one")
	require.NotContains(t, log.String(), "raised", "a clean close reads as one")
}

// A program whose counter was replaced at its path by one raised past the
// record's mark (the name went with the replacement) hands out nothing
// more from the old file.
func TestRecordReplacedCounterStopsTheOldProgram(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	g, err := Open(c, "vm1", WithBindingDir(place))
	require.NoError(t, err)
	defer g.Close()
	_, err = g.NextN(3)
	require.NoError(t, err)
	high := EncodeCounter(1 << 40)
	require.NoError(t, os.WriteFile(c+".new", high[:], 0o600))
	require.NoError(t, os.Rename(c+".new", c))
	g2, err := Open(c, "vm1", WithBindingDir(place))
	require.NoError(t, err, "the replacement takes the name over")
	defer g2.Close()
	_, err = g.NextN(1 << 20)
	require.ErrorIs(t, err, ErrReplaced, "the old file hands out nothing more")
}

// An Open that would fail after claiming (a counter the form has no number
// left in, one this user cannot write) is refused first: no record, no
// node number and no stride is claimed for it.
func TestRecordRefusedOpenClaimsNothing(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		setup func(t *testing.T, c string)
		opts  []Option
		want  error
	}{
		{"exhausted decimal", func(t *testing.T, c string) {
			_, err := Init(c, 101)
			require.NoError(t, err)
		}, []Option{WithFormat(FormatDecimal), WithNodeNumber(171), WithMaxID(50)}, ErrExhausted},
		{"exhausted striped", func(t *testing.T, c string) {
			_, err := Init(c, 101)
			require.NoError(t, err)
		}, []Option{WithFormat(FormatStriped), WithStride(100), WithNodeNumber(17), WithMaxID(5000)}, ErrExhausted},
		{"counter on a read-only mount", func(t *testing.T, c string) {
			_, err := Init(c, 1)
			require.NoError(t, err)
			readOnly(t, filepath.Dir(c))
		}, []Option{WithFormat(FormatStriped), WithStride(100), WithNodeNumber(17)}, unix.EROFS},
		{"missing counter in a read-only directory", func(t *testing.T, c string) {
			readOnly(t, filepath.Dir(c))
		}, []Option{WithFormat(FormatDecimal), WithNodeNumber(17)}, unix.EROFS},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			place, dir := recordHost(t)
			c := filepath.Join(dir, "counter.u64")
			tc.setup(t, c)
			_, err := Open(c, "vm1", append([]Option{WithBindingDir(place)}, tc.opts...)...)
			require.ErrorIs(t, err, tc.want)
			entries, rerr := os.ReadDir(place)
			if !errors.Is(rerr, os.ErrNotExist) {
				require.NoError(t, rerr)
			}
			for _, e := range entries {
				require.True(t, e.Name()[0] == '.', "nothing claimed or recorded: %s", e.Name())
			}
		})
	}
}

// readOnly bind-mounts dir read-only over itself for the rest of the test.
func readOnly(t *testing.T, dir string) {
	t.Helper()
	requireRoot(t)
	require.NoError(t, unix.Mount(dir, dir, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	require.NoError(t, unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""))
}

// A record belongs to its counter's owner, and only the counter's writers
// may open it, as they change: root using a service's counter leaves the
// service its own record, and a group that may no longer write the
// counter can no longer open (and lock) its record.
func TestRecordFollowsTheCounterOwnerAndMode(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	_, err := Init(c, 1)
	require.NoError(t, err)
	const svc, grp = 65534, 65534
	require.NoError(t, os.Chown(dir, svc, 0)) // the service's own directory
	require.NoError(t, os.Chown(c, svc, 0))
	rec := filepath.Join(place, "svc")
	perm := func() (uid, gid, mode uint32) {
		var st unix.Stat_t
		require.NoError(t, unix.Stat(rec, &st))
		return st.Uid, st.Gid, st.Mode & 0o7777
	}
	issue(t, c, "svc", 1, WithBindingDir(place))
	uid, _, mode := perm()
	require.Equal(t, uint32(svc), uid, "root made it for the service's counter: the service's")
	require.Equal(t, uint32(0o600), mode)

	require.NoError(t, os.Chown(c, svc, grp))
	require.NoError(t, os.Chmod(c, 0o660))
	issue(t, c, "svc", 1, WithBindingDir(place))
	uid, gid, mode := perm()
	require.Equal(t, []uint32{svc, grp, 0o660}, []uint32{uid, gid, mode}, "the group writes the counter: it keeps the record")

	require.NoError(t, os.Chmod(c, 0o640))
	issue(t, c, "svc", 1, WithBindingDir(place))
	_, _, mode = perm()
	require.Equal(t, uint32(0o600), mode, "the group only reads the counter now: it cannot open the record")
}

// recordSyncFaults fails the next syncs of records in place (fail of
// them) and counts them.
type recordSyncFaults struct {
	statefile.OS
	place       string
	fail, syncs int
}

func (x *recordSyncFaults) SyncFile(f *os.File) error {
	if strings.HasPrefix(f.Name(), x.place+string(filepath.Separator)) {
		x.syncs++
		if x.fail > 0 {
			x.fail--
			return syscall.EIO
		}
	}
	return x.OS.SyncFile(f)
}

// A record write whose sync failed is visible but not durable: the next
// update writes and syncs the record again rather than issue under the
// mark it reads (with sync off, a power cut would take both the counter
// and that mark, and the ids would be handed out again).
func TestRecordWriteWhoseSyncFailedIsWrittenAgain(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	x := &recordSyncFaults{place: place}
	g, err := Open(c, "vm1", WithBindingDir(place), WithSync(false), ExportWithFS(x))
	require.NoError(t, err)
	defer g.Close()
	before := x.syncs
	x.fail = 1
	_, err = g.Next()
	require.ErrorIs(t, err, syscall.EIO)
	n, err := g.Next()
	require.NoError(t, err)
	require.Equal(t, uint64(1), n)
	require.Equal(t, 2, x.syncs-before, "the record synced again before the number was handed out")
}

// A counter restored in place while a program runs, below the record's
// floor, is raised at that program's next update to the record's mark,
// whatever that program saw itself: another program of the name went
// further than it knows.
func TestRecordRestoreBelowTheFloorRaisedForARunningProgram(t *testing.T) {
	t.Parallel()
	skipShort(t)
	for _, at := range []uint64{100, 1100} { // below what the running program saw, and above it
		place, dir := recordHost(t)
		c := filepath.Join(dir, "counter.u64")
		issue(t, c, "vm1", 100, WithBindingDir(place))
		b, err := Open(c, "vm1", WithBindingDir(place))
		require.NoError(t, err)
		n, err := b.Next()
		require.NoError(t, err)
		require.Equal(t, uint64(101), n)
		issue(t, c, "vm1", 3000, WithBindingDir(place)) // 102..3101
		writeCounter(t, c, at)
		n, err = b.Next()
		require.NoError(t, err)
		require.Greater(t, n, uint64(3101), "restored to %d: raised past every number handed out", at)
		require.NoError(t, b.Close())
	}
}

// A counter put back exactly one number below the record's floor under a
// program that opened before the others went that far: its next number
// would be the floor itself, already handed out, so it is raised as a
// deeper roll-back is.
func TestRecordRestoreOneBelowTheFloorRaisedForARunningProgram(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	b, err := Open(c, "vm1", WithBindingDir(place))
	require.NoError(t, err)
	defer b.Close()
	_, err = b.Next()
	require.NoError(t, err)
	issue(t, c, "vm1", 3000, WithBindingDir(place))
	last, err := ReadCounter(c)
	require.NoError(t, err)
	p, err := hoststate.OpenPlace(place, hoststate.PlaceOptions{})
	require.NoError(t, err)
	r, ok, err := p.Read("vm1")
	require.NoError(t, p.Close())
	require.NoError(t, err)
	require.True(t, ok, "no record of vm1")
	require.NotZero(t, r.Floor, "the record's floor follows the counter")
	writeCounter(t, c, r.Floor-1)
	n, err := b.Next()
	require.NoError(t, err)
	require.Greater(t, n, last, "restored to %d, one below the floor %d: raised past every number handed out", r.Floor-1, r.Floor)
}

// A counter given to another user: root's next Open trusts the record
// that names that very counter, whoever made it, and gives it to the
// counter's new owner.
func TestRecordFollowsACounterGivenToAnotherUser(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	_, err := Init(c, 1)
	require.NoError(t, err)
	const alice, bob = 65534, 65533
	require.NoError(t, os.Chown(dir, alice, alice))
	require.NoError(t, os.Chown(c, alice, alice))
	issue(t, c, "svc", 1, WithBindingDir(place))
	rec := filepath.Join(place, "svc")
	var st unix.Stat_t
	require.NoError(t, unix.Stat(rec, &st))
	require.Equal(t, uint32(alice), st.Uid)

	require.NoError(t, os.Chown(dir, bob, bob))
	require.NoError(t, os.Chown(c, bob, bob))
	issue(t, c, "svc", 1, WithBindingDir(place))
	require.NoError(t, unix.Stat(rec, &st))
	require.Equal(t, uint32(bob), st.Uid, "the record follows the counter to its new owner")
}

// What another user's record says about a counter of root's (a name for
// it, a node number) is never taken as the counter's: a default name
// taken from it could be another host's.
func TestRecordOfAnotherUserGivesNoDefaultName(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	place, dir := recordHost(t)
	c := filepath.Join(dir, "counter.u64")
	issue(t, c, "vm2", 1, WithBindingDir(place), WithFormat(FormatDecimal), WithNodeNumber(7))
	require.NoError(t, os.Chown(filepath.Join(place, "vm2"), nobody, nobody))
	hf, err := ReadHostFiles(c, WithBindingDir(place))
	require.NoError(t, err)
	require.Empty(t, hf.Name, "no name from another user's record")
	_, _, _, ok, err := ReadNodeNumber(c, WithBindingDir(place))
	require.NoError(t, err)
	require.False(t, ok, "no node number from another user's record")
}

// An Open refused for a stride other than the host's claims no node
// number on the host: the claims of numbers are never given back, and
// the name that should get the number would be refused for good.
func TestRecordStrideRefusedClaimsNoNumber(t *testing.T) {
	t.Parallel()
	place, dir := recordHost(t)
	issue(t, filepath.Join(dir, "a.u64"), "a", 1, WithBindingDir(place), WithFormat(FormatStriped), WithNodeNumber(1), WithStride(10))

	_, err := Open(filepath.Join(dir, "b.u64"), "b", WithBindingDir(place), WithFormat(FormatStriped), WithNodeNumber(7), WithStride(100))
	require.ErrorIs(t, err, ErrStrideMismatch)
	for _, left := range []string{filepath.Join(place, "#node-7"), filepath.Join(dir, "b.u64")} {
		_, serr := os.Lstat(left)
		require.ErrorIs(t, serr, fs.ErrNotExist, "%s was made by a refused Open", left)
	}

	g, err := Open(filepath.Join(dir, "c.u64"), "c", WithBindingDir(place), WithFormat(FormatStriped), WithNodeNumber(7), WithStride(10))
	require.NoError(t, err)
	require.NoError(t, g.Close())
}
