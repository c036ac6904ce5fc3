package snapid

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// The benchmarks report ids/s. Run them with
//
//	go test -run '^$' -bench . -benchtime 2s
//
// Callers: c1 is one goroutine; cN runs N goroutines with RunParallel
// (GOMAXPROCS × parallelism = N, so N must be a multiple of GOMAXPROCS).

func benchCallers(b *testing.B, callers int, fn func() error) {
	b.ReportAllocs()
	if callers == 1 {
		for i := 0; i < b.N; i++ {
			if err := fn(); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		procs := max(1, runtimeGOMAXPROCS())
		b.SetParallelism(max(1, callers/procs))
		var failed atomic.Pointer[error]
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := fn(); err != nil {
					e := err
					failed.Store(&e)
					return
				}
			}
		})
		if errp := failed.Load(); errp != nil {
			b.Fatal(*errp)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
}

// BenchmarkUniqueID measures UniqueID in each mode.
func BenchmarkUniqueID(b *testing.B) {
	cases := []struct {
		name    string
		callers int
		opts    []Option
	}{
		{"strict/sync=off/c1", 1, []Option{WithSync(false)}},
		{"strict/sync=off/c64", 64, []Option{WithSync(false)}},
		{"strict/sync=on/c1", 1, nil},
		{"strict/sync=on/c64", 64, nil},
		{"block=65536/sync=on/c1", 1, []Option{WithBlock(1 << 16)}},
		{"block=65536/sync=on/c2", 2, []Option{WithBlock(1 << 16)}},
		{"block=65536+cpushards/sync=on/c1", 1, []Option{WithBlock(1 << 16), WithCPUShards(true)}},
		{"block=65536+cpushards/sync=on/c2", 2, []Option{WithBlock(1 << 16), WithCPUShards(true)}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			g, err := Open(filepath.Join(b.TempDir(), "counter.u64"), "server_a", tc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			benchCallers(b, tc.callers, func() error {
				_, err := g.UniqueID()
				return err
			})
		})
	}
}

// BenchmarkFloor measures what the counter file costs at the least: the
// system calls of one update on a descriptor held open, with no checks,
// no formatting and no group commit; and an atomic add in memory.
func BenchmarkFloor(b *testing.B) {
	open := func(b *testing.B) *os.File {
		f, err := os.OpenFile(filepath.Join(b.TempDir(), "floor.u64"), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.WriteAt(make([]byte, 8), 0); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		return f
	}
	update := func(f *os.File, lock, sync bool) error {
		fd := int(f.Fd())
		if lock {
			if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
				return err
			}
		}
		var buf [8]byte
		if _, err := unix.Pread(fd, buf[:], 0); err != nil {
			return err
		}
		buf[0]++
		if _, err := unix.Pwrite(fd, buf[:], 0); err != nil {
			return err
		}
		if sync {
			if err := unix.Fdatasync(fd); err != nil {
				return err
			}
		}
		if lock {
			return unix.Flock(fd, unix.LOCK_UN)
		}
		return nil
	}
	for _, tc := range []struct {
		name       string
		lock, sync bool
	}{
		{"flock+pread+pwrite", true, false},
		{"flock+pread+pwrite+fdatasync", true, true},
		{"pwrite+fdatasync", false, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			f := open(b)
			benchCallers(b, 1, func() error { return update(f, tc.lock, tc.sync) })
		})
	}
	// One shared counter in memory: what block mode's per-process order
	// costs at the least, with one caller and with one per core.
	for _, callers := range []int{1, 2} {
		b.Run(fmt.Sprintf("atomic-add/c%d", callers), func(b *testing.B) {
			var n atomic.Uint64
			benchCallers(b, callers, func() error {
				if n.Add(1) == 0 {
					return fmt.Errorf("wrapped")
				}
				return nil
			})
		})
	}
}
