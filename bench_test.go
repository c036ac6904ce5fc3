package snapid

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// The benchmarks report ids/s. bench/run.sh runs them (with the bench
// module's) -count 6 -benchtime 2s and reports medians; by hand:
//
//	go test -run '^$' -bench . -benchtime 2s -count 6
//
// Callers: c1 is one goroutine; cN runs N goroutines (see benchCallers).

// BenchmarkUniqueID measures UniqueID in each mode. Besides ids/s, every
// case reports what its counter file updates did while timed (from
// Generator.Stats): ids/update (numbers reserved per update: in strict
// mode, how many callers shared a group commit) and µs/update (time per
// update, lock waits included); strict cases also report per-call
// latency quantiles (p50-µs, p99-µs, p999-µs).
func BenchmarkUniqueID(b *testing.B) {
	type benchCase struct {
		name    string
		callers int
		latency bool
		opts    []Option
	}
	var cases []benchCase
	for _, sync := range []bool{false, true} {
		for _, c := range []int{1, 4, 16, 64} {
			cases = append(cases, benchCase{fmt.Sprintf("strict/sync=%s/c%d", onOff(sync), c), c, true, []Option{WithSync(sync)}})
		}
	}
	cases = append(cases,
		benchCase{"block=65536/sync=on/c1", 1, false, []Option{WithBlock(1 << 16)}},
		benchCase{"block=65536/sync=on/c2", 2, false, []Option{WithBlock(1 << 16)}},
		benchCase{"block=65536+cpushards/sync=on/c1", 1, false, []Option{WithBlock(1 << 16), WithCPUShards(true)}},
		benchCase{"block=65536+cpushards/sync=on/c2", 2, false, []Option{WithBlock(1 << 16), WithCPUShards(true)}},
	)
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			g, err := Open(filepath.Join(b.TempDir(), "counter.u64"), "server_a", tc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			before := g.Stats()
			benchCallers(b, tc.callers, tc.latency, g.UniqueID) // resets the timer: Open is not measured
			after := g.Stats()
			if flushes := after.CounterUpdates - before.CounterUpdates; flushes > 0 {
				b.ReportMetric(float64(after.NumbersReserved-before.NumbersReserved)/float64(flushes), "ids/update")
				b.ReportMetric((after.UpdateLatencySeconds.Sum-before.UpdateLatencySeconds.Sum)*1e6/float64(flushes), "µs/update")
			}
		})
	}
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// BenchmarkFloor measures what an id costs at the least. The file floors:
// the system calls of one counter update on a descriptor held open, with
// no checks, no formatting and no group commit. The memory floors, at 1
// and 2 callers: an atomic add alone, and the same output as block mode's
// UniqueID: an atomic add, then the name, '-' and the number appended in a
// stack buffer and made a string (one allocation).
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
			benchCallers(b, 1, false, func() (string, error) { return "", update(f, tc.lock, tc.sync) })
		})
	}
	for _, callers := range []int{1, 2} {
		b.Run(fmt.Sprintf("atomic-add/c%d", callers), func(b *testing.B) {
			var n atomic.Uint64
			benchCallers(b, callers, false, func() (string, error) {
				if n.Add(1) == 0 {
					return "", fmt.Errorf("wrapped")
				}
				return "", nil
			})
		})
	}
	for _, callers := range []int{1, 2} {
		b.Run(fmt.Sprintf("atomic-add+string/c%d", callers), func(b *testing.B) {
			var n atomic.Uint64
			name := "server_a"
			benchCallers(b, callers, false, func() (string, error) {
				var buf [MaxNameLen + 1 + 20]byte
				s := append(buf[:0], name...)
				s = append(s, '-')
				s = strconv.AppendUint(s, n.Add(1), 10)
				return string(s), nil
			})
		})
	}
}

// BenchmarkForms measures the id forms at 1 caller, strict (sync on) and
// block mode: UniqueID (a string per id) and the calls that allocate
// nothing, AppendUniqueID into a reused buffer and, striped,
// UniqueUint64.
func BenchmarkForms(b *testing.B) {
	forms := []struct {
		name string
		opts []Option
	}{
		{"name", nil},
		{"decimal", []Option{WithFormat(FormatDecimal), WithNodeNumber(123)}},
		{"striped", []Option{WithFormat(FormatStriped), WithNodeNumber(123), WithStride(1024)}},
	}
	modes := []struct {
		name string
		opts []Option
	}{{"strict/sync=on", nil}, {"block=65536/sync=on", []Option{WithBlock(1 << 16)}}}
	for _, m := range modes {
		for _, f := range forms {
			for _, call := range []string{"UniqueID", "AppendUniqueID", "UniqueUint64"} {
				if call == "UniqueUint64" && f.name != "striped" {
					continue
				}
				b.Run(m.name+"/"+f.name+"/"+call, func(b *testing.B) {
					g, err := Open(filepath.Join(b.TempDir(), "counter.u64"), "server_a",
						append(append([]Option{WithBindingDir(b.TempDir())}, m.opts...), f.opts...)...)
					if err != nil {
						b.Fatal(err)
					}
					defer g.Close()
					buf := make([]byte, 0, 64)
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						switch call {
						case "UniqueID":
							_, err = g.UniqueID()
						case "AppendUniqueID":
							buf, err = g.AppendUniqueID(buf[:0])
						default:
							_, err = g.UniqueUint64()
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
