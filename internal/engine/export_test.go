package engine

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/internal/leasefile"
	"github.com/snapid/snapid/internal/retry"
	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// Hooks for the external tests (package snapid_test). Tests that open
// Generators on a registry use the in-memory one of registrytest, and
// registrytest imports snapid, so they cannot be internal tests; what they
// need of the internals is exported here, for tests only.

// ExportExtend runs an extension of the reserved range now, as the
// background extension does (need 0) or a caller waiting for room.
func (g *Generator) ExportExtend(ctx context.Context, need uint64) error {
	return g.res.Extend(ctx, need)
}

// ExportCloseReservation does what Close does on the registry's side only
// (the last process sets the mark back); ExportCrash then lets the rest go.
func (g *Generator) ExportCloseReservation() error {
	g.closed.Store(true)
	return g.res.Close()
}

// ExportUpdateInFlight reports whether a counter update of g holds the
// Generator's file mutex.
func (g *Generator) ExportUpdateInFlight() bool {
	if g.mu.TryLock() {
		g.mu.Unlock()
		return false
	}
	return true
}

// ExportOpenGroupSize returns how many numbers the open group-commit group
// asks for (callers queued behind a flush in progress).
func (g *Generator) ExportOpenGroupSize() uint64 {
	_, numbers := g.gc.Waiting()
	return numbers
}

// ExportHoldNextWrite returns an option whose counter I/O holds its next
// write: entered is closed when that write starts, and release lets it go
// on.
func ExportHoldNextWrite() (opt Option, entered <-chan struct{}, release func()) {
	x := &ctFaultIO{}
	entered, release = x.hold()
	return withIO(x), entered, release
}

// ExportWithClock replaces the Generator's clock (internal/clock).
var ExportWithClock = withClock

// ExportWithFS replaces the file-system operations that create files.
func ExportWithFS(fs ExportFS) Option { return withFS(fs) }

// ExportFS is the file-system layer that creates the counter and the files
// beside it (fsOps).
type ExportFS = fsOps

// ExportOSFS is the real one.
type ExportOSFS = osFS

// The suffixes of the files beside the counter.
const (
	ExportOwnerSuffix    = ownerSuffix
	ExportMarkSuffix     = markSuffix
	ExportSessionSuffix  = sessionSuffix
	ExportPresenceSuffix = presenceSuffix
)

// ExportExtending reports whether a background extension is running.
func (g *Generator) ExportExtending() bool { return g.res != nil && g.res.Extending() }

// Each temporary directory of a test is a host of its own for the
// records of names: a counter in $TMPDIR/TestName123/001/... is recorded
// in $TMPDIR/TestName123/records-001, which the test's cleanup removes.
// Tests running in parallel under one name then do not refuse each other,
// a test's second host is a second t.TempDir(), and the processes a test
// starts (children of this binary, with its TMPDIR) share the records of
// the directory they use as programs of one host do.
func init() {
	testBindingDir = func(counterPath string) string {
		rel, err := filepath.Rel(os.TempDir(), counterPath)
		if err != nil || !filepath.IsLocal(rel) {
			return ""
		}
		parts := strings.SplitN(rel, string(filepath.Separator), 3)
		switch len(parts) {
		case 3:
			return filepath.Join(os.TempDir(), parts[0], "records-"+parts[1])
		case 2:
			// A directory of its own ($TMPDIR/snapid-example-123/c), as
			// the examples make: its own host too.
			return filepath.Join(os.TempDir(), parts[0], "records")
		}
		return ""
	}
}

// ExportTestBindingDir returns the binding directory of the test whose
// temporary directory holds counterPath.
func ExportTestBindingDir(counterPath string) string { return testBindingDir(counterPath) }

// ExportBindingDefaults makes shared the host-wide binding directory and
// turns the per-test directories off, until the test ends. The test must
// not be parallel (it uses t.Setenv to make sure).
func ExportBindingDefaults(t interface {
	Setenv(k, v string)
	Cleanup(func())
}, shared string) {
	t.Setenv("SNAPID_BINDING_DIR", "")
	oldShared, oldTest := defaultBindingDir, testBindingDir
	defaultBindingDir, testBindingDir = shared, nil
	t.Cleanup(func() { defaultBindingDir, testBindingDir = oldShared, oldTest })
}

// ExportHeartbeatHolder reports whether g holds its host's heartbeat role.
func (g *Generator) ExportHeartbeatHolder() bool {
	if g.res == nil || g.res.Files().HeartbeatFile() == nil {
		return false
	}
	// Another descriptor of this process: flock conflicts with g's.
	f, err := os.Open(g.res.Files().HeartbeatFile().Name())
	if err != nil {
		return false
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil && g.res.Files().TryHeartbeatRole()
}

// ExportRetryAttempts is how many times a start-up's registry call is sent
// at most.
const ExportRetryAttempts = retry.Attempts

// ExportTransient reports whether a start-up's registry call that failed
// with err is sent again.
func ExportTransient(err error) bool { return retry.Transient(err) }

// ExportHeartbeatInode returns the inode of the heartbeat file g has
// open, or 0.
func (g *Generator) ExportHeartbeatInode() uint64 {
	if g.res == nil || g.res.Files().HeartbeatFile() == nil {
		return 0
	}
	var st unix.Stat_t
	if unix.Fstat(int(g.res.Files().HeartbeatFile().Fd()), &st) != nil {
		return 0
	}
	return st.Ino
}

// ExportHeartbeatBusy reports whether a heartbeat refresh of g is in
// flight (tests on a fake clock wait for it before moving the clock).
func (g *Generator) ExportHeartbeatBusy() bool { return g.res != nil && g.res.Touching() }

// ExportHeartbeatRunning reports whether g's heartbeat loop runs: g has
// a registry, is not closed, and has not lost its name.
func (g *Generator) ExportHeartbeatRunning() bool {
	return g.res != nil && g.res.Context().Err() == nil && g.res.Lost() == nil
}

// ExportLastHostHeartbeat is when the host's heartbeat last reached the
// registry for g's claim, as its record says (the zero time if never).
func (g *Generator) ExportLastHostHeartbeat() time.Time { return g.res.LastHostHeartbeat() }

// nowClock is the real clock with another reading of now: timers, tickers,
// sleeps and deadlines run in real time, every decision reads now.
type nowClock struct {
	clock.Real
	now func() time.Time
}

func (c nowClock) Now() time.Time                  { return c.now() }
func (c nowClock) Since(t time.Time) time.Duration { return c.now().Sub(t) }
func (c nowClock) Until(t time.Time) time.Duration { return t.Sub(c.now()) }

// ExportWithNow gives a Generator a clock whose readings come from now
// while its waits stay real (tests that set the time by hand between real
// polls).
func ExportWithNow(now func() time.Time) Option { return withClock(nowClock{now: now}) }

// ExportPlaceCanBeMade is placeCanBeMade: whether a user's Open may take
// the host's default place for missing (and keep records of its own).
func ExportPlaceCanBeMade() error { return placeCanBeMade() }

// ExportWithFileFS replaces the file-system seam with one that also does
// file I/O (the mark and heartbeat files' reads and writes go through it).
func ExportWithFileFS(x interface {
	statefile.FS
	fileIO
}) Option {
	return withFS(x)
}

// ExportLeaseSyncs records which numbers of the sequence lease files the
// syncs cover: a lease file's position p over its current range [first,
// last] says that [first, p-1] are taken, and once a sync of the file
// returned, those numbers are durable. Other files go straight to the OS.
type ExportLeaseSyncs struct {
	mu      sync.Mutex
	written map[string]leasefile.Record // per lease file, as last written
	durable []leasefile.Range           // numbers taken as of a sync that returned
	syncs   int
}

// ExportWithLeaseSyncs returns the option that gives a Generator's file
// I/O to x.
func ExportWithLeaseSyncs(x *ExportLeaseSyncs) Option { return withIO(x) }

func (x *ExportLeaseSyncs) ReadAt(f *os.File, b []byte, off int64) (int, error) {
	return osIO{}.ReadAt(f, b, off)
}

func (x *ExportLeaseSyncs) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	n, err := osIO{}.WriteAt(f, b, off)
	if err != nil || !strings.Contains(f.Name(), leaseSuffix) {
		return n, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.written == nil {
		x.written = map[string]leasefile.Record{}
	}
	switch {
	case off == 0 && len(b) == leasefile.Size:
		if l, derr := leasefile.Decode(b, leasefile.Size); derr == nil {
			x.written[f.Name()] = l
		}
	case off == 8 && len(b) == 8:
		l := x.written[f.Name()]
		l.Pos = binary.LittleEndian.Uint64(b)
		x.written[f.Name()] = l
	}
	return n, err
}

func (x *ExportLeaseSyncs) Sync(f *os.File) error {
	if err := (osIO{}).Sync(f); err != nil {
		return err
	}
	if !strings.Contains(f.Name(), leaseSuffix) {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.syncs++
	if l := x.written[f.Name()]; !l.Cur.None() && l.Pos > l.Cur.First {
		x.durable = append(x.durable, leasefile.Range{First: l.Cur.First, Last: l.Pos - 1})
	}
	return nil
}

// Covered reports whether the numbers [first, last] were all taken in a
// lease file as of a sync that returned.
func (x *ExportLeaseSyncs) Covered(first, last uint64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, r := range x.durable {
		if r.First <= first && last <= r.Last {
			return true
		}
	}
	return false
}

// Syncs returns how many lease-file syncs returned.
func (x *ExportLeaseSyncs) Syncs() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.syncs
}

// ExportFailFloorIO fails writes to lease floor files while Fail is set.
type ExportFailFloorIO struct{ Fail atomic.Bool }

func ExportWithFailFloorIO(x *ExportFailFloorIO) Option { return withIO(x) }

func (x *ExportFailFloorIO) ReadAt(f *os.File, b []byte, off int64) (int, error) {
	return osIO{}.ReadAt(f, b, off)
}

func (x *ExportFailFloorIO) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	if x.Fail.Load() && strings.HasSuffix(f.Name(), floorSuffix) {
		return 0, syscall.EIO
	}
	return osIO{}.WriteAt(f, b, off)
}

func (x *ExportFailFloorIO) Sync(f *os.File) error { return osIO{}.Sync(f) }

// ExportWaitSequences waits until no Sequence of g prefetches a lease or
// refills a block in the background.
func (g *Generator) ExportWaitSequences() {
	for {
		busy := false
		for _, s := range g.seqs.Open() {
			if s.Busy() {
				busy = true
			}
		}
		if !busy {
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// skipShort skips, under -short, a test that waits more than a second
// (real processes, real timeouts, many syncs); the test command runs
// every one of them.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("waits more than a second: runs without -short")
	}
}

// SkipShort is skipShort for the package's external tests.
var SkipShort = skipShort
