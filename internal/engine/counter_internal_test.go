package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/hoststate"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// ---------------------------------------------------------------------------
// Helpers shared by the counter, multi-process and example tests. Their
// names start with ct so that they do not collide with other test files.

const ctName = "web_1"

// unusedRegistry is a Registry for calls that must be refused before the
// registry is used: any method call panics.
type unusedRegistry struct{ registry.Registry }

// ctPath returns a fresh directory and a counter path in it (not created).
func ctPath(t *testing.T) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	return dir, filepath.Join(dir, "counter.u64")
}

// ctWrite writes a counter file holding v, as Snap! would have it.
func ctWrite(t *testing.T, path string, v uint64) {
	t.Helper()
	b := EncodeCounter(v)
	require.NoError(t, os.WriteFile(path, b[:], 0o600))
}

// ctValue reads the counter file directly and requires it to be 8 bytes.
func ctValue(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, b, CounterSize, "a counter file is always exactly 8 bytes")
	v, err := DecodeCounter(b)
	require.NoError(t, err)
	return v
}

// ctOpen opens a Generator and closes it at the end of the test.
func ctOpen(t *testing.T, path string, opts ...Option) *Generator {
	t.Helper()
	g, err := Open(path, ctName, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	return g
}

// ctDrawAll runs goroutines goroutines that each call next each times and
// returns the numbers per goroutine, in the order each goroutine got them.
// Errors are collected and reported after all goroutines ended.
func ctDrawAll(t *testing.T, goroutines, each int, next func() (uint64, error)) [][]uint64 {
	t.Helper()
	out := make([][]uint64, goroutines)
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nums := make([]uint64, 0, each)
			for range each {
				n, err := next()
				if err != nil {
					errs[i] = err
					break
				}
				nums = append(nums, n)
			}
			out[i] = nums
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return out
}

// ctRequireDistinct requires all numbers to be distinct and returns the
// largest.
func ctRequireDistinct(t *testing.T, lists ...[]uint64) (max uint64, count int) {
	t.Helper()
	seen := make(map[uint64]struct{})
	for _, l := range lists {
		for _, n := range l {
			require.NotZero(t, n, "number 0 is never issued")
			_, dup := seen[n]
			require.False(t, dup, "number %d issued twice", n)
			seen[n] = struct{}{}
			max = maxU(max, n)
		}
	}
	return max, len(seen)
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// ctRequireDense requires the numbers to be exactly 1..total.
func ctRequireDense(t *testing.T, total int, lists ...[]uint64) {
	t.Helper()
	seen := make([]bool, total+1)
	count := 0
	for _, l := range lists {
		for _, n := range l {
			require.True(t, n >= 1 && n <= uint64(total), "number %d outside 1..%d", n, total)
			require.False(t, seen[n], "number %d issued twice", n)
			seen[n] = true
			count++
		}
	}
	require.Equal(t, total, count, "not dense: %d numbers for 1..%d", count, total)
}

// ---------------------------------------------------------------------------
// Concurrency in one process.

func TestConcurrentUniqueID(t *testing.T) {
	t.Parallel()
	skipShort(t)
	const goroutines, each = 64, 2000
	const total = goroutines * each
	tests := []struct {
		name  string
		opts  []Option
		block uint64 // 0: strict mode, numbers dense
		// unordered: per-CPU runs, numbers need not increase per goroutine
		unordered bool
	}{
		{"strict sync", nil, 0, false},
		{"strict no sync", []Option{WithSync(false)}, 0, false},
		{"block 1000", []Option{WithBlock(1000)}, 1000, false},
		{"block 3 no sync", []Option{WithBlock(3), WithSync(false)}, 3, false},
		{"block 1000 cpu shards", []Option{WithBlock(1000), WithCPUShards(true)}, 1000, true},
		{"block 7 cpu shards no sync", []Option{WithBlock(7), WithCPUShards(true), WithSync(false)}, 7, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, path := ctPath(t)
			g := ctOpen(t, path, tt.opts...)
			lists := ctDrawAll(t, goroutines, each, func() (uint64, error) {
				s, err := g.UniqueID()
				if err != nil {
					return 0, err
				}
				id, err := ParseID(s)
				if err != nil {
					return 0, err
				}
				if id.Name != ctName {
					return 0, fmt.Errorf("id %q has the wrong name", s)
				}
				return id.Number, nil
			})
			for i, l := range lists {
				require.Len(t, l, each, "goroutine %d", i)
				if tt.unordered {
					continue // distinctness is checked across all lists below
				}
				require.True(t, slices.IsSorted(l), "goroutine %d got decreasing numbers", i)
				for j := 1; j < len(l); j++ {
					require.Less(t, l[j-1], l[j], "goroutine %d got %d twice", i, l[j])
				}
			}
			if tt.block == 0 {
				ctRequireDense(t, total, lists...)
				require.NoError(t, g.Close())
				assert.Equal(t, uint64(total), ctValue(t, path), "the file holds the last issued number")
				return
			}
			max, count := ctRequireDistinct(t, lists...)
			require.Equal(t, total, count)
			require.NoError(t, g.Close())
			v := ctValue(t, path)
			assert.GreaterOrEqual(t, v, max, "the file covers every number issued")
			assert.Zero(t, v%tt.block, "block mode reserves whole blocks")
		})
	}
}

// Several Generators of one process on one file (each with its own lock
// object and descriptor) never issue a number twice, and creating the
// file from all of them at once leaves one complete file.
func TestConcurrentOpenSameFile(t *testing.T) {
	t.Parallel()
	const gens, each = 8, 300
	dir, path := ctPath(t)
	gs := make([]*Generator, gens)
	errs := make([]error, gens)
	var wg sync.WaitGroup
	for i := range gens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var opts []Option
			if i%2 == 1 {
				opts = append(opts, WithBlock(17))
			}
			gs[i], errs[i] = Open(path, ctName, opts...)
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	testfs.RequireNoTemp(t, dir)

	lists := make([][]uint64, gens)
	for i, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				n, err := g.Next()
				if err != nil {
					errs[i] = err
					return
				}
				lists[i] = append(lists[i], n)
			}
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	max, count := ctRequireDistinct(t, lists...)
	assert.Equal(t, gens*each, count)
	for _, g := range gs {
		require.NoError(t, g.Close())
	}
	assert.GreaterOrEqual(t, ctValue(t, path), max)
}

// ---------------------------------------------------------------------------
// Snap! compatibility and the file format.

func TestSnapCounterCompatibility(t *testing.T) {
	t.Parallel()
	dir, path := ctPath(t)
	// Snap!'s counter.u64 on x86: 8 raw bytes, little-endian, last issued.
	require.NoError(t, os.WriteFile(path, []byte{41, 0, 0, 0, 0, 0, 0, 0}, 0o644))
	g := ctOpen(t, path)
	id, err := g.UniqueID()
	require.NoError(t, err)
	assert.Equal(t, ctName+"-42", id)
	require.NoError(t, g.Close())

	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, []byte{42, 0, 0, 0, 0, 0, 0, 0}, b, "updated in place, same format")
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o644), info.Mode().Perm(), "an existing file keeps its mode")
	testfs.RequireNoTemp(t, dir)
}

func TestNewCounterStartsAtOne(t *testing.T) {
	t.Parallel()
	_, path := ctPath(t)
	g := ctOpen(t, path)
	assert.Equal(t, uint64(0), ctValue(t, path), "Open creates the file with last issued 0")
	id, err := g.NextID()
	require.NoError(t, err)
	assert.Equal(t, ID{Name: ctName, Number: 1}, id)
	first, err := g.NextN(5)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), first, "NextN returns the first of 5 consecutive numbers")
	n, err := g.Next()
	require.NoError(t, err)
	assert.Equal(t, uint64(7), n)
	assert.Equal(t, uint64(7), ctValue(t, path))
	assert.Equal(t, ctName, g.Name())
	assert.Equal(t, path, g.Path())

	_, err = g.NextN(0)
	assert.ErrorIs(t, err, ErrInvalidOption)
	assert.Equal(t, uint64(7), ctValue(t, path), "NextN(0) reserves nothing")
}

func TestFileMode(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
		want fs.FileMode
	}{
		{"default 0600", nil, 0o600},
		{"0640", []Option{WithFileMode(0o640)}, 0o640},
		{"0644", []Option{WithFileMode(0o644)}, 0o644},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The mode is exact, whatever the umask.
			old := syscall.Umask(0o077)
			defer syscall.Umask(old)
			dir, path := ctPath(t)
			g, err := Open(path, ctName, tt.opts...)
			require.NoError(t, err)
			require.NoError(t, g.Close())
			info, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, tt.want, info.Mode())

			// Init creates with the same mode.
			p2 := filepath.Join(dir, "init.u64")
			_, err = Init(p2, 10, tt.opts...)
			require.NoError(t, err)
			info, err = os.Stat(p2)
			require.NoError(t, err)
			assert.Equal(t, tt.want, info.Mode())
		})
	}
	t.Run("existing file keeps its mode", func(t *testing.T) {
		_, path := ctPath(t)
		ctWrite(t, path, 3)
		require.NoError(t, os.Chmod(path, 0o660))
		g, err := Open(path, ctName, WithFileMode(0o600))
		require.NoError(t, err)
		require.NoError(t, g.Close())
		info, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, fs.FileMode(0o660), info.Mode())
	})
	t.Run("invalid mode", func(t *testing.T) {
		dir, path := ctPath(t)
		_, err := Open(path, ctName, WithFileMode(fs.ModeDir|0o700))
		assert.ErrorIs(t, err, ErrInvalidOption)
		testfs.RequireUnchanged(t, dir, map[string]testfs.Entry{})
	})
}

// ---------------------------------------------------------------------------
// Bad input: a clear error, and nothing on disk changes.

func TestOpenBadInput(t *testing.T) {
	t.Parallel()
	type testCase struct {
		name    string
		setup   func(t *testing.T, dir string) string // returns the counter path
		node    string
		opts    []Option
		wantErr []error
	}
	missing := func(t *testing.T, dir string) string { return filepath.Join(dir, "counter.u64") }
	existing := func(t *testing.T, dir string) string {
		p := filepath.Join(dir, "counter.u64")
		ctWrite(t, p, 41)
		return p
	}
	var tests []testCase
	for _, n := range invalidNames {
		tests = append(tests,
			testCase{name: "invalid name " + n.name + " no file", setup: missing, node: n.in, wantErr: []error{ErrInvalidName}},
			testCase{name: "invalid name " + n.name + " existing file", setup: existing, node: n.in, wantErr: []error{ErrInvalidName}},
		)
	}
	for _, size := range []int{0, 1, 7, 9, 16, 4096} {
		tests = append(tests, testCase{
			name: fmt.Sprintf("corrupt %d bytes", size),
			setup: func(t *testing.T, dir string) string {
				p := filepath.Join(dir, "counter.u64")
				require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte{0x2a}, size), 0o600))
				return p
			},
			wantErr: []error{ErrCorrupt},
		})
	}
	tests = append(tests, []testCase{
		{name: "missing parent directory", setup: func(t *testing.T, dir string) string {
			return filepath.Join(dir, "no", "such", "dir", "counter.u64")
		}, wantErr: []error{fs.ErrNotExist}},
		{name: "parent is a file", setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "file")
			require.NoError(t, os.WriteFile(p, []byte("x"), 0o600))
			return filepath.Join(p, "counter.u64")
		}, wantErr: []error{syscall.ENOTDIR}},
		{name: "directory at the path", setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "counter.u64")
			require.NoError(t, os.Mkdir(p, 0o700))
			return p
		}, wantErr: []error{ErrNotRegular}},
		{name: "fifo at the path", setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "counter.u64")
			require.NoError(t, syscall.Mkfifo(p, 0o600))
			return p
		}, wantErr: []error{ErrNotRegular}},
		{name: "planted symlink", setup: func(t *testing.T, dir string) string {
			target := filepath.Join(dir, "elsewhere.u64")
			ctWrite(t, target, 7)
			p := filepath.Join(dir, "counter.u64")
			require.NoError(t, os.Symlink(target, p))
			return p
		}, wantErr: []error{ErrSymlink}},
		{name: "planted symlink to a directory", setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "counter.u64")
			require.NoError(t, os.Symlink(dir, p))
			return p
		}, wantErr: []error{ErrSymlink}},
		{name: "dangling symlink", setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "counter.u64")
			require.NoError(t, os.Symlink(filepath.Join(dir, "target.u64"), p))
			return p
		}, wantErr: []error{ErrSymlink}},
		{name: "dangling symlink followed", setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "counter.u64")
			require.NoError(t, os.Symlink(filepath.Join(dir, "target.u64"), p))
			return p
		}, opts: []Option{WithFollowSymlinks(true)}, wantErr: []error{fs.ErrNotExist}},
		{name: "corrupt behind a followed symlink", setup: func(t *testing.T, dir string) string {
			target := filepath.Join(dir, "target.u64")
			require.NoError(t, os.WriteFile(target, []byte{1, 2, 3}, 0o600))
			p := filepath.Join(dir, "counter.u64")
			require.NoError(t, os.Symlink(target, p))
			return p
		}, opts: []Option{WithFollowSymlinks(true)}, wantErr: []error{ErrCorrupt}},
		{name: "empty path", setup: func(t *testing.T, dir string) string { return "" }},
		{name: "WithBlock(0)", setup: missing, opts: []Option{WithBlock(0)}, wantErr: []error{ErrInvalidOption}},
		{name: "WithBlock(0) existing", setup: existing, opts: []Option{WithBlock(0)}, wantErr: []error{ErrInvalidOption}},
		{name: "WithBlock(MaxBlock+1)", setup: missing, opts: []Option{WithBlock(MaxBlock + 1)}, wantErr: []error{ErrInvalidOption}},
		{name: "WithReserveStep(1)", setup: missing, opts: []Option{WithRegistry(unusedRegistry{}), WithReserveStep(1)}, wantErr: []error{ErrInvalidOption}},
		{name: "WithReserveStep(MaxReserveStep+1)", setup: missing,
			opts: []Option{WithRegistry(unusedRegistry{}), WithReserveStep(MaxReserveStep + 1)}, wantErr: []error{ErrInvalidOption}},
		{name: "WithLogger(nil)", setup: missing, opts: []Option{WithLogger(nil)}, wantErr: []error{ErrInvalidOption}},
		{name: "WithFileMode(setuid)", setup: missing, opts: []Option{WithFileMode(fs.ModeSetuid | 0o600)}, wantErr: []error{ErrInvalidOption}},
		{name: "clone window below twice the heartbeat plus the timeout", setup: missing,
			opts:    []Option{WithRegistry(unusedRegistry{}), WithCloneWindow(time.Minute), WithHeartbeat(25 * time.Second), WithRegistryTimeout(11 * time.Second)},
			wantErr: []error{ErrInvalidOption}},
		{name: "default clone window with a long heartbeat", setup: existing,
			opts: []Option{WithRegistry(unusedRegistry{}), WithHeartbeat(3 * time.Minute)}, wantErr: []error{ErrInvalidOption}},
		{name: "clone window shorter than the registry timeout", setup: existing,
			opts: []Option{WithRegistry(unusedRegistry{}), WithCloneWindow(10 * time.Second), WithHeartbeat(time.Second)}, wantErr: []error{ErrInvalidOption}},
		{name: "huge heartbeat", setup: missing,
			opts: []Option{WithRegistry(unusedRegistry{}), WithHeartbeat(time.Duration(math.MaxInt64))}, wantErr: []error{ErrInvalidOption}},
		{name: "WithHeartbeat(0)", setup: missing, opts: []Option{WithHeartbeat(0)}, wantErr: []error{ErrInvalidOption}},
		{name: "WithCloneWindow(-1)", setup: missing, opts: []Option{WithCloneWindow(-1)}, wantErr: []error{ErrInvalidOption}},
	}...)

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := tt.setup(t, dir)
			before := testfs.Snapshot(t, dir)
			node := tt.node
			if node == "" && !strings.HasPrefix(tt.name, "invalid name") {
				node = ctName
			}
			g, err := Open(path, node, tt.opts...)
			require.Error(t, err)
			assert.Nil(t, g)
			for _, want := range tt.wantErr {
				assert.ErrorIs(t, err, want)
			}
			if path != "" && len(tt.wantErr) > 0 && tt.wantErr[0] != ErrInvalidName && tt.wantErr[0] != ErrInvalidOption {
				var fe *FileError
				require.ErrorAs(t, err, &fe, "file errors are *FileError")
				assert.Contains(t, err.Error(), path, "the error names the path")
			}
			if len(tt.wantErr) > 0 && tt.wantErr[0] == ErrInvalidName {
				assert.Contains(t, err.Error(), NameRule)
			}
			testfs.RequireUnchanged(t, dir, before)

			// The read-only entry points agree and change nothing either.
			if len(tt.wantErr) > 0 && tt.wantErr[0] != ErrInvalidName && tt.wantErr[0] != ErrInvalidOption {
				_, rerr := ReadCounter(path, tt.opts...)
				assert.Error(t, rerr)
				testfs.RequireUnchanged(t, dir, before)
			}
		})
	}
}

func TestSymlinkFollowedWhenAsked(t *testing.T) {
	t.Parallel()
	dir, path := ctPath(t)
	target := filepath.Join(dir, "real.u64")
	ctWrite(t, target, 7)
	require.NoError(t, os.Symlink("real.u64", path))

	g, err := Open(path, ctName, WithFollowSymlinks(true))
	require.NoError(t, err)
	id, err := g.UniqueID()
	require.NoError(t, err)
	assert.Equal(t, ctName+"-8", id)
	require.NoError(t, g.Close())
	assert.Equal(t, uint64(8), ctValue(t, target), "the target is updated")
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&fs.ModeSymlink, "the link is left as it is")

	v, err := ReadCounter(path, WithFollowSymlinks(true))
	require.NoError(t, err)
	assert.Equal(t, uint64(8), v)
	_, err = ReadCounter(path)
	assert.ErrorIs(t, err, ErrSymlink)
}

func TestExhaustion(t *testing.T) {
	t.Parallel()
	t.Run("at 2^64-1 Open succeeds and Next fails", func(t *testing.T) {
		for _, opts := range [][]Option{nil, {WithBlock(10)}, {WithSync(false)}} {
			dir, path := ctPath(t)
			ctWrite(t, path, math.MaxUint64)
			before := testfs.Snapshot(t, dir)
			// Three unrelated counters under one name: each its own host.
			g := ctOpen(t, path, append(slices.Clip(opts), WithBindingDir(t.TempDir()))...)
			n, err := g.Next()
			assert.ErrorIs(t, err, ErrExhausted)
			assert.Zero(t, n)
			id, err := g.UniqueID()
			assert.ErrorIs(t, err, ErrExhausted)
			assert.Empty(t, id)
			_, err = g.NextN(1)
			assert.ErrorIs(t, err, ErrExhausted)
			require.NoError(t, g.Close())
			testfs.RequireUnchanged(t, dir, before)
		}
	})
	t.Run("at 2^64-2 exactly one more", func(t *testing.T) {
		_, path := ctPath(t)
		ctWrite(t, path, math.MaxUint64-1)
		g := ctOpen(t, path)
		n, err := g.Next()
		require.NoError(t, err)
		assert.Equal(t, uint64(math.MaxUint64), n)
		id, err := g.UniqueID()
		assert.ErrorIs(t, err, ErrExhausted)
		assert.Empty(t, id)
		_, err = g.Next()
		assert.ErrorIs(t, err, ErrExhausted)
		assert.Equal(t, uint64(math.MaxUint64), ctValue(t, path), "never wraps")
	})
	t.Run("NextN beyond the end reserves nothing", func(t *testing.T) {
		_, path := ctPath(t)
		ctWrite(t, path, math.MaxUint64-5)
		g := ctOpen(t, path)
		_, err := g.NextN(6)
		assert.ErrorIs(t, err, ErrExhausted)
		assert.Equal(t, uint64(math.MaxUint64-5), ctValue(t, path))
		first, err := g.NextN(5)
		require.NoError(t, err)
		assert.Equal(t, uint64(math.MaxUint64-4), first)
		assert.Equal(t, uint64(math.MaxUint64), ctValue(t, path))
	})
	t.Run("block mode near the end", func(t *testing.T) {
		_, path := ctPath(t)
		ctWrite(t, path, math.MaxUint64-3)
		g := ctOpen(t, path, WithBlock(3))
		var got []uint64
		for range 3 {
			n, err := g.Next()
			require.NoError(t, err)
			got = append(got, n)
		}
		assert.Equal(t, []uint64{math.MaxUint64 - 2, math.MaxUint64 - 1, math.MaxUint64}, got)
		_, err := g.Next()
		assert.ErrorIs(t, err, ErrExhausted, "the last block ends at 2^64-1 and does not wrap")
		assert.Equal(t, uint64(math.MaxUint64), ctValue(t, path))
	})
}

// ---------------------------------------------------------------------------
// Permissions. Root ignores permission bits, so as root each case runs in a
// child process (a copy of this test binary) as uid/gid 65534.

const ctEnvAsNobody = "SNAPID_TEST_AS_NOBODY"

// ctNobodyBinary copies the test binary into a directory everybody can
// reach and returns the copy and a TMPDIR for the child.
func ctNobodyBinary(t *testing.T) (bin, tmp string) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "snapid-nobody-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	bin = filepath.Join(dir, "snapid.test")
	src, err := os.Open(self)
	require.NoError(t, err)
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(dst, src)
	require.NoError(t, err)
	require.NoError(t, dst.Close())
	tmp = filepath.Join(dir, "tmp")
	require.NoError(t, os.Mkdir(tmp, 0o755))
	require.NoError(t, os.Chmod(tmp, os.ModeSticky|0o777))
	return bin, tmp
}

// ctChildEnv is the environment for a child copy of the test binary. The
// race detector's default one-second sleep at exit is turned off, so that
// children of a -race test binary start and end quickly.
func ctChildEnv() []string {
	env := os.Environ()
	gorace := "atexit_sleep_ms=0"
	for i, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GORACE="); ok {
			if v != "" {
				gorace = v + " " + gorace
			}
			env = slices.Delete(env, i, i+1)
			break
		}
	}
	return append(env, "GORACE="+gorace)
}

// ctRunPattern is a -test.run pattern matching exactly the test name.
func ctRunPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// ctRunAsNobody runs the current subtest in the child and requires it to
// pass there.
func ctRunAsNobody(t *testing.T, bin, tmp string) {
	t.Helper()
	cmd := exec.Command(bin, "-test.run="+ctRunPattern(t.Name()), "-test.v", "-test.count=1", "-test.timeout=60s")
	cmd.Dir = tmp
	cmd.Env = append(ctChildEnv(), "TMPDIR="+tmp, "HOME="+tmp, ctEnvAsNobody+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child as nobody failed:\n%s", out)
	require.Contains(t, string(out), "--- PASS: "+t.Name(), "the child did not run the case:\n%s", out)
	require.NotContains(t, string(out), "--- SKIP", "the child skipped the case:\n%s", out)
}

func TestPermissionDenied(t *testing.T) {
	t.Parallel()
	if os.Getenv(ctEnvAsNobody) != "" {
		require.NotZero(t, os.Geteuid(), "the child must not run as root")
	}
	var bin, tmp string
	if os.Geteuid() == 0 {
		bin, tmp = ctNobodyBinary(t)
	}
	tests := []struct {
		name string
		run  func(t *testing.T, dir string)
	}{
		{"unwritable existing file", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "counter.u64")
			ctWrite(t, p, 41)
			require.NoError(t, os.Chmod(p, 0o400))
			ctRequireOpenFails(t, dir, p, fs.ErrPermission)
		}},
		{"unreadable existing file", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "counter.u64")
			ctWrite(t, p, 41)
			require.NoError(t, os.Chmod(p, 0o200))
			ctRequireOpenFails(t, dir, p, fs.ErrPermission)
			_, err := ReadCounter(p)
			assert.ErrorIs(t, err, fs.ErrPermission)
		}},
		{"read-only directory", func(t *testing.T, dir string) {
			sub := filepath.Join(dir, "ro")
			require.NoError(t, os.Mkdir(sub, 0o555))
			t.Cleanup(func() { os.Chmod(sub, 0o755) })
			p := filepath.Join(sub, "counter.u64")
			ctRequireOpenFails(t, dir, p, fs.ErrPermission)
			_, err := Init(p, 5)
			assert.ErrorIs(t, err, fs.ErrPermission)
			testfs.RequireNoTemp(t, sub)
			ents, err := os.ReadDir(sub)
			require.NoError(t, err)
			assert.Empty(t, ents, "nothing created")
		}},
		{"unsearchable directory", func(t *testing.T, dir string) {
			sub := filepath.Join(dir, "closed")
			require.NoError(t, os.Mkdir(sub, 0o700))
			p := filepath.Join(sub, "counter.u64")
			ctWrite(t, p, 41)
			require.NoError(t, os.Chmod(sub, 0o000))
			t.Cleanup(func() { os.Chmod(sub, 0o755) })
			ctRequireOpenFails(t, dir, p, fs.ErrPermission)
			require.NoError(t, os.Chmod(sub, 0o755))
			assert.Equal(t, uint64(41), ctValue(t, p))
		}},
		{"repair of an unwritable file", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "counter.u64")
			require.NoError(t, os.WriteFile(p, []byte{1, 2, 3}, 0o400))
			before := testfs.Snapshot(t, dir)
			_, err := Repair(p, 100)
			assert.ErrorIs(t, err, fs.ErrPermission)
			testfs.RequireUnchanged(t, dir, before)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if os.Geteuid() == 0 {
				ctRunAsNobody(t, bin, tmp)
				return
			}
			tt.run(t, t.TempDir())
		})
	}
}

// ctRequireOpenFails requires Open to fail with want and to leave dir as
// it was.
func ctRequireOpenFails(t *testing.T, dir, path string, want error) {
	t.Helper()
	before := testfs.Snapshot(t, dir)
	g, err := Open(path, ctName)
	require.ErrorIs(t, err, want)
	assert.Nil(t, g)
	assert.Contains(t, err.Error(), path)
	testfs.RequireUnchanged(t, dir, before)
}

// ---------------------------------------------------------------------------
// Fault injection through withIO.

var errInjected = errors.New("injected I/O error")

type ctWriteFault struct {
	ok  bool  // no fault: the real write
	n   int   // bytes really written before the fault
	err error // returned error (nil: a short write)
}

// ctFaultIO wraps the real I/O. Queued faults are consumed by the next
// WriteAt or Sync calls; it records the last value written and the value
// covered by the last successful Sync.
type ctFaultIO struct {
	mu          sync.Mutex
	writeFaults []ctWriteFault
	syncFaults  []error
	gate        chan struct{} // if set, the next WriteAt announces itself on entered and waits for gate
	entered     chan struct{}
	written     uint64
	writes      int
	syncs       int

	durable atomic.Uint64
}

func (x *ctFaultIO) failWrites(f ...ctWriteFault) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.writeFaults = append(x.writeFaults, f...)
}

func (x *ctFaultIO) failSyncs(errs ...error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.syncFaults = append(x.syncFaults, errs...)
}

// hold makes the next WriteAt wait; it returns a channel closed when that
// write has started and a function that lets it go on.
func (x *ctFaultIO) hold() (entered <-chan struct{}, release func()) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.gate = make(chan struct{})
	x.entered = make(chan struct{})
	gate := x.gate
	return x.entered, func() { close(gate) }
}

func (x *ctFaultIO) ReadAt(f *os.File, b []byte, off int64) (int, error) { return f.ReadAt(b, off) }

func (x *ctFaultIO) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	x.mu.Lock()
	var fault *ctWriteFault
	if len(x.writeFaults) > 0 {
		fault = &x.writeFaults[0]
		x.writeFaults = x.writeFaults[1:]
	}
	gate, entered := x.gate, x.entered
	x.gate, x.entered = nil, nil
	x.writes++
	x.mu.Unlock()
	if gate != nil {
		close(entered)
		<-gate
	}
	if fault != nil && !fault.ok {
		n := 0
		if fault.n > 0 {
			var err error
			n, err = f.WriteAt(b[:fault.n], off)
			if err != nil {
				return n, err
			}
		}
		return n, fault.err
	}
	n, err := f.WriteAt(b, off)
	if err == nil && off == 0 && len(b) == CounterSize {
		x.mu.Lock()
		x.written, _ = DecodeCounter(b)
		x.mu.Unlock()
	}
	return n, err
}

func (x *ctFaultIO) Sync(f *os.File) error {
	x.mu.Lock()
	var fault error
	if len(x.syncFaults) > 0 {
		fault = x.syncFaults[0]
		x.syncFaults = x.syncFaults[1:]
	}
	covered := x.written
	x.syncs++
	x.mu.Unlock()
	if fault != nil {
		return fault
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return err
	}
	// Widen the window in which a number handed out before its sync
	// would be seen above the durable value.
	for range 20 {
		runtime.Gosched()
	}
	for {
		d := x.durable.Load()
		if covered <= d || x.durable.CompareAndSwap(d, covered) {
			return nil
		}
	}
}

func (x *ctFaultIO) counts() (writes, syncs int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.writes, x.syncs
}

func TestFaultInjectionStrict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		arm      func(x *ctFaultIO)
		wantErrs []error // one failing call per entry
	}{
		{"write error", func(x *ctFaultIO) { x.failWrites(ctWriteFault{n: 0, err: errInjected}) }, []error{errInjected}},
		{"write error after 3 bytes", func(x *ctFaultIO) { x.failWrites(ctWriteFault{n: 3, err: errInjected}) }, []error{errInjected}},
		{"short write of 4 bytes", func(x *ctFaultIO) { x.failWrites(ctWriteFault{n: 4}) }, []error{io.ErrShortWrite}},
		{"short write of 0 bytes", func(x *ctFaultIO) { x.failWrites(ctWriteFault{n: 0}) }, []error{io.ErrShortWrite}},
		{"sync error", func(x *ctFaultIO) { x.failSyncs(syscall.EIO) }, []error{syscall.EIO}},
		{"write error then sync error", func(x *ctFaultIO) {
			x.failWrites(ctWriteFault{err: errInjected})
			x.failSyncs(syscall.EIO)
		}, []error{errInjected, syscall.EIO}},
		{"three sync errors", func(x *ctFaultIO) { x.failSyncs(syscall.EIO, syscall.ENOSPC, syscall.EIO) },
			[]error{syscall.EIO, syscall.ENOSPC, syscall.EIO}},
	}
	for _, tt := range tests {
		for _, viaID := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/UniqueID=%v", tt.name, viaID), func(t *testing.T) {
				dir, path := ctPath(t)
				ctWrite(t, path, 41)
				x := &ctFaultIO{}
				g := ctOpen(t, path, withIO(x))
				issued := map[uint64]bool{}
				n, err := g.Next()
				require.NoError(t, err)
				require.Equal(t, uint64(42), n)
				issued[n] = true

				tt.arm(x)
				for i, want := range tt.wantErrs {
					var err error
					if viaID {
						var id string
						id, err = g.UniqueID()
						assert.Empty(t, id, "no id with an error")
					} else {
						var n uint64
						n, err = g.Next()
						assert.Zero(t, n, "no number with an error")
					}
					require.ErrorIs(t, err, want, "failing call %d", i)
					var fe *FileError
					require.ErrorAs(t, err, &fe)
					assert.Equal(t, path, fe.Path)
					assert.GreaterOrEqual(t, ctValue(t, path), uint64(42), "the counter went backwards")
				}
				testfs.RequireNoTemp(t, dir)

				for range 5 {
					n, err := g.Next()
					require.NoError(t, err)
					require.False(t, issued[n], "number %d issued twice", n)
					require.Greater(t, n, uint64(42))
					issued[n] = true
					assert.GreaterOrEqual(t, ctValue(t, path), n)
				}
			})
		}
	}
}

// A short or failed write that changed some bytes of the counter leaves a
// torn value. When the new value carries into a higher byte the torn value
// is LOWER than numbers already issued, and the next call issues them
// again. This test shows it (see the report).
func TestFaultTornWriteNeverLowersCounter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		start uint64 // last issued before the failing write
		fault ctWriteFault
	}{
		{"short write of 4 bytes across 2^32", 0xFFFFFFFF, ctWriteFault{n: 4}},
		{"write error after 1 byte across 2^8", 0xFF, ctWriteFault{n: 1, err: errInjected}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, path := ctPath(t)
			ctWrite(t, path, tt.start-1)
			x := &ctFaultIO{}
			g := ctOpen(t, path, withIO(x))
			n, err := g.Next()
			require.NoError(t, err)
			require.Equal(t, tt.start, n)

			x.failWrites(tt.fault)
			_, err = g.Next()
			require.Error(t, err)

			assert.GreaterOrEqual(t, ctValue(t, path), tt.start,
				"after a torn write the counter file holds a value below the last issued number %d", tt.start)
			n, err = g.Next()
			require.NoError(t, err)
			assert.Greater(t, n, tt.start, "number %d was issued before", n)
		})
	}
}

// A failed sync fails the whole group: no member gets a number, and the
// numbers the group would have had are never issued.
func TestFaultGroupCommitFailsWholeGroup(t *testing.T) {
	t.Parallel()
	const members = 20
	_, path := ctPath(t)
	ctWrite(t, path, 100)
	x := &ctFaultIO{}
	g := ctOpen(t, path, withIO(x))

	// The first caller's write is held, so that the next callers form
	// one group behind it.
	// The leader's sync succeeds (a nil entry is the real sync), the
	// group's fails.
	r := ctHeldGroup(g, x, members, func() { x.failSyncs(nil, syscall.EIO) })
	leaderN, leaderErr, nums, errs := r.leaderN, r.leaderErr, r.nums, r.errs

	require.NoError(t, leaderErr)
	assert.Equal(t, uint64(101), leaderN)
	for i := range members {
		assert.ErrorIs(t, errs[i], syscall.EIO, "member %d", i)
		assert.Zero(t, nums[i], "member %d got a number from a failed group", i)
	}
	_, syncs := x.counts()
	assert.Equal(t, 2, syncs, "one sync for the leader, one for the whole group")

	// The group's write reached the file before the sync failed; the
	// numbers it covered are skipped, never reissued.
	v := ctValue(t, path)
	assert.GreaterOrEqual(t, v, uint64(101))
	n, err := g.Next()
	require.NoError(t, err)
	assert.Equal(t, v+1, n)
}

// ctWaitGroupSize waits until the open group-commit group has k members'
// worth of numbers (they are queued behind a flush in progress).
func ctWaitGroupSize(g *Generator, k uint64) {
	for {
		if _, got := g.gc.Waiting(); got >= k {
			return
		}
		runtime.Gosched()
	}
}

// Near exhaustion, a group that asks for more numbers than are left fails
// as a whole, although the first member's number was available.
func TestExhaustionGroupOfTwoAtLastNumber(t *testing.T) {
	t.Parallel()
	_, path := ctPath(t)
	ctWrite(t, path, math.MaxUint64-2)
	x := &ctFaultIO{}
	g := ctOpen(t, path, withIO(x))
	r := ctHeldGroup(g, x, 2, nil)
	leaderN, leaderErr, nums, errs := r.leaderN, r.leaderErr, r.nums, r.errs
	require.NoError(t, leaderErr)
	require.Equal(t, uint64(math.MaxUint64-1), leaderN)
	ok := 0
	for i := range 2 {
		if errs[i] == nil {
			ok++
			assert.Equal(t, uint64(math.MaxUint64), nums[i])
		} else {
			assert.ErrorIs(t, errs[i], ErrExhausted)
		}
	}
	assert.Equal(t, 1, ok, "2^64-1 was still available to one of the two callers: %v", errs)
}

func TestFaultInjectionBlockMode(t *testing.T) {
	t.Parallel()
	t.Run("background reservation fails once", func(t *testing.T) {
		_, path := ctPath(t)
		x := &ctFaultIO{}
		g := ctOpen(t, path, withIO(x), WithBlock(10))
		var got []uint64
		n, err := g.Next() // reserves 1..10
		require.NoError(t, err)
		got = append(got, n)
		x.failWrites(ctWriteFault{err: errInjected}) // the prefetch at half fails
		for range 40 {
			n, err := g.Next()
			require.NoError(t, err, "a reservation that failed in the background is retried")
			got = append(got, n)
		}
		_, count := ctRequireDistinct(t, got)
		assert.Equal(t, 41, count)
		assert.True(t, slices.IsSorted(got))
		assert.GreaterOrEqual(t, ctValue(t, path), slices.Max(got))
	})
	for _, fault := range []struct {
		name string
		arm  func(x *ctFaultIO)
	}{
		{"write errors", func(x *ctFaultIO) {
			for range 100 {
				x.failWrites(ctWriteFault{err: errInjected})
			}
		}},
		{"sync errors", func(x *ctFaultIO) {
			for range 100 {
				x.failSyncs(syscall.EIO)
			}
		}},
	} {
		t.Run("persistent "+fault.name, func(t *testing.T) {
			_, path := ctPath(t)
			x := &ctFaultIO{}
			g := ctOpen(t, path, withIO(x), WithBlock(10))
			issued := map[uint64]bool{}
			take := func() (uint64, error) {
				n, err := g.Next()
				if err == nil {
					if issued[n] {
						return n, fmt.Errorf("number %d issued twice", n)
					}
					issued[n] = true
				}
				return n, err
			}
			for range 3 {
				_, err := take()
				require.NoError(t, err)
			}
			fault.arm(x)
			errorsSeen := 0
			for range 30 {
				n, err := take()
				if err != nil {
					require.NotContains(t, err.Error(), "issued twice")
					assert.Zero(t, n)
					errorsSeen++
				}
			}
			assert.Positive(t, errorsSeen, "a block that cannot be reserved is an error")
			x.mu.Lock()
			x.writeFaults, x.syncFaults = nil, nil
			x.mu.Unlock()
			for range 25 {
				_, err := take()
				require.NoError(t, err)
			}
			var max uint64
			for n := range issued {
				max = maxU(max, n)
			}
			assert.GreaterOrEqual(t, ctValue(t, path), max)
		})
	}
	t.Run("concurrent callers during failures", func(t *testing.T) {
		_, path := ctPath(t)
		x := &ctFaultIO{}
		g := ctOpen(t, path, withIO(x), WithBlock(5))
		for range 200 {
			// Every other write fails, with an error or as a short write.
			x.failWrites(ctWriteFault{err: errInjected}, ctWriteFault{ok: true}, ctWriteFault{n: 2}, ctWriteFault{ok: true})
		}
		lists := make([][]uint64, 8)
		var wg sync.WaitGroup
		for i := range lists {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 200 {
					if n, err := g.Next(); err == nil {
						lists[i] = append(lists[i], n)
					}
				}
			}()
		}
		wg.Wait()
		max, count := ctRequireDistinct(t, lists...)
		assert.Positive(t, count)
		assert.GreaterOrEqual(t, ctValue(t, path), max)
	})
}

// ---------------------------------------------------------------------------
// Power loss: no number is handed out before the sync covering it.

func TestNoNumberBeforeSync(t *testing.T) {
	t.Parallel()
	skipShort(t)
	tests := []struct {
		name string
		opts []Option
		nth  int // every nth call is NextN(3) in strict mode
	}{
		{"strict", nil, 0},
		{"strict with NextN", nil, 5},
		{"block 16", []Option{WithBlock(16)}, 0},
		{"block 1", []Option{WithBlock(1)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, path := ctPath(t)
			x := &ctFaultIO{}
			g := ctOpen(t, path, append([]Option{withIO(x)}, tt.opts...)...)
			var violations atomic.Int64
			var firstViolation atomic.Value
			lists := ctDrawAll(t, 16, 400, func() (uint64, error) {
				k := uint64(1)
				var first uint64
				var err error
				if tt.nth > 0 && fastrand()%uint64(tt.nth) == 0 {
					k = 3
					first, err = g.NextN(k)
				} else {
					first, err = g.Next()
				}
				if err != nil {
					return 0, err
				}
				if d := x.durable.Load(); first+k-1 > d {
					violations.Add(1)
					firstViolation.CompareAndSwap(nil, fmt.Sprintf("number %d returned while %d was durable", first+k-1, d))
				}
				return first, nil
			})
			assert.Zero(t, violations.Load(), "numbers handed out before their sync: %v", firstViolation.Load())
			_, count := ctRequireDistinct(t, lists...)
			assert.Equal(t, 16*400, count)
			_, syncs := x.counts()
			assert.Positive(t, syncs)
		})
	}
	t.Run("sync off never syncs", func(t *testing.T) {
		_, path := ctPath(t)
		x := &ctFaultIO{}
		g := ctOpen(t, path, withIO(x), WithSync(false))
		for range 10 {
			_, err := g.Next()
			require.NoError(t, err)
		}
		writes, syncs := x.counts()
		assert.Equal(t, 10, writes)
		assert.Zero(t, syncs)
	})
}

var fastrandState atomic.Uint64

// fastrand is a tiny shared pseudo-random source for choosing calls.
func fastrand() uint64 {
	v := fastrandState.Add(0x9e3779b97f4a7c15)
	v ^= v >> 30
	v *= 0xbf58476d1ce4e5b9
	v ^= v >> 27
	return v
}

// ---------------------------------------------------------------------------
// Close.

func TestCloseThenCalls(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]Option{nil, {WithBlock(10)}} {
		t.Run(fmt.Sprintf("block=%v", len(opts) > 0), func(t *testing.T) {
			_, path := ctPath(t)
			g, err := Open(path, ctName, opts...)
			require.NoError(t, err)
			_, err = g.Next()
			require.NoError(t, err)
			require.NoError(t, g.Close())
			require.NoError(t, g.Close(), "Close is idempotent")
			dir := filepath.Dir(path)
			before := testfs.Snapshot(t, dir)

			_, err = g.Next()
			assert.ErrorIs(t, err, ErrClosed)
			id, err := g.UniqueID()
			assert.ErrorIs(t, err, ErrClosed)
			assert.Empty(t, id)
			_, err = g.NextID()
			assert.ErrorIs(t, err, ErrClosed)
			_, err = g.NextN(2)
			assert.ErrorIs(t, err, ErrClosed)
			testfs.RequireUnchanged(t, dir, before)
			assert.GreaterOrEqual(t, ctValue(t, path), uint64(1))
		})
	}
}

func TestCloseWhileDrawing(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]Option{nil, {WithSync(false)}, {WithBlock(7)}} {
		t.Run(fmt.Sprintf("%d options", len(opts)), func(t *testing.T) {
			_, path := ctPath(t)
			g, err := Open(path, ctName, opts...)
			require.NoError(t, err)
			const goroutines = 16
			var drawn atomic.Int64
			enough := make(chan struct{})
			var once sync.Once
			lists := make([][]uint64, goroutines)
			errs := make([]error, goroutines)
			var wg sync.WaitGroup
			for i := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						n, err := g.Next()
						if err != nil {
							errs[i] = err
							return
						}
						lists[i] = append(lists[i], n)
						if drawn.Add(1) == 500 {
							once.Do(func() { close(enough) })
						}
					}
				}()
			}
			<-enough
			closeErrs := make(chan error, 2)
			for range 2 { // two concurrent Closes
				go func() { closeErrs <- g.Close() }()
			}
			require.NoError(t, <-closeErrs)
			require.NoError(t, <-closeErrs)
			wg.Wait()
			for i, err := range errs {
				assert.ErrorIs(t, err, ErrClosed, "goroutine %d", i)
			}
			max, count := ctRequireDistinct(t, lists...)
			assert.GreaterOrEqual(t, count, 500)
			assert.GreaterOrEqual(t, ctValue(t, path), max)
		})
	}
}

// ---------------------------------------------------------------------------
// The counter file removed or replaced under a running Generator.

func TestReplacedCounter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		replace func(t *testing.T, dir, path string)
		gone    bool
	}{
		{"removed", func(t *testing.T, dir, path string) {
			require.NoError(t, os.Remove(path))
		}, true},
		{"replaced by rename", func(t *testing.T, dir, path string) {
			tmp := filepath.Join(dir, "new.u64")
			ctWrite(t, tmp, 1000)
			require.NoError(t, os.Rename(tmp, path))
		}, false},
		{"replaced by rename with the same value", func(t *testing.T, dir, path string) {
			tmp := filepath.Join(dir, "new.u64")
			ctWrite(t, tmp, ctValue(t, path))
			require.NoError(t, os.Rename(tmp, path))
		}, false},
		{"removed and recreated", func(t *testing.T, dir, path string) {
			require.NoError(t, os.Remove(path))
			ctWrite(t, path, 5)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, path := ctPath(t)
			g := ctOpen(t, path)
			_, err := g.Next()
			require.NoError(t, err)
			tt.replace(t, dir, path)
			before := testfs.Snapshot(t, dir)

			n, err := g.Next()
			assert.ErrorIs(t, err, ErrReplaced)
			assert.Zero(t, n)
			_, err = g.UniqueID()
			assert.ErrorIs(t, err, ErrReplaced)
			testfs.RequireUnchanged(t, dir, before)
			if tt.gone {
				_, err := os.Lstat(path)
				assert.ErrorIs(t, err, fs.ErrNotExist, "the removed file is not recreated")
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Init, Repair, ReadCounter.

func TestInit(t *testing.T) {
	t.Parallel()
	t.Run("used up counter says so", func(t *testing.T) {
		_, path := ctPath(t)
		full := EncodeCounter(MaxNumber)
		require.NoError(t, os.WriteFile(path, full[:], 0o600))
		_, err := Init(path, MaxNumber)
		require.ErrorIs(t, err, ErrLowered)
		require.ErrorIs(t, err, ErrExhausted)
		assert.NotContains(t, err.Error(), "next number is 0")
		assert.Equal(t, uint64(MaxNumber), ctValue(t, path))
	})
	t.Run("creates", func(t *testing.T) {
		dir, path := ctPath(t)
		_, err := Init(path, 42)
		require.NoError(t, err)
		assert.Equal(t, uint64(41), ctValue(t, path))
		testfs.RequireNoTemp(t, dir)
		g := ctOpen(t, path)
		id, err := g.UniqueID()
		require.NoError(t, err)
		assert.Equal(t, ctName+"-42", id)
	})
	for _, tt := range []struct {
		name           string
		existing       *uint64 // nil: no file yet
		next           uint64
		before, stored uint64
	}{
		{name: "creates at 1", next: 1, before: 0, stored: 0},
		{name: "raises", existing: &[]uint64{5}[0], next: 42, before: 5, stored: 41},
		{name: "same value", existing: &[]uint64{41}[0], next: 42, before: 41, stored: 41},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, path := ctPath(t)
			if tt.existing != nil {
				ctWrite(t, path, *tt.existing)
			}
			before, err := Init(path, tt.next)
			require.NoError(t, err)
			assert.Equal(t, tt.before, before)
			assert.Equal(t, tt.stored, ctValue(t, path))
		})
	}
	bad := []struct {
		name    string
		setup   func(t *testing.T, path string)
		next    uint64
		opts    []Option
		wantErr error
	}{
		{"refuses to lower", func(t *testing.T, p string) { ctWrite(t, p, 100) }, 42, nil, ErrLowered},
		{"refuses to lower by one", func(t *testing.T, p string) { ctWrite(t, p, 42) }, 42, nil, ErrLowered},
		{"next 0", func(t *testing.T, p string) {}, 0, nil, ErrInvalidOption},
		{"next 0 existing", func(t *testing.T, p string) { ctWrite(t, p, 3) }, 0, nil, ErrInvalidOption},
		{"corrupt", func(t *testing.T, p string) { require.NoError(t, os.WriteFile(p, []byte{1, 2, 3}, 0o600)) }, 42, nil, ErrCorrupt},
		{"directory", func(t *testing.T, p string) { require.NoError(t, os.Mkdir(p, 0o700)) }, 42, nil, ErrNotRegular},
		{"symlink", func(t *testing.T, p string) {
			ctWrite(t, p+".real", 1)
			require.NoError(t, os.Symlink(p+".real", p))
		}, 42, nil, ErrSymlink},
		{"invalid option", func(t *testing.T, p string) {}, 42, []Option{WithBlock(0)}, ErrInvalidOption},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			dir, path := ctPath(t)
			tt.setup(t, path)
			before := testfs.Snapshot(t, dir)
			_, err := Init(path, tt.next, tt.opts...)
			require.ErrorIs(t, err, tt.wantErr)
			testfs.RequireUnchanged(t, dir, before)
		})
	}
	t.Run("missing parent", func(t *testing.T) {
		dir := t.TempDir()
		_, err := Init(filepath.Join(dir, "nope", "counter.u64"), 5)
		require.ErrorIs(t, err, fs.ErrNotExist)
		testfs.RequireUnchanged(t, dir, map[string]testfs.Entry{})
	})
}

func TestRepair(t *testing.T) {
	t.Parallel()
	for _, content := range [][]byte{
		{}, {1}, {1, 2, 3, 4, 5, 6, 7}, {1, 2, 3, 4, 5, 6, 7, 8, 9},
		bytes.Repeat([]byte{0xab}, 16), bytes.Repeat([]byte{0xcd}, 100),
	} {
		t.Run(fmt.Sprintf("corrupt %d bytes", len(content)), func(t *testing.T) {
			dir, path := ctPath(t)
			require.NoError(t, os.WriteFile(path, content, 0o640))
			prev, err := Repair(path, 100)
			require.NoError(t, err)
			want := content
			if len(want) > 64 {
				want = want[:64]
			}
			assert.Equal(t, want, prev, "the previous bytes are returned (up to 64)")
			assert.Equal(t, uint64(99), ctValue(t, path))
			info, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, fs.FileMode(0o640), info.Mode(), "repaired in place")
			testfs.RequireNoTemp(t, dir)
			g := ctOpen(t, path)
			id, err := g.UniqueID()
			require.NoError(t, err)
			assert.Equal(t, ctName+"-100", id)
		})
	}
	t.Run("can lower", func(t *testing.T) {
		_, path := ctPath(t)
		ctWrite(t, path, 1000)
		prev, err := Repair(path, 5)
		require.NoError(t, err)
		assert.Equal(t, EncodeCounter(1000), [8]byte(prev))
		assert.Equal(t, uint64(4), ctValue(t, path))
	})
	t.Run("keeps the inode", func(t *testing.T) {
		_, path := ctPath(t)
		require.NoError(t, os.WriteFile(path, []byte{9}, 0o600))
		before, err := os.Stat(path)
		require.NoError(t, err)
		_, err = Repair(path, 7)
		require.NoError(t, err)
		after, err := os.Stat(path)
		require.NoError(t, err)
		assert.True(t, os.SameFile(before, after), "a lock on the file stays valid")
	})
	bad := []struct {
		name    string
		setup   func(t *testing.T, path string)
		next    uint64
		wantErr error
	}{
		{"missing file", func(t *testing.T, p string) {}, 5, fs.ErrNotExist},
		{"next 0", func(t *testing.T, p string) { require.NoError(t, os.WriteFile(p, []byte{1}, 0o600)) }, 0, ErrInvalidOption},
		{"symlink", func(t *testing.T, p string) {
			require.NoError(t, os.WriteFile(p+".real", []byte{1}, 0o600))
			require.NoError(t, os.Symlink(p+".real", p))
		}, 5, ErrSymlink},
		{"directory", func(t *testing.T, p string) { require.NoError(t, os.Mkdir(p, 0o700)) }, 5, ErrNotRegular},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			dir, path := ctPath(t)
			tt.setup(t, path)
			before := testfs.Snapshot(t, dir)
			_, err := Repair(path, tt.next)
			require.ErrorIs(t, err, tt.wantErr)
			testfs.RequireUnchanged(t, dir, before)
		})
	}
}

func TestReadCounter(t *testing.T) {
	t.Parallel()
	t.Run("value", func(t *testing.T) {
		_, path := ctPath(t)
		ctWrite(t, path, 12345)
		v, err := ReadCounter(path)
		require.NoError(t, err)
		assert.Equal(t, uint64(12345), v)
	})
	t.Run("never creates", func(t *testing.T) {
		dir, path := ctPath(t)
		_, err := ReadCounter(path)
		require.ErrorIs(t, err, fs.ErrNotExist)
		testfs.RequireUnchanged(t, dir, map[string]testfs.Entry{})
	})
	t.Run("corrupt", func(t *testing.T) {
		dir, path := ctPath(t)
		require.NoError(t, os.WriteFile(path, []byte{1, 2}, 0o600))
		before := testfs.Snapshot(t, dir)
		_, err := ReadCounter(path)
		require.ErrorIs(t, err, ErrCorrupt)
		assert.Contains(t, err.Error(), "2 bytes")
		testfs.RequireUnchanged(t, dir, before)
	})
	t.Run("sees what a Generator issued", func(t *testing.T) {
		_, path := ctPath(t)
		g := ctOpen(t, path)
		for range 3 {
			_, err := g.Next()
			require.NoError(t, err)
		}
		v, err := ReadCounter(path)
		require.NoError(t, err)
		assert.Equal(t, uint64(3), v)
	})
}

// ctGroupResult is what the leader and the members of a held group got.
type ctGroupResult struct {
	leaderN   uint64
	leaderErr error
	nums      []uint64
	errs      []error
}

// ctHeldGroup holds the write of a first caller (the leader of a group),
// lets members callers join the next group behind it, runs beforeRelease
// (if any), releases the leader and returns what everyone got.
func ctHeldGroup(g *Generator, x *ctFaultIO, members int, beforeRelease func()) ctGroupResult {
	var leaderN uint64
	var leaderErr error
	entered, release := x.hold()
	leaderDone := make(chan struct{})
	go func() {
		defer close(leaderDone)
		leaderN, leaderErr = g.Next()
	}()
	<-entered
	nums := make([]uint64, members)
	errs := make([]error, members)
	var wg sync.WaitGroup
	for i := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nums[i], errs[i] = g.Next()
		}()
	}
	ctWaitGroupSize(g, uint64(members))
	if beforeRelease != nil {
		beforeRelease()
	}
	release()
	<-leaderDone
	wg.Wait()
	return ctGroupResult{leaderN: leaderN, leaderErr: leaderErr, nums: nums, errs: errs}
}

// lyingIO is the kernel's page cache after a failed fdatasync: the pages
// it failed to write are marked clean, so a later fdatasync reports
// success without writing them, until the file is written again. durable
// is what a power cut would leave.
type lyingIO struct {
	mu      sync.Mutex
	fail    int // syncs to fail
	clean   bool
	written uint64
	durable uint64
}

func (x *lyingIO) ReadAt(f *os.File, b []byte, off int64) (int, error) { return f.ReadAt(b, off) }

func (x *lyingIO) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	n, err := f.WriteAt(b, off)
	x.mu.Lock()
	defer x.mu.Unlock()
	if err == nil && len(b) == CounterSize {
		x.written, _ = DecodeCounter(b)
		x.clean = false
	}
	return n, err
}

func (x *lyingIO) Sync(f *os.File) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case x.fail > 0:
		x.fail--
		x.clean = true
		return syscall.EIO
	case !x.clean:
		x.durable = x.written
	}
	return nil
}

// With sync off, the floor the host's record keeps moves only with a
// value synced after this process wrote it: a sync of a value another
// process wrote, whose own sync failed, would report success and leave
// the floor above what a power cut keeps (a restart then refused).
func TestSyncOffFloorFollowsOnlyOwnWrites(t *testing.T) {
	_, path := ctPath(t)
	x := &lyingIO{}
	opts := []Option{WithSync(false), withIO(x)}
	g1 := ctOpen(t, path, opts...)
	_, err := g1.Next()
	require.NoError(t, err)
	g2 := ctOpen(t, path, opts...)
	x.mu.Lock()
	x.fail = 1
	x.mu.Unlock()
	_, err = g2.Next()
	require.ErrorIs(t, err, syscall.EIO)
	g3 := ctOpen(t, path, opts...)
	_, err = g3.Next()
	require.NoError(t, err)

	p, err := hoststate.OpenPlace(testBindingDir(path), hoststate.PlaceOptions{})
	require.NoError(t, err)
	defer p.Close()
	r, ok, err := p.Read(ctName)
	require.NoError(t, err)
	require.True(t, ok)
	x.mu.Lock()
	defer x.mu.Unlock()
	require.LessOrEqual(t, r.Floor, x.durable, "the floor is at most what a power cut keeps")
}

func FuzzDecodeCounter(f *testing.F) {
	for _, b := range [][]byte{
		nil, {}, {1}, make([]byte, 7), make([]byte, 8), make([]byte, 9), make([]byte, 16),
		{42, 0, 0, 0, 0, 0, 0, 0}, bytes.Repeat([]byte{0xff}, 8), {0, 0, 0, 0, 0, 0, 0, 0x80},
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeCounter(b)
		if len(b) != CounterSize {
			if err == nil || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeCounter of %d bytes = %d, %v; want ErrCorrupt", len(b), v, err)
			}
			if v != 0 {
				t.Fatalf("DecodeCounter of %d bytes returned %d with the error", len(b), v)
			}
			return
		}
		if err != nil {
			t.Fatalf("DecodeCounter(% x): %v", b, err)
		}
		enc := EncodeCounter(v)
		if !bytes.Equal(enc[:], b) {
			t.Fatalf("EncodeCounter(DecodeCounter(% x)) = % x", b, enc)
		}
		// Little-endian, as Snap!'s counter.u64 on x86.
		var want uint64
		for i := CounterSize - 1; i >= 0; i-- {
			want = want<<8 | uint64(b[i])
		}
		if v != want {
			t.Fatalf("DecodeCounter(% x) = %d, want %d (little-endian)", b, v, want)
		}
	})
}
