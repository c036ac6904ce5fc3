package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/hoststate"
	"github.com/snapid/snapid/internal/statefile"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A user's record kept in the user's own place while the host had none
// is moved into the host's place, once root made it, only when no
// program of the name holds it: a program still running on the own
// record would go on unseen by every later Open, Release and close of
// the name, and a Release would record a final number below what it
// hands out.
func TestOwnRecordNotMovedUnderARunningProgram(t *testing.T) {
	base := t.TempDir()
	own := filepath.Join(base, "own")   // the user's own place
	host := filepath.Join(base, "host") // the host's place, made later
	require.NoError(t, os.Mkdir(filepath.Join(base, "ctr"), 0o700))
	counter := filepath.Join(base, "ctr", "c")
	oldTB := testBindingDir
	testBindingDir = func(string) string { return own }
	t.Cleanup(func() { testBindingDir = oldTB })

	a, err := Open(counter, "web") // running; its record is in the own place
	require.NoError(t, err)
	_, err = a.Next()
	require.NoError(t, err)

	require.NoError(t, os.Mkdir(host, 0o1777))
	require.NoError(t, os.Chmod(host, os.ModeSticky|0o777))
	hp, err := hoststate.OpenPlace(host, hoststate.PlaceOptions{Owners: []uint32{0}})
	require.NoError(t, err)
	defer hp.Close()
	o := defaultOptions()
	_, _, err = adoptOwnRecord(hp, own, "web", &o)
	require.ErrorIs(t, err, ErrInUse)
	_, ok, err := hp.Read("web")
	require.NoError(t, err)
	require.False(t, ok, "nothing was moved")
	_, err = os.Lstat(filepath.Join(own, "web"))
	require.NoError(t, err, "the own record stays where its program is")

	require.NoError(t, a.Close())
	r, ok, err := adoptOwnRecord(hp, own, "web", &o)
	require.NoError(t, err)
	require.True(t, ok, "moved once no program holds it")
	require.Equal(t, "web", r.Name)
	_, err = os.Lstat(filepath.Join(own, "web"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// pauseFS is the real file system, but its SyncDir of dir, once the file
// want is there, waits until released (the first time only).
type pauseFS struct {
	statefile.OS
	dir, want string
	once      sync.Once
	reached   chan struct{}
	release   chan struct{}
}

func (f *pauseFS) SyncDir(dir string) error {
	if dir == f.dir {
		if _, err := os.Lstat(f.want); err == nil {
			f.once.Do(func() { close(f.reached); <-f.release })
		}
	}
	return f.OS.SyncDir(dir)
}

// blockedFlockWaiter reports whether /proc/locks shows a process waiting
// for a FLOCK (a line starting "N: -> FLOCK").
func blockedFlockWaiter() bool {
	b, _ := os.ReadFile("/proc/locks")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "-> FLOCK") {
			return true
		}
	}
	return false
}

// A program that chose the user's own place, and opened its record
// there, but has not yet taken its presence lock when another Open moves
// the record into the host's place (its exclusive try then succeeds)
// finds its record unlinked as it becomes present, and is refused: it
// would otherwise issue unseen by every later Release.
func TestOwnRecordMovedBeforePresenceRefused(t *testing.T) {
	base := t.TempDir()
	own := filepath.Join(base, "own")     // ~/.local/state/snapid/records
	host := filepath.Join(base, "host")   // /var/lib/snapid/records, made by root later
	other := filepath.Join(base, "other") // another host's place
	setup := filepath.Join(base, "setup")
	require.NoError(t, os.Mkdir(filepath.Join(base, "ctr"), 0o700))
	counter := filepath.Join(base, "ctr", "c")
	var mu sync.Mutex
	place := setup
	oldTB := testBindingDir
	testBindingDir = func(string) string { mu.Lock(); defer mu.Unlock(); return place }
	t.Cleanup(func() { testBindingDir = oldTB })
	setPlace := func(p string) { mu.Lock(); place = p; mu.Unlock() }

	reg := registrytest.NewRegistry()
	ctx := context.Background()
	// The name registered with this counter once (its owner token beside
	// it); then its programs run without the registry.
	g0, err := Open(counter, "web", WithRegistry(reg))
	require.NoError(t, err)
	_, err = g0.Next()
	require.NoError(t, err)
	require.NoError(t, g0.Close())

	// Program A chooses the user's own place (the host has none yet).
	setPlace(own)
	require.NoError(t, os.Mkdir(own, 0o700))
	pf := &pauseFS{dir: own, want: filepath.Join(own, "web"), reached: make(chan struct{}), release: make(chan struct{})}
	type result struct {
		g   *Generator
		err error
	}
	done := make(chan result, 1)
	go func() {
		g, err := Open(counter, "web", withFS(pf))
		done <- result{g, err}
	}()
	select {
	case <-pf.reached: // A made its record in the own place
	case r := <-done:
		t.Fatalf("A's Open returned before making its record: %v", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("A never made its record")
	}
	// Someone (an operator's snapctl init, another program) holds the
	// counter's lock a moment: A opens its record, then waits for the
	// counter's lock to take its presence.
	cf, err := os.Open(counter)
	require.NoError(t, err)
	defer cf.Close()
	require.NoError(t, unix.Flock(int(cf.Fd()), unix.LOCK_EX))
	close(pf.release)
	for i := 0; !blockedFlockWaiter(); i++ {
		require.Less(t, i, 1000, "A never waited for the counter's lock")
		time.Sleep(5 * time.Millisecond)
	}

	// Root makes the host's place; the user's next Open (any snapctl
	// next) takes the record into it: findRecord -> adoptOwnRecord.
	require.NoError(t, os.Mkdir(host, 0o1777))
	require.NoError(t, os.Chmod(host, os.ModeSticky|0o777))
	setPlace(host)
	hp, err := hoststate.OpenPlace(host, hoststate.PlaceOptions{Owners: []uint32{0}})
	require.NoError(t, err)
	o := defaultOptions()
	_, moved, aerr := adoptOwnRecord(hp, own, "web", &o)
	hp.Close()
	require.NoError(t, unix.Flock(int(cf.Fd()), unix.LOCK_UN))
	r := <-done
	if aerr != nil || !moved {
		// The move refused, or A's Open failed: both safe.
		if r.g != nil {
			r.g.Close()
		}
		return
	}
	if r.err != nil {
		return // A noticed its record moved: safe
	}
	a := r.g
	defer a.Close()
	for range 10 {
		_, err := a.Next()
		require.NoError(t, err)
	}
	final, err := Release(ctx, counter, "web", WithRegistry(reg))
	if err == nil {
		first, err := a.NextN(2 * recordStep)
		require.NoError(t, err, "A goes on issuing after the Release")
		last := first + 2*recordStep - 1
		b, err := Open(filepath.Join(base, "c2"), "web", WithRegistry(reg), WithBindingDir(other))
		require.NoError(t, err)
		defer b.Close()
		m, err := b.Next()
		require.NoError(t, err)
		t.Fatalf("the record was moved between A's choice of the own place and its presence lock; Release then succeeded (final %d) while A runs: "+
			"A issued web-%d..web-%d after it, and the name's next holder issued web-%d (issued twice: %v)", final, first, last, m, m >= first && m <= last)
	}
	require.ErrorIs(t, err, ErrInUse)
}
