package sequence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/snapid/snapid/internal/alloc"
	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/internal/leasefile"
)

// Blocks grow (doubling, up to the lease size) while they last less than
// fastBlock, so that a busy process is not held back by one fdatasync per
// block, and shrink back (halving, down to SequenceBlock) once they last
// longer than slowBlock, so that an idle one leaves small gaps.
const (
	fastBlock = 50 * time.Millisecond
	slowBlock = 2 * time.Second
)

// nextBlockSize returns the size of the next block (see fastBlock).
func (s *Sequence) nextBlockSize() uint64 {
	now := s.h.Clock.Now().UnixNano()
	last := s.lastBlock.Swap(now)
	size := s.blockSize.Load()
	switch elapsed := time.Duration(now - last); {
	case last == 0:
	case elapsed < fastBlock && size < s.leaseSize.Load():
		size = min(size*2, max(s.leaseSize.Load(), s.o.block))
	case elapsed > slowBlock && size > s.o.block:
		size = max(size/2, s.o.block)
	}
	s.blockSize.Store(size)
	return size
}

// maxTakeRounds bounds the rounds of one take; each round that does not
// succeed means another process of the host moved the file (progress) or a
// lease had to be taken.
const maxTakeRounds = 1000

// take takes between min and k consecutive numbers from the lease file,
// leasing from the registry when the file has none, and with prefetchOK,
// starting the host's next lease in the background when half of the
// current one is used.
func (s *Sequence) take(ctx context.Context, k, min uint64, prefetchOK bool) (first, count uint64, err error) {
	ctx, cancel := s.working(ctx)
	defer cancel()
	for round := 0; round < maxTakeRounds; round++ {
		if s.closed.Load() {
			return 0, 0, errs.ErrClosed
		}
		var got, prefetch bool
		err = s.update(ctx, true, func(l *leasefile.Record) (bool, error) {
			// A caller that left (NextNContext) takes nothing, even
			// once the lock it waited for is free.
			if err := alloc.ContextError(ctx); err != nil {
				return false, err
			}
			changed := false
			for {
				if left := l.Left(); left >= min {
					first, count = l.Pos, minU(k, left)
					l.Pos += count
					got = true
					if prefetchOK && l.Ahead.None() && l.Left() < s.leaseSize.Load()/2 {
						prefetch = true
					}
					return changed, nil
				}
				if l.Ahead.None() {
					return changed, nil
				}
				// The rest of cur (fewer than min) is skipped.
				l.Cur, l.Ahead, l.Pos = l.Ahead, leasefile.Range{}, l.Ahead.First
				changed = true
			}
		})
		if err != nil {
			return 0, 0, err
		}
		if got {
			if prefetch {
				s.prefetch()
			}
			return first, count, nil
		}
		if err := s.refillLease(ctx, min, false); err != nil {
			return 0, 0, err
		}
	}
	return 0, 0, fmt.Errorf("snapid: %w: sequence %q: the host's lease file kept changing", errs.ErrReservationExhausted, s.name)
}

func minU(a, b uint64) uint64 {
	if a < b {
		return a
	}
	return b
}

// working returns ctx ended also when the Sequence closes (its cause
// then ErrClosed), so that every wait of a take ends at Close.
func (s *Sequence) working(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.stopCtx, func() { cancel(errs.ErrClosed) })
	return ctx, func() { stop(); cancel(nil) }
}

// update runs fn on the lease file's record under the Sequence's mutex
// and the file's lock, waiting for the lock no longer than ctx allows,
// then writes what fn changed: the position alone (8 bytes) unless fn
// reports that more changed. The write is synced before update returns,
// so no number fn takes is handed out before it is on disk. With bound
// false it leaves out the check that the file is bound to this process's
// claim (verify, which rebinds it, uses that). Every wait has its caller's
// context: the caller's own for Open and NextN, the Sequence's (working)
// for its background work.
func (s *Sequence) update(ctx context.Context, bound bool, fn func(l *leasefile.Record) (changed bool, err error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fileClosed || s.h.Closed() {
		// A lease that finished after Close: not recorded, a gap. After
		// the Generator's Close, the host's last process may have recorded
		// where the file stands: nothing more is taken from it.
		return errs.ErrClosed
	}
	return s.lf.Lease().WithLockContext(ctx, func() error {
		return s.updateLocked(bound, fn)
	})
}

// updateLocked is the work of update under the Sequence's mutex
// and the file's lock: it reads the lease file and its floor, raises the
// file to what the floor and this process saw, checks that it is bound
// to this process's claim (with bound), runs fn, and writes what changed
// to the file and the floor.
func (s *Sequence) updateLocked(bound bool, fn func(l *leasefile.Record) (changed bool, err error)) error {
	l, floor, floorOK, err := s.loadWithFloor()
	if err != nil {
		return err
	}
	before := l
	changed := s.raiseToFloor(&l, floor, floorOK)
	if s.raiseToSeenGen(&l) {
		changed = true
	}
	if bound {
		rebound, err := s.bindToClaim(&l)
		if err != nil {
			return err
		}
		changed = changed || rebound
	}
	s.raiseToSeen(&l)
	c, err := fn(&l)
	if err != nil {
		return err
	}
	changed = changed || c || l.Cur != before.Cur || l.Ahead != before.Ahead
	if err := s.storeUpdate(&l, before, changed, floor, floorOK); err != nil {
		return err
	}
	s.noteSeen(l)
	return nil
}

// loadWithFloor reads the lease file's record and, once the floor file is
// the current one, the floor's (floorOK false: the floor holds none).
func (s *Sequence) loadWithFloor() (l, floor leasefile.Record, floorOK bool, err error) {
	l, err = s.lf.Load()
	if err != nil {
		return l, floor, false, err
	}
	if err := s.lf.FloorCurrent(); err != nil {
		return l, floor, false, err
	}
	floor, floorOK, err = s.lf.LoadFloor()
	return l, floor, floorOK, err
}

// raiseToFloor raises l to the floor: what the host's last update left,
// whichever process made it. A lease file behind it went backwards while
// the host runs (restored or copied over in place, also from a copy an
// earlier claim of the host left): it is raised back before anything is
// taken, also by a process that never saw the later position (see
// floorSuffix). It reports whether more than the position changed.
func (s *Sequence) raiseToFloor(l *leasefile.Record, floor leasefile.Record, floorOK bool) (changed bool) {
	if !floorOK || floor.Session != l.Session && floor.Session != s.h.Session {
		return false
	}
	switch {
	case floor.Gen > l.Gen:
		s.log.Error("snapid: the sequence lease file went back to an earlier lease while the host uses it (restored or copied over?); raising it to its floor",
			"sequence", s.name, "cur", l.Cur, "pos", l.Pos, "to", floor.Cur, "pos", floor.Pos)
		l.Session, l.Cur, l.Ahead, l.Pos, l.Gen = floor.Session, floor.Cur, floor.Ahead, floor.Pos, floor.Gen
		return true
	case floor.Session == l.Session && floor.Gen == l.Gen && floor.Cur == l.Cur && floor.Ahead == l.Ahead && l.Pos < floor.Pos:
		s.log.Error("snapid: the sequence lease file went backwards while the host uses it (restored or copied over?); raising it to its floor",
			"sequence", s.name, "pos", l.Pos, "to", floor.Pos)
		l.Pos = floor.Pos
	}
	return false
}

// raiseToSeenGen raises l to what this process last saw, a floor too: the
// one left when the lease file and its floor were restored or copied over
// together. A lease file at an earlier generation than this process last
// saw went back to an earlier write, and is raised to what this process
// last saw, whatever its ranges (a process that joined the host's claim
// and took nothing yet knows the ranges and generation its open checked
// against the registry). It reports whether it raised l.
func (s *Sequence) raiseToSeenGen(l *leasefile.Record) bool {
	if l.Gen >= s.seenGen || s.seenSess != l.Session && s.seenSess != s.h.Session {
		return false
	}
	s.log.Error("snapid: the sequence lease file went back to an earlier write while in use (restored or copied over with its floor?); raising it to what this process last saw",
		"sequence", s.name, "cur", l.Cur, "pos", l.Pos, "to", s.seen, "pos", s.high)
	l.Session, l.Cur, l.Ahead, l.Pos, l.Gen = s.seenSess, s.seen, s.seenAhead, s.high, s.seenGen
	return true
}

// bindToClaim checks that l is bound to this process's claim, binding a
// file that holds no lease yet to it (rebound true). A file bound to
// another claim of the host's name (a later start replaced this host's
// session, or a copy) is not ours to use any more unless this process's
// claim is the current one, which only the registry can say: it takes
// nothing (ErrNameTaken).
func (s *Sequence) bindToClaim(l *leasefile.Record) (rebound bool, err error) {
	if l.Session == s.h.Session {
		return false, nil
	}
	if l.Session != "" || !l.Cur.None() {
		return false, fmt.Errorf("snapid: %w: sequence %q: the lease file is bound to another claim of %q (a later start of this host, or a copy of its state)",
			errs.ErrNameTaken, s.name, s.h.Node)
	}
	l.Session = s.h.Session
	return true, nil
}

// raiseToSeen raises l to where this process last left it when its
// position is below what this process saw in the same range, or its range
// is one this process already moved past: the file went backwards while
// in use (restored or copied over).
func (s *Sequence) raiseToSeen(l *leasefile.Record) {
	switch {
	case l.Cur.None():
	case l.Cur == s.seen && l.Pos < s.high:
		s.log.Error("snapid: the sequence lease file went backwards while in use (restored or copied over?); raising it",
			"sequence", s.name, "pos", l.Pos, "to", s.high)
		l.Pos = s.high
	case l.Cur != s.seen && s.past.has(l.Cur):
		s.log.Error("snapid: the sequence lease file went back to an earlier lease while in use (restored or copied over?); raising it",
			"sequence", s.name, "cur", l.Cur, "pos", l.Pos, "to", s.seen, "pos", s.high)
		l.Cur, l.Ahead, l.Pos = s.seen, s.seenAhead, s.high
	}
}

// storeUpdate writes l to the lease file, whole if more than the position
// changed since before, else its position alone if that moved, then to
// the floor unless the floor already holds it.
func (s *Sequence) storeUpdate(l *leasefile.Record, before leasefile.Record, changed bool, floor leasefile.Record, floorOK bool) error {
	var err error
	switch {
	case changed:
		err = s.lf.Store(l)
	case l.Pos != before.Pos:
		err = s.lf.StorePos(l.Pos)
	}
	if err != nil {
		return err
	}
	if !changed && l.Pos == before.Pos && floorOK && floor.Gen == l.Gen && floor.Pos == l.Pos {
		return nil
	}
	// The position alone when the floor holds this generation
	// (its ranges, its session) already.
	posOnly := !changed && floorOK && floor.Gen == l.Gen && floor.Session == l.Session &&
		floor.Cur == l.Cur && floor.Ahead == l.Ahead
	// Numbers the floor does not cover could be handed out again after a
	// restore: none of them is handed out.
	return s.lf.StoreFloor(l, posOnly)
}

// noteSeen records l as what this process last saw of the lease file,
// and the range it moved past, if any.
func (s *Sequence) noteSeen(l leasefile.Record) {
	if l.Cur != s.seen && !s.seen.None() {
		s.past.add(s.seen)
	}
	s.seen, s.high, s.seenAhead = l.Cur, l.Pos, l.Ahead
	s.seenGen, s.seenSess = l.Gen, l.Session
}

// settle raises the lease file to what this process saw of it (the
// checks of update), taking nothing. A process runs it as it
// closes (Sequence.Close, Generator.Close), so that what it knows does not
// leave with it: the host's last process records where the file stands
// for the host's next start to carry over (closeLeases), and a file
// restored together with its floor would otherwise be carried over at the
// copy's position. A failure leaves the file as it is.
func (s *Sequence) settle() {
	ctx, cancel := s.h.Clock.WithTimeout(context.Background(), s.h.Timeout)
	defer cancel()
	err := s.update(ctx, true, func(*leasefile.Record) (bool, error) { return false, nil })
	if err != nil && !errors.Is(err, errs.ErrClosed) && !errors.Is(err, errs.ErrNameTaken) {
		// ErrNameTaken: the file is another claim's now; this
		// process's view of it is of no use.
		s.log.Warn("snapid: could not check the sequence lease file against what this process saw of it as it closes",
			"sequence", s.name, "err", err)
	}
}

// pastRanges is the set of the most recent ranges a process held as its
// current lease and moved past (at most pastRangesKept of them).
type pastRanges struct {
	set   map[leasefile.Range]bool
	order []leasefile.Range
}

const pastRangesKept = 4096

func (p *pastRanges) has(r leasefile.Range) bool { return p.set[r] }

func (p *pastRanges) add(r leasefile.Range) {
	if p.set[r] {
		return
	}
	if p.set == nil {
		p.set = map[leasefile.Range]bool{}
	}
	if len(p.order) == pastRangesKept {
		delete(p.set, p.order[0])
		p.order = p.order[1:]
	}
	p.set[r] = true
	p.order = append(p.order, r)
}
