package snapid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofrs/flock"
)

// Defaults of SequenceOption.
const (
	// DefaultSequenceBlock is how many numbers a process takes from its
	// host's lease file at a time (one locked, synced update).
	DefaultSequenceBlock = 1000
	// DefaultSequenceLease is how many numbers a host leases from its data
	// centre at a time.
	DefaultSequenceLease = 10_000
)

// SequenceOption configures Generator.Sequence.
type SequenceOption func(*seqOptions) error

type seqOptions struct {
	block, lease uint64
}

// SequenceBlock sets how many numbers the process takes from the host's
// lease file at a time (default DefaultSequenceBlock): one flock, one
// 8-byte write and one fdatasync per block. A busy process takes larger
// blocks, up to the lease size (see nextBlockSize). A process that exits
// leaves the rest of its block unused (a gap).
func SequenceBlock(n uint64) SequenceOption {
	return func(o *seqOptions) error {
		if n == 0 {
			return fmt.Errorf("snapid: %w: SequenceBlock(0): a block holds at least 1 number", ErrInvalidOption)
		}
		o.block = n
		return nil
	}
}

// MaxSequenceLease is the largest SequenceLeaseSize: 128 times it (the
// most a lease grows to) is at most 2^63-1, the largest lease a registry
// stores.
const MaxSequenceLease = MaxSequence / maxLeaseGrowth

// SequenceLeaseSize sets how many numbers the host leases from its data
// centre at a time (default DefaultSequenceLease). The rest of a lease is
// lost (a gap) when the host restarts after a crash; a clean restart
// carries it over. n is at most MaxSequenceLease: leases grow to 128×n
// while the host leases fast, and a lease is at most 2^63-1 numbers.
func SequenceLeaseSize(n uint64) SequenceOption {
	return func(o *seqOptions) error {
		if n == 0 {
			return fmt.Errorf("snapid: %w: SequenceLeaseSize(0): a lease holds at least 1 number", ErrInvalidOption)
		}
		if n > MaxSequenceLease {
			return fmt.Errorf("snapid: %w: SequenceLeaseSize(%d): at most %d (leases grow to %d times it, and hold at most 2^63-1 numbers)",
				ErrInvalidOption, n, MaxSequenceLease, maxLeaseGrowth)
		}
		o.lease = n
		return nil
	}
}

// Sequence hands out the numbers of a cluster-wide integer sequence (see
// CreateSequence), from leases its host holds in the registry.
//
// Next and NextN are safe for concurrent use by any number of goroutines,
// and any number of processes of the host may use the same sequence
// through the same counter at once: they share the host's lease through
// the lease file beside the counter, under its flock. Numbers are unique
// across the cluster; they increase within a block of one process, not
// across processes or hosts. Gaps come from blocks left unused by a
// process that exits, a host's lease after a crash (a clean restart
// carries it over), a lease file found older than the registry's record
// (restored or copied: its ranges are dropped), and data-centre ranges left
// unused.
type Sequence struct {
	g      *Generator
	name   string
	reg    SequenceRegistry
	o      seqOptions
	log    *slog.Logger
	alloc  *blockAllocator
	closed atomic.Bool

	mu         sync.Mutex // guards lf and the fields below (the flock is per open file, not per goroutine)
	lf         *leaseFile
	fileClosed bool
	seen       seqRange // the current range this process last saw, for the roll-back check
	high       uint64   // the highest position this process saw in seen

	refill      *flock.Flock  // <lease file>.refill: one process of the host leases at a time
	refillSem   chan struct{} // one goroutine of the process holds refill at a time
	blockSize   atomic.Uint64
	lastBlock   atomic.Int64 // when the last block was taken (UnixNano)
	leaseSize   atomic.Uint64
	lastLease   atomic.Int64 // when the last lease was asked for (UnixNano)
	prefetching atomic.Bool
	blockTaken  atomic.Uint64 // numbers the process's blocks took from the lease file (Stats)
	issuedHigh  atomic.Uint64 // the highest count of numbers handed out of blocks Stats reported
	nextN       atomic.Uint64 // numbers NextN handed out (Stats)
	leases      atomic.Uint64 // leases taken from the registry (Stats)
	bgMu        sync.Mutex    // guards stopping and wg.Add against Close's wg.Wait
	stopping    bool
	wg          sync.WaitGroup
}

// Sequence opens the sequence name for this Generator's host. The
// Generator must have a registry (WithRegistry) that implements
// SequenceRegistry (else ErrSequencesUnsupported), and the sequence must
// exist (ErrNoSequence; see CreateSequence). It creates the lease file
// beside the counter if missing, and checks it against the registry's
// record of this host's lease: ranges leased under an earlier claim of the
// host are carried over if the file is exactly as the host's last process
// recorded it at a clean close, and dropped otherwise, as are ranges older
// than the registry's record (a restored or copied file); dropped numbers
// are never issued again. If the registry cannot be reached, a
// file of this host's current claim is used as it is, with a warning.
//
// Close the Sequence before its Generator.
func (g *Generator) Sequence(name string, opts ...SequenceOption) (*Sequence, error) {
	if err := ValidateName(name); err != nil {
		return nil, fmt.Errorf("sequence name: %w", err)
	}
	o := seqOptions{block: DefaultSequenceBlock, lease: DefaultSequenceLease}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if g.closed.Load() {
		return nil, ErrClosed
	}
	var reg Registry
	if g.res != nil {
		reg = g.res.reg
	}
	sr, err := sequenceRegistry(reg)
	if err != nil {
		return nil, err
	}
	// The registry first: a sequence that does not exist is refused before
	// anything is created on disk.
	reachable := true
	ctx, cancel := context.WithTimeout(context.Background(), g.res.o.timeout)
	defer cancel()
	if _, err := sr.HostLease(ctx, name, g.name); err != nil && !errors.Is(err, ErrRegistry) {
		return nil, err
	} else if err != nil {
		reachable = false
	}
	fo := defaultOptions()
	fo.followSymlinks, fo.sync, fo.io = g.file.follow, g.file.sync, g.file.io
	fo.fs, fo.fileMode = g.res.host.fs, g.res.host.mode
	lf, err := openLeaseFile(g.path, name, g.name, g.res.host.owner, &fo)
	if err != nil {
		return nil, err
	}
	refillPath := leasePath(g.path, name) + refillSuffix
	if err := createIfAbsent(refillPath, nil, &fo); err != nil {
		lf.c.close()
		return nil, err
	}
	s := &Sequence{g: g, name: name, reg: sr, o: o, log: g.log, lf: lf,
		refill: flock.New(refillPath, flock.SetFlag(openFlags(fo.followSymlinks))), refillSem: make(chan struct{}, 1)}
	if err := s.verify(reachable); err != nil {
		lf.c.close()
		return nil, err
	}
	s.blockSize.Store(o.block)
	s.leaseSize.Store(o.lease)
	s.alloc = newBlockAllocator(o.block, func(ctx context.Context, _ uint64) (uint64, uint64, error) {
		first, count, err := s.take(ctx, s.nextBlockSize(), 1, true)
		s.blockTaken.Add(count)
		return first, count, err
	})
	g.addSequence(s)
	return s, nil
}

// Name returns the sequence's name.
func (s *Sequence) Name() string { return s.name }

// verify checks the lease file against the registry's record of this
// host's lease, and drops its ranges if they are not the host's current
// lease. It holds the host's refill lock, so that no lease of another
// process of the host is between the registry and the file meanwhile, and
// reads the registry's record under it. reachable is false if the
// registry could not be reached at open.
func (s *Sequence) verify(reachable bool) error {
	if err := s.lockRefill(context.Background()); err != nil {
		return err
	}
	defer s.unlockRefill()
	session := s.g.res.session
	var old leaseRecord // the file as an earlier claim left it
	check, earlier := false, false
	err := s.update(false, func(l *leaseRecord) (bool, error) {
		switch {
		case l.session != session && l.cur.none() && l.session != "":
			l.void(session)
			return true, nil
		case l.session != session && !l.cur.none():
			old, earlier = *l, true
		case !l.cur.none():
			check = true
		}
		return false, nil
	})
	if err != nil || !check && !earlier {
		return err
	}
	var rec SequenceLease
	if reachable {
		ctx, cancel := context.WithTimeout(context.Background(), s.g.res.o.timeout)
		rec, err = s.reg.HostLease(ctx, s.name, s.g.name)
		cancel()
		if err != nil && !errors.Is(err, ErrRegistry) {
			return err
		}
		reachable = err == nil
	}
	if earlier {
		return s.adopt(old, rec, reachable)
	}
	if !reachable {
		s.log.Warn("snapid: registry unreachable; using this host's sequence lease file unchecked",
			"sequence", s.name, "err", err)
		return nil
	}
	return s.update(false, func(l *leaseRecord) (bool, error) {
		latest := l.latest()
		if !l.cur.none() && (rec.Session != session || rec.First != latest.first || rec.Last != latest.last) {
			s.log.Warn("snapid: the sequence lease file is not the host's lease the registry records (restored or copied?); its ranges are dropped (a gap)",
				"sequence", s.name, "file", latest, "registry_first", rec.First, "registry_last", rec.Last)
			l.void(session)
			return true, nil
		}
		return false, nil
	})
}

// adopt carries the lease file of an earlier claim of the host (old) over
// to this claim, if the registry's record rec shows that the host's last
// process closed cleanly with the file exactly as it is (the same latest
// range and position); otherwise the file's ranges are dropped (a gap).
func (s *Sequence) adopt(old leaseRecord, rec SequenceLease, reachable bool) error {
	session := s.g.res.session
	latest := old.latest()
	adopted := false
	if reachable && rec.Session == old.session && rec.First == latest.first && rec.Last == latest.last &&
		rec.ClosedAt != 0 && rec.ClosedAt == old.pos {
		ctx, cancel := context.WithTimeout(context.Background(), s.g.res.o.timeout)
		_, err := s.reg.AdoptLease(ctx, LeaseAdoption{Sequence: s.name, Name: s.g.name, Owner: s.g.res.host.owner, Session: session,
			OldSession: old.session, First: latest.first, Last: latest.last, Pos: old.pos})
		cancel()
		adopted = err == nil
		if err != nil {
			s.log.Warn("snapid: could not carry the host's sequence lease over; it is dropped (a gap)", "sequence", s.name, "err", err)
		}
	}
	return s.update(false, func(l *leaseRecord) (bool, error) {
		if adopted && l.session == old.session && l.cur == old.cur && l.ahead == old.ahead && l.pos == old.pos {
			l.session = session
			return true, nil
		}
		if l.session != session {
			s.log.Info("snapid: sequence lease file of an earlier claim of this host; its ranges are dropped (a gap)",
				"sequence", s.name, "cur", l.cur, "ahead", l.ahead)
			l.void(session)
			return true, nil
		}
		return false, nil
	})
}

// lockRefill takes the host's refill lock, waiting at most the registry
// timeout, and no longer than ctx allows: first the process's own (a flock
// is held per open file, so it does not keep the process's goroutines
// apart), then the host's.
func (s *Sequence) lockRefill(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.g.res.o.timeout)
	defer cancel()
	select {
	case s.refillSem <- struct{}{}:
	case <-ctx.Done():
		return &FileError{Op: "lock", Path: s.refill.Path(), Err: fmt.Errorf("waiting for another caller of this process to take the next lease: %w", contextError(ctx))}
	}
	ok, err := s.refill.TryLockContext(ctx, 2*time.Millisecond)
	if err == nil && !ok {
		err = ctx.Err()
	}
	if err != nil {
		<-s.refillSem
		return &FileError{Op: "lock", Path: s.refill.Path(), Err: fmt.Errorf("waiting for another process of this host to take the next lease: %w", err)}
	}
	return nil
}

// tryLockRefill takes the refill locks if no one holds them.
func (s *Sequence) tryLockRefill() (bool, error) {
	select {
	case s.refillSem <- struct{}{}:
	default:
		return false, nil
	}
	ok, err := s.refill.TryLock()
	if err != nil || !ok {
		<-s.refillSem
	}
	return ok, err
}

// unlockRefill lets the refill locks go.
func (s *Sequence) unlockRefill() {
	s.refill.Unlock()
	<-s.refillSem
}

// Blocks grow (doubling, up to the lease size) while they last less than
// fastBlock, so that a busy process is not held back by one fdatasync per
// block, and shrink back (halving, down to SequenceBlock) once they last
// longer than slowBlock, so that an idle one leaves small gaps.
const (
	fastBlock = 50 * time.Millisecond
	slowBlock = 2 * time.Second
)

// Leases grow likewise (up to maxLeaseGrowth times SequenceLeaseSize)
// while they last less than fastLease, and shrink back once they last
// longer than slowLease: a busy host does not wait for the registry, an
// idle one loses little when its claim changes.
const (
	fastLease      = time.Second
	slowLease      = time.Minute
	maxLeaseGrowth = 128
)

// nextLeaseSize returns the size of the next lease (see fastLease).
func (s *Sequence) nextLeaseSize() uint64 {
	now := time.Now().UnixNano()
	last := s.lastLease.Swap(now)
	size := s.leaseSize.Load()
	switch elapsed := time.Duration(now - last); {
	case last == 0:
	case elapsed < fastLease && size < s.o.lease*maxLeaseGrowth:
		size *= 2
	case elapsed > slowLease && size > s.o.lease:
		size = max(size/2, s.o.lease)
	}
	s.leaseSize.Store(size)
	return size
}

// nextBlockSize returns the size of the next block (see fastBlock).
func (s *Sequence) nextBlockSize() uint64 {
	now := time.Now().UnixNano()
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

// Next returns a new number of the sequence. It is safe for concurrent
// use. In steady state it takes the number from the process's block in
// memory (one atomic add); the next block is taken from the lease file in
// the background when half of the current one is used, and the host's
// next lease in the background when half of its lease is used. At the
// sequence's max it returns an error wrapping ErrExhausted, every time.
func (s *Sequence) Next() (uint64, error) {
	return s.NextContext(context.Background())
}

// NextContext is Next, but the caller waits at most as long as ctx allows:
// while the process's next block is taken (from the lease file, or with a
// lease from the registry), a caller whose context ends returns an error
// wrapping ctx.Err() (and its cause, if any) and the block goes on being
// taken for the others. An ended context takes nothing. It is safe for
// concurrent use.
func (s *Sequence) NextContext(ctx context.Context) (uint64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if err := contextError(ctx); err != nil {
		return 0, err
	}
	return s.alloc.next(ctx)
}

// NextN takes k consecutive numbers straight from the host's lease file
// (one locked, synced update) and returns the first: the numbers are
// first, first+1, …, first+k-1. k is at most the lease size
// (SequenceLeaseSize). If the host's current lease has fewer than k left,
// its rest is skipped (a gap). Fewer than k numbers left in the whole
// sequence is ErrExhausted. NextN takes no lease in advance: with a lease
// size of k, a process that calls it once (snapctl seq next) leases
// exactly what it hands out. It is safe for concurrent use.
func (s *Sequence) NextN(k uint64) (first uint64, err error) {
	return s.NextNContext(context.Background(), k)
}

// NextNContext is NextN, but the caller waits at most as long as ctx
// allows: for the lease file's lock, for another process of the host
// taking a lease, and for the registry. A caller whose context ends
// returns an error wrapping ctx.Err() (and its cause, if any), and its
// call takes nothing from the lease file afterwards (numbers taken in the
// instant its context ended are never handed out: a gap). An ended context
// takes nothing. It is safe for concurrent use.
func (s *Sequence) NextNContext(ctx context.Context, k uint64) (first uint64, err error) {
	if k == 0 || k > s.o.lease {
		return 0, fmt.Errorf("snapid: %w: NextN(%d): take 1 to %d numbers (the lease size)", ErrInvalidOption, k, s.o.lease)
	}
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if ctx.Done() == nil {
		first, _, err = s.take(ctx, k, k, false)
	} else {
		first, err = s.takeLeaving(ctx, k)
	}
	if err == nil {
		s.nextN.Add(k)
	}
	return first, err
}

// takeLeaving is take(ctx, k, k, false) in a goroutine the Sequence's
// Close waits for, so that the caller may leave when ctx ends, even while
// another process holds the lease file's lock.
func (s *Sequence) takeLeaving(ctx context.Context, k uint64) (uint64, error) {
	if err := contextError(ctx); err != nil {
		return 0, err
	}
	type result struct {
		first uint64
		err   error
	}
	done := make(chan result, 1)
	s.bgMu.Lock()
	if s.stopping {
		s.bgMu.Unlock()
		return 0, ErrClosed
	}
	s.wg.Add(1)
	s.bgMu.Unlock()
	go func() {
		defer s.wg.Done()
		first, _, err := s.take(ctx, k, k, false)
		done <- result{first, err}
	}()
	select {
	case r := <-done:
		return r.first, r.err
	case <-ctx.Done():
		select {
		case r := <-done: // both ready: the numbers were taken, hand them out
			return r.first, r.err
		default:
			return 0, contextError(ctx)
		}
	}
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
			if err := contextError(ctx); err != nil {
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fileClosed || s.g.closed.Load() {
		// A lease that finished after Close: not recorded, a gap. After
		// the Generator's Close, the host's last process may have recorded
		// where the file stands: nothing more is taken from it.
		return ErrClosed
	}
	return s.lf.c.withLock(func() error {
		l, err := s.lf.load()
		if err != nil {
			return err
		}
		before := l
		changed := false
		if bound && l.session != s.g.res.session {
			// Another claim of the host's name (a later start replaced
			// this host's session, or a copy): this file is not ours to
			// use any more unless this process's claim is the current
			// one, which only the registry can say; take nothing.
			if l.session != "" || !l.cur.none() {
				return fmt.Errorf("snapid: %w: sequence %q: the lease file is bound to another claim of %q (a later start of this host, or a copy of its state)",
					ErrNameTaken, s.name, s.g.name)
			}
			l.session, changed = s.g.res.session, true
		}
		// A position below what this process saw in the same range: the
		// file went backwards while in use (restored or copied over).
		if !l.cur.none() && l.cur == s.seen && l.pos < s.high {
			s.log.Error("snapid: the sequence lease file went backwards while in use (restored or copied over?); raising it",
				"sequence", s.name, "pos", l.pos, "to", s.high)
			l.pos = s.high
		}
		c, err := fn(&l)
		if err != nil {
			return err
		}
		changed = changed || c || l.cur != before.cur || l.ahead != before.ahead
		switch {
		case changed:
			err = s.lf.store(&l)
		case l.pos != before.pos:
			err = s.lf.storePos(l.pos)
		}
		if err != nil {
			return err
		}
		s.seen, s.high = l.cur, l.pos
		return nil
	})
}

// refillLease takes the host's next lease from the registry, if the file
// still needs one: for prefetch, when the current range is half used and
// there is no next one; otherwise, when the file has fewer than min
// numbers left. It holds the host's refill lock meanwhile, so that one
// process of the host leases at a time, but not the lease file's lock:
// other processes go on taking from the file. A prefetch gives up if
// another process is leasing.
func (s *Sequence) refillLease(ctx context.Context, min uint64, prefetch bool) error {
	if prefetch {
		ok, err := s.tryLockRefill()
		if err != nil || !ok {
			return err
		}
	} else if err := s.lockRefill(ctx); err != nil {
		return err
	}
	defer s.unlockRefill()
	var prev seqRange
	need := false
	err := s.withFile(func(l *leaseRecord) (bool, error) {
		if prefetch {
			need = l.ahead.none() && !l.cur.none() && l.left() < s.leaseSize.Load()/2
		} else {
			need = l.left() < min && l.ahead.none()
		}
		prev = l.latest()
		return false, nil
	})
	if err != nil || !need {
		return err
	}
	return s.lease(ctx, prev, min)
}

// lease takes the host's next lease from the registry and installs it in
// the file, whose latest range is prev; the caller holds the refill lock.
// The registry leases only if its record of this host's lease is prev
// (ErrLeaseMoved otherwise): then the file is older than the registry
// (restored or copied, or a process died between a lease and recording it)
// and its ranges are dropped, and the next lease is asked for against the
// registry's record.
func (s *Sequence) lease(ctx context.Context, prev seqRange, min uint64) error {
	inFile := prev // the file's latest range; prev is what the registry is shown
	for attempt := 0; attempt < 3; attempt++ {
		if errp := s.g.res.lost.Load(); errp != nil {
			return *errp
		}
		lctx, cancel := context.WithTimeout(ctx, s.g.res.o.timeout)
		got, err := s.reg.LeaseSequence(lctx, LeaseRequest{
			Sequence: s.name, Name: s.g.name, Owner: s.g.res.host.owner, Session: s.g.res.session,
			PrevFirst: prev.first, PrevLast: prev.last, Size: max(s.nextLeaseSize(), min), Min: min,
		})
		cancel()
		switch {
		case errors.Is(err, ErrLeaseMoved):
			recorded := seqRange{got.First, got.Last}
			s.log.Warn("snapid: the host's sequence lease in the registry is not the lease file's; dropping the file's ranges (a gap)",
				"sequence", s.name, "file", prev, "registry", recorded)
			err := s.withFile(func(l *leaseRecord) (bool, error) {
				if l.latest() == inFile {
					l.void(s.g.res.session)
				}
				inFile = l.latest()
				return true, nil
			})
			if err != nil {
				return err
			}
			prev = recorded
			continue
		case err != nil:
			if cerr := contextError(ctx); cerr != nil {
				return fmt.Errorf("snapid: sequence %q: %w: %w", s.name, cerr, err)
			}
			return fmt.Errorf("snapid: sequence %q: %w", s.name, err)
		}
		s.leases.Add(1)
		next := seqRange{got.First, got.Last}
		return s.withFile(func(l *leaseRecord) (bool, error) {
			switch {
			case l.latest() != inFile:
				// Cannot happen under the refill lock, short of a file
				// replaced by hand meanwhile: next stays unused (a gap).
				s.log.Warn("snapid: the sequence lease file changed while a lease was taken; the lease is left unused (a gap)",
					"sequence", s.name, "lease", next)
			case l.left() == 0:
				l.cur, l.ahead, l.pos = next, seqRange{}, next.first
			default:
				l.ahead = next
			}
			return true, nil
		})
	}
	return fmt.Errorf("snapid: %w: sequence %q: the host's lease in the registry kept moving", ErrRegistry, s.name)
}

// prefetch takes the host's next lease in the background, one at a time
// in this process.
func (s *Sequence) prefetch() {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.stopping || !s.prefetching.CompareAndSwap(false, true) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.prefetching.Store(false)
		err := s.refillLease(context.Background(), 1, true)
		if err != nil && !errors.Is(err, ErrExhausted) {
			s.log.Warn("snapid: could not take the host's next sequence lease in advance; numbers keep flowing from the current one",
				"sequence", s.name, "err", err)
		}
	}()
}

// Close stops the Sequence: background work ends, later calls return
// ErrClosed, and the lease file is closed. The rest of the process's block
// is not returned (a gap). It is idempotent.
func (s *Sequence) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.alloc.close()
	s.bgMu.Lock()
	s.stopping = true
	s.bgMu.Unlock()
	s.wg.Wait()
	s.g.removeSequence(s)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refill.Close()
	s.fileClosed = true
	return s.lf.c.close()
}
