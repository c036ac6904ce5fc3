package snapid

import (
	"encoding/binary"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ExportLeaseSyncs records which numbers of the sequence lease files the
// syncs cover: a lease file's position p over its current range [first,
// last] says that [first, p-1] are taken, and once a sync of the file
// returned, those numbers are durable. Other files go straight to the OS.
type ExportLeaseSyncs struct {
	mu      sync.Mutex
	written map[string]leaseRecord // per lease file, as last written
	durable []seqRange             // numbers taken as of a sync that returned
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
		x.written = map[string]leaseRecord{}
	}
	switch {
	case off == 0 && len(b) == leaseSize:
		if l, derr := decodeLease(b, leaseSize); derr == nil {
			x.written[f.Name()] = l
		}
	case off == 8 && len(b) == 8:
		l := x.written[f.Name()]
		l.pos = binary.LittleEndian.Uint64(b)
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
	if l := x.written[f.Name()]; !l.cur.none() && l.pos > l.cur.first {
		x.durable = append(x.durable, seqRange{l.cur.first, l.pos - 1})
	}
	return nil
}

// Covered reports whether the numbers [first, last] were all taken in a
// lease file as of a sync that returned.
func (x *ExportLeaseSyncs) Covered(first, last uint64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, r := range x.durable {
		if r.first <= first && last <= r.last {
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
		g.seqMu.Lock()
		for _, s := range g.seqs {
			if s.prefetching.Load() || s.alloc.busy() {
				busy = true
			}
		}
		g.seqMu.Unlock()
		if !busy {
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}
