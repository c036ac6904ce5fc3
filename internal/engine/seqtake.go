package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/snapid/snapid/internal/alloc"
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
	now := s.g.clock.Now().UnixNano()
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
	for round := 0; round < maxTakeRounds; round++ {
		if s.closed.Load() {
			return 0, 0, ErrClosed
		}
		var got, prefetch bool
		err = s.withFile(func(l *leaseRecord) (bool, error) {
			// A caller that left (NextNContext) takes nothing, even
			// once the lock it waited for is free.
			if err := alloc.ContextError(ctx); err != nil {
				return false, err
			}
			changed := false
			for {
				if left := l.left(); left >= min {
					first, count = l.pos, minU(k, left)
					l.pos += count
					got = true
					if prefetchOK && l.ahead.none() && l.left() < s.leaseSize.Load()/2 {
						prefetch = true
					}
					return changed, nil
				}
				if l.ahead.none() {
					return changed, nil
				}
				// The rest of cur (fewer than min) is skipped.
				l.cur, l.ahead, l.pos = l.ahead, seqRange{}, l.ahead.first
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
	return 0, 0, fmt.Errorf("snapid: %w: sequence %q: the host's lease file kept changing", ErrReservationExhausted, s.name)
}

func minU(a, b uint64) uint64 {
	if a < b {
		return a
	}
	return b
}

// withFile runs fn on the lease file's record under the Sequence's mutex
// and the file's lock, then writes what fn changed: the position alone
// (8 bytes) unless fn reports that more changed. The write is synced before
// withFile returns, so no number fn takes is handed out before it is on
// disk.
func (s *Sequence) withFile(fn func(l *leaseRecord) (changed bool, err error)) error {
	return s.update(true, fn)
}

// update is withFile; with bound false it leaves out the check that the
// file is bound to this process's claim (verify, which rebinds it, uses
// that).
func (s *Sequence) update(bound bool, fn func(l *leaseRecord) (changed bool, err error)) error {
	return s.updateContext(context.Background(), bound, fn)
}

// updateContext is update waiting for the file's lock no longer than ctx
// allows.
func (s *Sequence) updateContext(ctx context.Context, bound bool, fn func(l *leaseRecord) (changed bool, err error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fileClosed || s.g.closed.Load() {
		// A lease that finished after Close: not recorded, a gap. After
		// the Generator's Close, the host's last process may have recorded
		// where the file stands: nothing more is taken from it.
		return ErrClosed
	}
	return s.lf.c.WithLockContext(ctx, func() error {
		return s.updateLocked(bound, fn)
	})
}

// updateLocked is the work of updateContext under the Sequence's mutex
// and the file's lock: it reads the lease file and its floor, raises the
// file to what the floor and this process saw, checks that it is bound
// to this process's claim (with bound), runs fn, and writes what changed
// to the file and the floor.
func (s *Sequence) updateLocked(bound bool, fn func(l *leaseRecord) (changed bool, err error)) error {
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
	changed = changed || c || l.cur != before.cur || l.ahead != before.ahead
	if err := s.storeUpdate(&l, before, changed, floor, floorOK); err != nil {
		return err
	}
	s.noteSeen(l)
	return nil
}

// loadWithFloor reads the lease file's record and, once the floor file is
// the current one, the floor's (floorOK false: the floor holds none).
func (s *Sequence) loadWithFloor() (l, floor leaseRecord, floorOK bool, err error) {
	l, err = s.lf.load()
	if err != nil {
		return l, floor, false, err
	}
	if err := s.lf.floorCurrent(); err != nil {
		return l, floor, false, err
	}
	floor, floorOK, err = s.lf.loadFloor()
	return l, floor, floorOK, err
}

// raiseToFloor raises l to the floor: what the host's last update left,
// whichever process made it. A lease file behind it went backwards while
// the host runs (restored or copied over in place, also from a copy an
// earlier claim of the host left): it is raised back before anything is
// taken, also by a process that never saw the later position (see
// floorSuffix). It reports whether more than the position changed.
func (s *Sequence) raiseToFloor(l *leaseRecord, floor leaseRecord, floorOK bool) (changed bool) {
	if !floorOK || floor.session != l.session && floor.session != s.g.res.session {
		return false
	}
	switch {
	case floor.gen > l.gen:
		s.log.Error("snapid: the sequence lease file went back to an earlier lease while the host uses it (restored or copied over?); raising it to its floor",
			"sequence", s.name, "cur", l.cur, "pos", l.pos, "to", floor.cur, "pos", floor.pos)
		l.session, l.cur, l.ahead, l.pos, l.gen = floor.session, floor.cur, floor.ahead, floor.pos, floor.gen
		return true
	case floor.session == l.session && floor.gen == l.gen && floor.cur == l.cur && floor.ahead == l.ahead && l.pos < floor.pos:
		s.log.Error("snapid: the sequence lease file went backwards while the host uses it (restored or copied over?); raising it to its floor",
			"sequence", s.name, "pos", l.pos, "to", floor.pos)
		l.pos = floor.pos
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
func (s *Sequence) raiseToSeenGen(l *leaseRecord) bool {
	if l.gen >= s.seenGen || s.seenSess != l.session && s.seenSess != s.g.res.session {
		return false
	}
	s.log.Error("snapid: the sequence lease file went back to an earlier write while in use (restored or copied over with its floor?); raising it to what this process last saw",
		"sequence", s.name, "cur", l.cur, "pos", l.pos, "to", s.seen, "pos", s.high)
	l.session, l.cur, l.ahead, l.pos, l.gen = s.seenSess, s.seen, s.seenAhead, s.high, s.seenGen
	return true
}

// bindToClaim checks that l is bound to this process's claim, binding a
// file that holds no lease yet to it (rebound true). A file bound to
// another claim of the host's name (a later start replaced this host's
// session, or a copy) is not ours to use any more unless this process's
// claim is the current one, which only the registry can say: it takes
// nothing (ErrNameTaken).
func (s *Sequence) bindToClaim(l *leaseRecord) (rebound bool, err error) {
	if l.session == s.g.res.session {
		return false, nil
	}
	if l.session != "" || !l.cur.none() {
		return false, fmt.Errorf("snapid: %w: sequence %q: the lease file is bound to another claim of %q (a later start of this host, or a copy of its state)",
			ErrNameTaken, s.name, s.g.name)
	}
	l.session = s.g.res.session
	return true, nil
}

// raiseToSeen raises l to where this process last left it when its
// position is below what this process saw in the same range, or its range
// is one this process already moved past: the file went backwards while
// in use (restored or copied over).
func (s *Sequence) raiseToSeen(l *leaseRecord) {
	switch {
	case l.cur.none():
	case l.cur == s.seen && l.pos < s.high:
		s.log.Error("snapid: the sequence lease file went backwards while in use (restored or copied over?); raising it",
			"sequence", s.name, "pos", l.pos, "to", s.high)
		l.pos = s.high
	case l.cur != s.seen && s.past.has(l.cur):
		s.log.Error("snapid: the sequence lease file went back to an earlier lease while in use (restored or copied over?); raising it",
			"sequence", s.name, "cur", l.cur, "pos", l.pos, "to", s.seen, "pos", s.high)
		l.cur, l.ahead, l.pos = s.seen, s.seenAhead, s.high
	}
}

// storeUpdate writes l to the lease file, whole if more than the position
// changed since before, else its position alone if that moved, then to
// the floor unless the floor already holds it.
func (s *Sequence) storeUpdate(l *leaseRecord, before leaseRecord, changed bool, floor leaseRecord, floorOK bool) error {
	var err error
	switch {
	case changed:
		err = s.lf.store(l)
	case l.pos != before.pos:
		err = s.lf.storePos(l.pos)
	}
	if err != nil {
		return err
	}
	if !changed && l.pos == before.pos && floorOK && floor.gen == l.gen && floor.pos == l.pos {
		return nil
	}
	// The position alone when the floor holds this generation
	// (its ranges, its session) already.
	posOnly := !changed && floorOK && floor.gen == l.gen && floor.session == l.session &&
		floor.cur == l.cur && floor.ahead == l.ahead
	// Numbers the floor does not cover could be handed out again after a
	// restore: none of them is handed out.
	return s.lf.storeFloor(l, posOnly)
}

// noteSeen records l as what this process last saw of the lease file,
// and the range it moved past, if any.
func (s *Sequence) noteSeen(l leaseRecord) {
	if l.cur != s.seen && !s.seen.none() {
		s.past.add(s.seen)
	}
	s.seen, s.high, s.seenAhead = l.cur, l.pos, l.ahead
	s.seenGen, s.seenSess = l.gen, l.session
}

// settle raises the lease file to what this process saw of it (the
// checks of updateContext), taking nothing. A process runs it as it
// closes (Sequence.Close, Generator.Close), so that what it knows does not
// leave with it: the host's last process records where the file stands
// for the host's next start to carry over (closeLeases), and a file
// restored together with its floor would otherwise be carried over at the
// copy's position. A failure leaves the file as it is.
func (s *Sequence) settle() {
	ctx, cancel := s.g.clock.WithTimeout(context.Background(), s.g.res.o.timeout)
	defer cancel()
	err := s.updateContext(ctx, true, func(*leaseRecord) (bool, error) { return false, nil })
	if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNameTaken) {
		// ErrNameTaken: the file is another claim's now; this
		// process's view of it is of no use.
		s.log.Warn("snapid: could not check the sequence lease file against what this process saw of it as it closes",
			"sequence", s.name, "err", err)
	}
}

// pastRanges is the set of the most recent ranges a process held as its
// current lease and moved past (at most pastRangesKept of them).
type pastRanges struct {
	set   map[seqRange]bool
	order []seqRange
}

const pastRangesKept = 4096

func (p *pastRanges) has(r seqRange) bool { return p.set[r] }

func (p *pastRanges) add(r seqRange) {
	if p.set[r] {
		return
	}
	if p.set == nil {
		p.set = map[seqRange]bool{}
	}
	if len(p.order) == pastRangesKept {
		delete(p.set, p.order[0])
		p.order = p.order[1:]
	}
	p.set[r] = true
	p.order = append(p.order, r)
}
