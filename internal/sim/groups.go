package sim

import (
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/snapid/snapid/internal/engine"
)

// Group commit in a burst. On tmpfs a counter update takes microseconds,
// so without help no caller ever arrives while another's update runs,
// and no group with members forms. During a burst (a concurrent step)
// the disk's counter write therefore takes time: the first few updates
// of the burst wait, before writing, until another caller of a process
// of the host has joined a group waiting for that update (or until
// burstWaitLimit of wall time passed, or no caller is left to come).
// Serial steps never wait, so a serial history stays fast and replays
// exactly.

// burstWaits is how many counter updates of one burst wait for callers
// to queue; burstWaitLimit bounds each wait.
const (
	burstWaits     = 4
	burstWaitLimit = 2 * time.Millisecond
)

// slowFlush is a burst's slow counter write on one host's disk.
type slowFlush struct {
	procs   []*engine.Generator // the processes calling in the burst
	left    atomic.Int32        // updates that still wait
	running *atomic.Int32       // burst goroutines still calling
}

// queued reports whether a caller of one of the burst's processes waits
// in a group behind the update running.
func (s *slowFlush) queued() bool {
	for _, g := range s.procs {
		if engine.GroupQueued(g) >= 2 {
			return true
		}
	}
	return false
}

// pauseFlush is the wait before a counter write during a burst (see
// above); anything else is written at once.
func (d *disk) pauseFlush(f *os.File) {
	s := d.slow.Load()
	if s == nil || filepath.Base(f.Name()) != "counter" || s.left.Add(-1) < 0 {
		return
	}
	until := time.Now().Add(burstWaitLimit)
	for !s.queued() && s.running.Load() > 1 && time.Now().Before(until) {
		runtime.Gosched()
		time.Sleep(5 * time.Microsecond)
	}
}

// slowBurst makes ho's counter writes wait for queued callers while the
// burst of procs runs (running counts its goroutines still calling), and
// returns what ends it.
func (w *world) slowBurst(ho *host, procs []*engine.Generator, running *atomic.Int32) (end func()) {
	s := &slowFlush{procs: procs, running: running}
	s.left.Store(burstWaits)
	ho.disk.slow.Store(s)
	return func() { ho.disk.slow.Store(nil) }
}

// groupMembers is how many calls of procs were served by another
// caller's counter update so far.
func groupMembers(procs []*engine.Generator) uint64 {
	var n uint64
	for _, g := range procs {
		n += engine.GroupMembers(g)
	}
	return n
}
