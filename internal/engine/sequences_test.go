package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/snapid/snapid/admin"
	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// seqHost is one host: a state directory with its own node name.
type seqHost struct {
	dir, path, name string
	info            HostInfo
}

func newSeqHost(t *testing.T, name string) seqHost {
	dir, path := ctPath(t)
	return seqHost{dir: dir, path: path, name: name, info: HostInfo{Hostname: name + ".example", MachineID: "m-" + name}}
}

// open opens a Generator ("a process") of the host.
func (h seqHost) open(t *testing.T, reg registry.Registry, opts ...Option) *Generator {
	t.Helper()
	opts = append([]Option{WithRegistry(reg), WithSync(false), WithHostInfo(h.info)}, opts...)
	g, err := Open(h.path, h.name, opts...)
	require.NoError(t, err)
	return g
}

func openSeq(t *testing.T, g *Generator, name string, opts ...SequenceOption) *Sequence {
	t.Helper()
	s, err := g.Sequence(name, opts...)
	require.NoError(t, err)
	return s
}

func createSeq(t *testing.T, reg registry.Registry, name string, start, max uint64) {
	t.Helper()
	_, err := CreateSequence(context.Background(), reg, name, start, max)
	require.NoError(t, err)
}

// requireUnique fails on a number seen twice or outside [lo, hi].
func requireUnique(t *testing.T, nums []uint64, lo, hi uint64) map[uint64]bool {
	t.Helper()
	seen := make(map[uint64]bool, len(nums))
	for _, n := range nums {
		require.False(t, seen[n], "number %d issued twice", n)
		require.True(t, n >= lo && n <= hi, "number %d outside [%d, %d]", n, lo, hi)
		seen[n] = true
	}
	return seen
}

// drawSeq takes n numbers with Next, or fewer if the sequence ends.
func drawSeq(t *testing.T, s *Sequence, n int) []uint64 {
	t.Helper()
	out := make([]uint64, 0, n)
	for range n {
		v, err := s.Next()
		require.NoError(t, err)
		out = append(out, v)
	}
	return out
}

// Several hosts (state directories with their own names), each with two
// processes (Generators on one counter), each with goroutines calling Next
// and NextN at once: every number is unique and in [start, max].
func TestSequenceUniqueAcrossHostsProcessesGoroutines(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	const start = 1_000_000
	createSeq(t, reg, "articles", start, registry.MaxSequence)
	var mu sync.Mutex
	var all []uint64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for h := range 3 {
		host := newSeqHost(t, fmt.Sprintf("web_%d", h))
		for range 2 {
			g := host.open(t, reg)
			t.Cleanup(func() { g.Close() })
			s := openSeq(t, g, "articles", SequenceBlock(7), SequenceLeaseSize(50))
			t.Cleanup(func() { s.Close() })
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var mine []uint64
					for i := range 300 {
						if i%50 == 0 {
							first, err := s.NextN(5)
							if err != nil {
								errs <- err
								return
							}
							for k := range uint64(5) {
								mine = append(mine, first+k)
							}
							continue
						}
						v, err := s.Next()
						if err != nil {
							errs <- err
							return
						}
						mine = append(mine, v)
					}
					mu.Lock()
					all = append(all, mine...)
					mu.Unlock()
				}()
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, all, 3*2*4*(294+6*5))
	requireUnique(t, all, start, registry.MaxSequence)
}

// A 32-bit sequence run to its max by several hosts and processes: every
// number from start to max is issued exactly once (no process exits, so
// no gap), then ErrExhausted everywhere, for Next and NextN.
func TestSequenceRunToMax32Bit(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	const max = 1<<31 - 1
	const start = max - 2999
	createSeq(t, reg, "ticket", start, max)
	var seqs []*Sequence
	for h := range 3 {
		host := newSeqHost(t, fmt.Sprintf("app_%d", h))
		for range 2 {
			g := host.open(t, reg)
			t.Cleanup(func() { g.Close() })
			s := openSeq(t, g, "ticket", SequenceBlock(16), SequenceLeaseSize(100))
			t.Cleanup(func() { s.Close() })
			seqs = append(seqs, s)
		}
	}
	var mu sync.Mutex
	var all []uint64
	var wg sync.WaitGroup
	var unexpected []error
	for _, s := range seqs {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []uint64
				for {
					v, err := s.Next()
					if errors.Is(err, ErrExhausted) {
						break
					}
					if err != nil {
						mu.Lock()
						unexpected = append(unexpected, err)
						mu.Unlock()
						return
					}
					mine = append(mine, v)
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	require.Empty(t, unexpected)
	seen := requireUnique(t, all, start, max)
	require.Len(t, seen, 3000, "every number from start to max is issued")
	for _, s := range seqs {
		_, err := s.Next()
		require.ErrorIs(t, err, ErrExhausted)
		_, err = s.NextN(1)
		require.ErrorIs(t, err, ErrExhausted)
	}
	st, err := reg.SequenceStatus(context.Background(), "ticket")
	require.NoError(t, err)
	require.Equal(t, uint64(max+1), st.Next, "GLOBAL handed out everything and nothing above max")
}

// The lease file restored from a backup: after the host's lease moved on
// (another process of the host joined the same claim), after a restart
// (a new claim), and a whole state directory cloned onto another machine:
// no number is issued twice.
func TestSequenceRestoredAndClonedLeaseFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []string{"lease moved on", "restart", "clone"} {
		t.Run(tc, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			createSeq(t, reg, "orders", 1, registry.MaxSequence)
			host := newSeqHost(t, "shop")
			opts := []SequenceOption{SequenceBlock(5), SequenceLeaseSize(20)}
			g1 := host.open(t, reg, WithCloneWindow(0))
			s1 := openSeq(t, g1, "orders", opts...)
			issued := drawSeq(t, s1, 8)
			backup := t.TempDir()
			lease := filepath.Base(host.path) + ".seq.orders"
			files := []string{filepath.Base(host.path), filepath.Base(host.path) + ExportOwnerSuffix,
				filepath.Base(host.path) + ExportMarkSuffix, filepath.Base(host.path) + ExportSessionSuffix, lease}
			testfs.CopyFiles(t, host.dir, backup, files...)
			issued = append(issued, drawSeq(t, s1, 60)...) // past the lease in the backup
			switch tc {
			case "lease moved on":
				g2 := host.open(t, reg) // another process, same claim
				defer g2.Close()
				testfs.CopyFiles(t, backup, host.dir, lease)
				s2 := openSeq(t, g2, "orders", opts...)
				issued = append(issued, drawSeq(t, s2, 40)...)
				issued = append(issued, drawSeq(t, s1, 40)...)
				require.NoError(t, s2.Close())
			case "restart":
				require.NoError(t, s1.Close())
				require.NoError(t, g1.Close())
				testfs.CopyFiles(t, backup, host.dir, lease)
				g1 = host.open(t, reg)
				s1 = openSeq(t, g1, "orders", opts...)
				issued = append(issued, drawSeq(t, s1, 40)...)
			case "clone":
				clone := host
				clone.dir = t.TempDir()
				clone.path = filepath.Join(clone.dir, filepath.Base(host.path))
				clone.info = HostInfo{Hostname: "clone.example", MachineID: "m-clone"}
				testfs.CopyFiles(t, backup, clone.dir, files...)
				g3 := clone.open(t, reg, WithCloneWindow(0))
				defer g3.Close()
				s3 := openSeq(t, g3, "orders", opts...)
				issued = append(issued, drawSeq(t, s3, 40)...)
				// The original goes on from what its file holds, then
				// stops: its claim was superseded.
				for i := 0; ; i++ {
					require.Less(t, i, 100_000, "the original never stopped")
					v, err := s1.Next()
					if err != nil {
						require.ErrorIs(t, err, ErrNameTaken)
						break
					}
					issued = append(issued, v)
				}
				require.NoError(t, s3.Close())
			}
			requireUnique(t, issued, 1, registry.MaxSequence)
			require.NoError(t, s1.Close())
			require.NoError(t, g1.Close())
		})
	}
}

// The registry goes down: Next goes on from the host's lease, then fails
// with ErrRegistry at its end, and goes on once the registry is back.
func TestSequenceRegistryOutage(t *testing.T) {
	t.Parallel()
	skipShort(t)
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "n", 1, registry.MaxSequence)
	host := newSeqHost(t, "web")
	g := host.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "n", SequenceBlock(4), SequenceLeaseSize(40))
	defer s.Close()
	issued := drawSeq(t, s, 1)
	reg.SetDown(true)
	var err error
	for range 200 {
		var v uint64
		if v, err = s.Next(); err != nil {
			break
		}
		issued = append(issued, v)
	}
	require.ErrorIs(t, err, ErrRegistry)
	require.GreaterOrEqual(t, len(issued), 40, "the lease in hand is issued during the outage")
	reg.SetDown(false)
	issued = append(issued, drawSeq(t, s, 100)...)
	requireUnique(t, issued, 1, registry.MaxSequence)
}

// noSeqRegistry is a Registry that does not keep sequences.
type noSeqRegistry struct{ registry.Registry }

// Bad input gets a clear error and changes nothing, on disk or in the
// registry.
func TestSequenceBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := registrytest.NewRegistry()
	for _, tc := range []struct {
		what       string
		name       string
		start, max uint64
		want       error
	}{
		{"invalid name", "Articles", 1, 10, ErrInvalidName},
		{"name with a dash", "a-b", 1, 10, ErrInvalidName},
		{"start 0", "a", 0, 10, ErrInvalidSequence},
		{"max below start", "a", 11, 10, ErrInvalidSequence},
		{"max above 2^63-1", "a", 1, registry.MaxSequence + 1, ErrInvalidSequence},
	} {
		_, err := CreateSequence(ctx, reg, tc.name, tc.start, tc.max)
		require.ErrorIs(t, err, tc.want, tc.what)
	}
	_, err := CreateSequence(ctx, noSeqRegistry{reg}, "a", 1, 10)
	require.ErrorIs(t, err, ErrSequencesUnsupported)
	_, err = CreateSequence(ctx, nil, "a", 1, 10)
	require.ErrorIs(t, err, ErrSequencesUnsupported)
	list, err := reg.ListSequences(ctx)
	require.NoError(t, err)
	require.Empty(t, list, "refused creations created nothing")

	createSeq(t, reg, "ids", 1, 100)
	_, err = CreateSequence(ctx, reg, "ids", 1, registry.MaxSequence+1)
	require.ErrorIs(t, err, ErrInvalidSequence)
	host := newSeqHost(t, "web")
	g := host.open(t, reg)
	defer g.Close()
	before := testfs.Snapshot(t, host.dir)
	for _, tc := range []struct {
		what string
		name string
		opts []SequenceOption
		want error
	}{
		{"invalid sequence name", "Bad", nil, ErrInvalidName},
		{"missing sequence", "missing", nil, ErrNoSequence},
		{"block 0", "ids", []SequenceOption{SequenceBlock(0)}, ErrInvalidOption},
		{"lease 0", "ids", []SequenceOption{SequenceLeaseSize(0)}, ErrInvalidOption},
	} {
		_, err := g.Sequence(tc.name, tc.opts...)
		require.ErrorIs(t, err, tc.want, tc.what)
	}
	gNoSeq := host.open(t, noSeqRegistry{reg})
	_, err = gNoSeq.Sequence("ids")
	require.ErrorIs(t, err, ErrSequencesUnsupported)
	require.NoError(t, gNoSeq.Close())
	testfs.RequireUnchanged(t, host.dir, before)
	_, plain := ctPath(t)
	gPlain, err := Open(plain, "web", WithSync(false))
	require.NoError(t, err)
	_, err = gPlain.Sequence("ids")
	require.ErrorIs(t, err, ErrSequencesUnsupported)
	require.NoError(t, gPlain.Close())

	s := openSeq(t, g, "ids", SequenceLeaseSize(10))
	for _, k := range []uint64{0, 11} {
		_, err := s.NextN(k)
		require.ErrorIs(t, err, ErrInvalidOption, "NextN(%d)", k)
	}
	require.NoError(t, s.Close())
	st, err := reg.SequenceStatus(ctx, "ids")
	require.NoError(t, err)
	require.Empty(t, st.Leases, "refused calls leased nothing")
	require.Equal(t, uint64(100), st.Max)
}

// A corrupt lease file, or one of another node name, is refused with
// ErrCorrupt, naming the lease file, and left as it is.
func TestSequenceCorruptLeaseFileRefused(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "ids", 1, registry.MaxSequence)
	host := newSeqHost(t, "web")
	g := host.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "ids")
	drawSeq(t, s, 3)
	require.NoError(t, s.Close())
	lease := host.path + ".seq.ids"
	good, err := os.ReadFile(lease)
	require.NoError(t, err)
	other := newSeqHost(t, "api")
	gOther := other.open(t, reg)
	defer gOther.Close()
	sOther := openSeq(t, gOther, "ids")
	require.NoError(t, sOther.Close())
	otherFile, err := os.ReadFile(other.path + ".seq.ids")
	require.NoError(t, err)
	flip := func(i int) []byte {
		b := append([]byte(nil), good...)
		b[i] ^= 0x40
		return b
	}
	for _, tc := range []struct {
		what    string
		content []byte
	}{
		{"empty", nil},
		{"short", good[:100]},
		{"long", append(append([]byte(nil), good...), 0)},
		{"bad magic", flip(0)},
		{"range bit flipped", flip(17)},
		{"session bit flipped", flip(50)},
		{"position outside its range", func() []byte { b := append([]byte(nil), good...); b[15] = 0x7f; return b }()},
		{"another host's file", otherFile},
	} {
		require.NoError(t, os.WriteFile(lease, tc.content, 0o600))
		before := testfs.Snapshot(t, host.dir)
		_, err := g.Sequence("ids")
		requireCorruptFile(t, err, ".seq.", tc.what)
		require.ErrorIs(t, err, ErrCorrupt, tc.what)
		testfs.RequireUnchanged(t, host.dir, before)
	}
	require.NoError(t, os.WriteFile(lease, flip(17), 0o600))
	_, _, _, _, err = ReadLeaseFile(host.path, "ids")
	requireCorruptFile(t, err, ".seq.")
}

// Numbers of one process come from blocks of its host's lease, in
// increasing order within a block, and the lease file records the host's
// lease as the registry does.
func TestSequenceLeaseFileMatchesRegistry(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "ids", 500, registry.MaxSequence)
	host := newSeqHost(t, "web")
	g := host.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "ids", SequenceBlock(10), SequenceLeaseSize(100))
	nums := drawSeq(t, s, 25)
	require.True(t, sort.SliceIsSorted(nums, func(i, j int) bool { return nums[i] < nums[j] }))
	require.Equal(t, uint64(500), nums[0])
	require.NoError(t, s.Close())
	cur, ahead, pos, ok, err := ReadLeaseFile(host.path, "ids")
	require.NoError(t, err)
	require.True(t, ok)
	rec, err := reg.HostLease(context.Background(), "ids", "web")
	require.NoError(t, err)
	latest := cur
	if ahead.First != 0 {
		latest = ahead
	}
	require.Equal(t, [2]uint64{rec.First, rec.Last}, [2]uint64{latest.First, latest.Last})
	require.Equal(t, rec.Session, cur.Session)
	require.GreaterOrEqual(t, pos, uint64(525), "the file's position is past every number handed out")
	require.LessOrEqual(t, pos, cur.Last+1)
}

// A busy process takes larger blocks and leases (doubling while each lasts
// less than a moment), so that it does not wait for the registry or the
// disk at every small lease: far fewer leases than at a fixed size.
func TestSequenceSizesGrowWhenBusy(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	var leases int
	var mu sync.Mutex
	reg.SetHook(func(_ context.Context, op, _ string) error {
		if op == "lease" {
			mu.Lock()
			leases++
			mu.Unlock()
		}
		return nil
	})
	createSeq(t, reg, "ids", 1, registry.MaxSequence)
	host := newSeqHost(t, "web")
	g := host.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "ids", SequenceBlock(10), SequenceLeaseSize(100))
	defer s.Close()
	requireUnique(t, drawSeq(t, s, 200_000), 1, registry.MaxSequence)
	mu.Lock()
	defer mu.Unlock()
	require.Less(t, leases, 200, "200000 numbers at a fixed lease of 100 would take 2000 leases")
}

// holdingRegistry holds the reply of one armed LeaseSequence after the
// lease is made, as a slow network would: the registry records the lease
// before the process installs it in the lease file.
type holdingRegistry struct {
	*registrytest.Registry
	armed   atomic.Bool
	entered chan registry.SequenceLease
	release chan struct{}
}

func (h *holdingRegistry) LeaseSequence(ctx context.Context, req registry.LeaseRequest) (registry.SequenceLease, error) {
	l, err := h.Registry.LeaseSequence(ctx, req)
	if err == nil && h.armed.CompareAndSwap(true, false) {
		h.entered <- l
		<-h.release
	}
	return l, err
}

// A process of the host opening the sequence while another process is
// between a lease and recording it in the file waits for it, instead of
// taking the file for a stale copy and dropping its ranges (and the new
// lease: a gap).
func TestSequenceOpenWaitsForLeaseInFlight(t *testing.T) {
	t.Parallel()
	reg := &holdingRegistry{Registry: registrytest.NewRegistry(), entered: make(chan registry.SequenceLease, 1), release: make(chan struct{})}
	createSeq(t, reg, "ids", 1, registry.MaxSequence)
	host := newSeqHost(t, "web")
	gA := host.open(t, reg)
	defer gA.Close()
	sA := openSeq(t, gA, "ids", SequenceLeaseSize(20))
	defer sA.Close()
	first, err := sA.NextN(15)
	require.NoError(t, err)
	require.Equal(t, uint64(1), first)
	reg.armed.Store(true)
	type res struct {
		n   uint64
		err error
	}
	aDone := make(chan res, 1)
	go func() {
		n, err := sA.NextN(10) // more than the 5 left: a lease
		aDone <- res{n, err}
	}()
	l2 := <-reg.entered
	gB := host.open(t, reg) // another process of the host
	defer gB.Close()
	type opened struct {
		s   *Sequence
		err error
	}
	bDone := make(chan opened, 1)
	go func() {
		s, err := gB.Sequence("ids", SequenceLeaseSize(20))
		bDone <- opened{s, err}
	}()
	var b opened
	select {
	case b = <-bDone:
	case <-time.After(200 * time.Millisecond): // waiting for A, as it should
	}
	close(reg.release)
	a := <-aDone
	require.NoError(t, a.err)
	require.Equal(t, l2.First, a.n, "A's numbers come from the lease it took, not from a later one")
	if b.s == nil && b.err == nil {
		b = <-bDone
	}
	require.NoError(t, b.err)
	sB := b.s
	defer sB.Close()
	v, err := sB.Next()
	require.NoError(t, err)
	require.Equal(t, l2.First+10, v, "B goes on in the file's lease: no gap")
}

// The lease file and its refill lock file are created like the counter,
// through the file-system layer: synced before they get their names, the
// directory synced after; a failed directory sync fails Sequence.
func TestSequenceFilesCreatedAtomically(t *testing.T) {
	t.Parallel()
	for _, target := range []string{".seq.ids", ".seq.ids.refill"} {
		t.Run(target, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			createSeq(t, reg, "ids", 1, registry.MaxSequence)
			host := newSeqHost(t, "web")
			rec := &recordingFS{}
			g := host.open(t, reg, ExportWithFS(rec))
			defer g.Close()
			s := openSeq(t, g, "ids")
			drawSeq(t, s, 3)
			require.NoError(t, s.Close())
			ops := rec.snapshot()
			at := slices.IndexFunc(ops, func(o fsOp) bool { return o.op == "link" && o.to == host.path+target })
			require.GreaterOrEqual(t, at, 0, "%s not made through the file-system layer: %v", target, ops)
			tmp := ops[at].path
			synced := slices.Index(ops, fsOp{op: "syncfile", path: tmp})
			require.True(t, synced >= 0 && synced < at, "synced before it gets its name: %v", ops)
			require.Equal(t, []fsOp{{op: "remove", path: tmp}, {op: "syncdir", path: host.dir}}, ops[at+1:at+3])

			failing := newSeqHost(t, "api")
			gf := failing.open(t, reg, ExportWithFS(&recordingFS{failAfter: failing.path + target}))
			defer gf.Close()
			_, err := gf.Sequence("ids")
			require.ErrorIs(t, err, errInjected)
			require.Contains(t, err.Error(), "sync directory")
			testfs.RequireNoTemp(t, failing.dir)
		})
	}
}

// A clean restart carries the host's lease over: the last process records
// where the lease file stands, and the next claim goes on from there (no
// gap beyond the blocks the processes held). A crash drops the lease. A
// copy of the file made at the recorded position, restored after the next
// claim used it, is not carried over again.
func TestSequenceCleanRestartCarriesLeaseOver(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "ids", 1, registry.MaxSequence)
	host := newSeqHost(t, "web")
	opts := []SequenceOption{SequenceBlock(5), SequenceLeaseSize(100_000)}
	lease := filepath.Base(host.path) + ".seq.ids"
	g := host.open(t, reg)
	s := openSeq(t, g, "ids", opts...)
	issued := drawSeq(t, s, 12)
	early := t.TempDir()
	testfs.CopyFiles(t, host.dir, early, lease) // a copy made while in use
	_, _, earlyPos, _, err := ReadLeaseFile(host.path, "ids")
	require.NoError(t, err)
	issued = append(issued, drawSeq(t, s, 400)...)
	_, _, latePos, _, err := ReadLeaseFile(host.path, "ids")
	require.NoError(t, err)
	require.Greater(t, latePos, earlyPos, "the copy is older than the file")
	require.NoError(t, s.Close())
	require.NoError(t, g.Close())
	if t.Run("copy from before the clean close", func(t *testing.T) {
		// Restored before the next start: its position is not the recorded
		// one, so it is not carried over.
		dir := t.TempDir()
		testfs.CopyFiles(t, host.dir, dir, lease)
		testfs.CopyFiles(t, early, host.dir, lease)
		g := host.open(t, reg)
		s := openSeq(t, g, "ids", opts...)
		more := drawSeq(t, s, 20)
		requireUnique(t, append(append([]uint64(nil), issued...), more...), 1, registry.MaxSequence)
		require.NoError(t, s.Close())
		crash(t, g)
		testfs.CopyFiles(t, dir, host.dir, lease)
		issued = append(issued, more...)
	}) {
		// Put the record back as the clean close left it, for what follows.
		g := host.open(t, reg)
		s := openSeq(t, g, "ids", opts...)
		issued = append(issued, drawSeq(t, s, 3)...)
		require.NoError(t, s.Close())
		require.NoError(t, g.Close())
	}
	cur, _, pos, ok, err := ReadLeaseFile(host.path, "ids")
	require.NoError(t, err)
	require.True(t, ok)
	rec, err := reg.HostLease(context.Background(), "ids", "web")
	require.NoError(t, err)
	require.Equal(t, pos, rec.ClosedAt, "the last process recorded where the file stands")
	backup := t.TempDir()
	testfs.CopyFiles(t, host.dir, backup, lease)

	g = host.open(t, reg)
	s = openSeq(t, g, "ids", opts...)
	v, err := s.Next()
	require.NoError(t, err)
	require.Equal(t, pos, v, "the next claim goes on where the lease file stood")
	require.LessOrEqual(t, v, cur.Last)
	issued = append(issued, v)
	issued = append(issued, drawSeq(t, s, 30)...)
	crash(t, g) // the second claim dies: nothing recorded
	require.NoError(t, s.Close())

	testfs.CopyFiles(t, backup, host.dir, lease) // the copy made at the recorded position
	g = host.open(t, reg)
	defer g.Close()
	s = openSeq(t, g, "ids", opts...)
	defer s.Close()
	issued = append(issued, drawSeq(t, s, 50)...)
	requireUnique(t, issued, 1, registry.MaxSequence)
}

// A sequence used normally by two hosts gives the audit nothing to report.
func TestAuditSequencesCleanAfterNormalUse(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "clean", 10, 100_000)
	for i, name := range []string{"web_a", "web_b"} {
		h := newSeqHost(t, name)
		g := h.open(t, reg)
		s := openSeq(t, g, "clean", SequenceBlock(3), SequenceLeaseSize(50))
		drawSeq(t, s, 40+i*30)
		require.NoError(t, s.Close())
		require.NoError(t, g.Close())
	}
	clean, err := reg.SequenceStatus(context.Background(), "clean")
	require.NoError(t, err)
	require.Len(t, clean.Leases, 2)
	require.Empty(t, admin.AuditSequences([]registry.SequenceStatus{clean}), "a sequence used normally")

}

// TestSequenceLeaseSizeBounds: SequenceLeaseSize refuses a size whose
// growth (leases grow to 128 times it) passes 2^63-1, the largest lease a
// registry stores: the option refuses, so every registry behaves alike.
func TestSequenceLeaseSizeBounds(t *testing.T) {
	t.Parallel()
	require.LessOrEqual(t, MaxSequenceLease, registry.MaxSequence/128)
	require.Greater(t, (MaxSequenceLease+1)*128, registry.MaxSequence)
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "ids", 1, registry.MaxSequence)
	host := newSeqHost(t, "web")
	g := host.open(t, reg)
	defer g.Close()
	for _, tc := range []struct {
		n  uint64
		ok bool
	}{
		{0, false}, {1, true}, {MaxSequenceLease - 1, true}, {MaxSequenceLease, true}, {MaxSequenceLease + 1, false},
		{registry.MaxSequence - 1, false}, {registry.MaxSequence, false}, {registry.MaxSequence + 1, false}, {math.MaxUint64, false},
	} {
		s, err := g.Sequence("ids", SequenceLeaseSize(tc.n))
		if !tc.ok {
			require.ErrorIs(t, err, ErrInvalidOption, "SequenceLeaseSize(%d)", tc.n)
			continue
		}
		require.NoError(t, err, "SequenceLeaseSize(%d)", tc.n)
		require.NoError(t, s.Close())
	}
	s := openSeq(t, g, "ids", SequenceLeaseSize(MaxSequenceLease))
	defer s.Close()
	n, err := s.Next()
	require.NoError(t, err)
	require.Equal(t, uint64(1), n)
}

// A sequence opened while the registry cannot be reached, and of which
// the host has no lease file, is refused and nothing is made beside the
// counter: a misspelt name leaves no files behind.
func TestSequenceUnknownDuringOutageMakesNothing(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, 1_000_000)
	counter := filepath.Join(t.TempDir(), "c")
	g, err := Open(counter, "vm", WithRegistry(reg), WithRegistryTimeout(time.Second))
	require.NoError(t, err)
	defer g.Close()

	reg.SetDown(true)
	_, err = g.Sequence("ordres")
	require.ErrorIs(t, err, ErrRegistry)
	reg.SetDown(false)
	for _, suffix := range []string{".seq.ordres", ".seq.ordres.floor", ".seq.ordres.refill"} {
		_, serr := os.Lstat(counter + suffix)
		require.ErrorIs(t, serr, fs.ErrNotExist, "%s was made", suffix)
	}
	_, err = g.Sequence("ordres")
	require.ErrorIs(t, err, ErrNoSequence)
}

// openSeqLockedByAnother opens the sequence orders beside a counter
// whose files another user may read (mode 0644), takes a number, and
// has another user hold a flock on its lease file until release.
func openSeqLockedByAnother(t *testing.T) (g *Generator, s *Sequence, counter string, release func()) {
	t.Helper()
	counter = filepath.Join(lockDir(t), "c")
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, 1_000_000)
	g, err := Open(counter, "vm", WithRegistry(reg), WithFileMode(0o644), WithRegistryTimeout(time.Second))
	require.NoError(t, err)
	s, err = g.Sequence("orders")
	require.NoError(t, err)
	_, err = s.NextN(1)
	require.NoError(t, err)
	return g, s, counter, testfs.HoldFlockCancel(t, counter+".seq.orders")
}

// returnsWithin runs fn and fails the test if it has not returned after
// bound; release then lets it finish.
func returnsWithin(t *testing.T, bound time.Duration, release func(), what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(bound):
		release()
		<-done
		t.Fatalf("%s has not returned after %v", what, bound)
		return nil
	}
}

// A caller of NextNContext that left at its deadline while another user
// held the lease file's lock leaves work behind that waits for the lock;
// Sequence.Close and Generator.Close end that wait instead of waiting as
// long as the other user holds the lock.
func TestSequenceCloseWhileAnotherUserHoldsTheLeaseFile(t *testing.T) {
	t.Parallel()
	skipShort(t)
	for _, tc := range []struct {
		name  string
		close func(s *Sequence, g *Generator) error
	}{
		{"Sequence.Close", func(s *Sequence, g *Generator) error { return s.Close() }},
		{"Generator.Close", func(s *Sequence, g *Generator) error { return g.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, s, _, release := openSeqLockedByAnother(t)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			_, err := s.NextNContext(ctx, 1)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded)
			// The registry timeout (1 s) bounds what Close waits for.
			returnsWithin(t, 10*time.Second, release, tc.name, func() error { return tc.close(s, g) })
			release()
			s.Close()
			g.Close()
		})
	}
}

// afterHostLease is the in-memory registry whose HostLease, once it has
// answered, runs a hook (with the caller's context) before it returns.
type afterHostLease struct {
	*registrytest.Registry
	calls atomic.Int32
	hook  atomic.Pointer[func(call int32)]
}

func (r *afterHostLease) HostLease(ctx context.Context, seq, name string) (registry.SequenceLease, error) {
	l, err := r.Registry.HostLease(ctx, seq, name)
	if h := r.hook.Load(); h != nil {
		(*h)(r.calls.Add(1))
	}
	return l, err
}

// SequenceContext's checks of the lease file against the registry's
// record of the host's lease wait for the file's lock within the
// caller's context, after the registry answered too: when another user
// who may read the file holds its flock then, and the caller's context
// ends, the call returns instead of waiting as long as the other user
// likes. Both paths: a file of the host's current claim checked
// (dropUnrecorded), and one of the host's earlier claim carried over
// after a clean restart (adopt).
func TestSequenceOpenWaitsEndWithTheContext(t *testing.T) {
	t.Parallel()
	skipShort(t)
	requireRoot(t)
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "the current claim's file", true: "an earlier claim's file"}[restart], func(t *testing.T) {
			counter := filepath.Join(lockDir(t), "c")
			reg := &afterHostLease{Registry: registrytest.NewRegistry()}
			createSeq(t, reg, "orders", 1, 1_000_000)
			opts := []Option{WithRegistry(reg), WithFileMode(0o644), WithRegistryTimeout(time.Minute)}
			g, err := Open(counter, "vm", opts...)
			require.NoError(t, err)
			s, err := g.Sequence("orders")
			require.NoError(t, err)
			_, err = s.Next()
			require.NoError(t, err)
			require.NoError(t, s.Close())
			if restart {
				require.NoError(t, g.Close()) // a clean close: the next claim carries the lease over
				g, err = Open(counter, "vm", opts...)
				require.NoError(t, err)
			}
			defer g.Close()

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var release func()
			hook := func(call int32) {
				// The first call checks that the sequence exists; the
				// second is the check of the file: once it answered,
				// another user holds the file's flock and the caller
				// leaves.
				if call == 2 {
					release = testfs.HoldFlockCancel(t, counter+".seq.orders")
					cancel()
				}
			}
			reg.hook.Store(&hook)
			err = returnsWithin(t, 10*time.Second, func() { release() }, "SequenceContext", func() error {
				s, err := g.SequenceContext(ctx, "orders")
				if err == nil {
					s.Close()
				}
				return err
			})
			require.ErrorIs(t, err, context.Canceled)
			release() // before the Generator's Close, which waits for the lock too
		})
	}
}

// A Sequence's background work (its next block, the lease it takes for
// it) ends at Close, however long the registry would take: a registry
// that does not answer, each try waiting the registry timeout and tried
// again as a transient failure, held Close for about ten timeouts.
func TestSequenceCloseEndsItsBackgroundLease(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "ids", 1, 1_000_000)
	host := newSeqHost(t, "web")
	g := host.open(t, reg, WithRegistryTimeout(time.Hour), WithCloneWindow(0))
	defer g.Close()
	s := openSeq(t, g, "ids", SequenceLeaseSize(10), SequenceBlock(10))
	asked, answer := make(chan struct{}, 1), make(chan struct{})
	reg.SetHook(func(ctx context.Context, op, _ string) error {
		if op != "lease" {
			return nil
		}
		select {
		case asked <- struct{}{}:
		default:
		}
		select { // a registry that does not answer (until the test gives up)
		case <-ctx.Done():
		case <-answer:
		}
		return fmt.Errorf("%w: lease: timed out: %w", registry.ErrRegistry, context.DeadlineExceeded)
	})
	ctx, cancel := context.WithCancel(context.Background())
	next := make(chan error, 1)
	go func() { _, err := s.NextContext(ctx); next <- err }()
	<-asked // the block, and the lease it needs, are taken in the background
	cancel()
	require.ErrorIs(t, <-next, context.Canceled)
	err := returnsWithin(t, 10*time.Second, func() { close(answer) }, "Sequence.Close", s.Close)
	require.NoError(t, err)
}

// A Sequence refused for what is beside the counter changes nothing
// there: its files are checked before any is made (a directory where its
// refill lock goes; a counter's name so long that a file of the sequence
// could not be made).
func TestSequenceRefusedLeavesNothing(t *testing.T) {
	t.Parallel()
	t.Run("refill lock not a file", func(t *testing.T) {
		reg := registrytest.NewRegistry()
		createSeq(t, reg, "ids", 1, 1000)
		host := newSeqHost(t, "web")
		g := host.open(t, reg)
		defer g.Close()
		require.NoError(t, os.Mkdir(host.path+".seq.ids.refill", 0o700))
		before := testfs.Snapshot(t, host.dir)
		_, err := g.Sequence("ids")
		require.ErrorIs(t, err, ErrNotRegular)
		require.Contains(t, err.Error(), ".seq.ids.refill")
		testfs.RequireUnchanged(t, host.dir, before)
	})
	t.Run("names too long", func(t *testing.T) {
		reg := registrytest.NewRegistry()
		seq := strings.Repeat("s", 63)
		createSeq(t, reg, seq, 1, 1000)
		dir := t.TempDir()
		// The lease file's temporary name fits; the floor's does not.
		path := filepath.Join(dir, strings.Repeat("c", 171))
		g, err := Open(path, "web", WithRegistry(reg), WithSync(false), WithHostInfo(HostInfo{Hostname: "web.example", MachineID: "m-web"}))
		require.NoError(t, err)
		defer g.Close()
		before := testfs.Snapshot(t, dir)
		_, err = g.Sequence(seq)
		require.ErrorIs(t, err, syscall.ENAMETOOLONG)
		testfs.RequireUnchanged(t, dir, before)
	})
}

// A Sequence whose registry answered that the sequence exists, and whose
// check of the lease file against the registry then fails (here the
// caller's context ends as it is made), is refused: used unchecked, a
// lease file put back to an earlier lease while no Sequence of it was
// open, which the check drops, handed its numbers out again.
func TestSequenceOpenUncheckedFileRefused(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "ids", 1, 1_000_000)
	host := newSeqHost(t, "web")
	g := host.open(t, reg)
	defer g.Close()
	lease := host.path + ".seq.ids"
	var issued []uint64
	take := func(s *Sequence, n int) {
		for range n {
			first, err := s.NextN(5)
			require.NoError(t, err)
			for i := range uint64(5) {
				issued = append(issued, first+i)
			}
		}
	}
	s := openSeq(t, g, "ids", SequenceLeaseSize(10), SequenceBlock(5))
	take(s, 3)
	require.NoError(t, s.Close())
	lb, err := os.ReadFile(lease) // the lease file and its floor, copied now
	require.NoError(t, err)
	fb, err := os.ReadFile(lease + ".floor")
	require.NoError(t, err)
	s = openSeq(t, g, "ids", SequenceLeaseSize(10), SequenceBlock(5))
	take(s, 6)
	require.NoError(t, s.Close())
	writeInPlace(t, lease, lb) // put back, with no Sequence of it open
	writeInPlace(t, lease+".floor", fb)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	reg.SetHook(func(_ context.Context, op, _ string) error {
		if op == "host_lease" && calls.Add(1) == 2 {
			cancel() // the caller leaves as the file is checked
		}
		return nil
	})
	_, err = g.SequenceContext(ctx, "ids", SequenceLeaseSize(10), SequenceBlock(5))
	require.ErrorIs(t, err, context.Canceled)
	reg.SetHook(nil)

	s = openSeq(t, g, "ids", SequenceLeaseSize(10), SequenceBlock(5)) // checked: the copy's ranges dropped
	defer s.Close()
	take(s, 4)
	requireUnique(t, issued, 1, 1_000_000)
}

// lateHostLease answers the first HostLease (the check that the sequence
// exists) only as the caller's context ends: cancel ends it, or, if nil,
// the answer comes as the registry timeout ends.
type lateHostLease struct {
	*registrytest.Registry
	cancel func()
	n      atomic.Int32
}

func (r *lateHostLease) HostLease(ctx context.Context, seq, name string) (registry.SequenceLease, error) {
	l, err := r.Registry.HostLease(ctx, seq, name)
	if r.n.Add(1) == 1 {
		if r.cancel != nil {
			r.cancel()
		} else {
			<-ctx.Done()
		}
	}
	return l, err
}

// A Sequence whose caller's context, or the registry timeout, ends as the
// registry answers that the sequence exists is refused with nothing made
// beside the counter.
func TestSequenceContextEndedAtTheExistenceCheckMakesNothing(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"the caller's context", "the registry timeout"} {
		t.Run(mode, func(t *testing.T) {
			inner := registrytest.NewRegistry()
			reg := &lateHostLease{Registry: inner}
			createSeq(t, inner, "ids", 1, 1000)
			host := newSeqHost(t, "web")
			g := host.open(t, reg, WithRegistryTimeout(time.Second))
			defer g.Close()
			before := testfs.Snapshot(t, host.dir)
			ctx := context.Background()
			if mode == "the caller's context" {
				var cancel func()
				ctx, cancel = context.WithCancel(ctx)
				reg.cancel = cancel
			}
			_, err := g.SequenceContext(ctx, "ids")
			require.Error(t, err)
			require.Contains(t, err.Error(), "nothing was created")
			testfs.RequireUnchanged(t, host.dir, before)
		})
	}
}
