package sequence

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/gofrs/flock"
	"github.com/snapid/snapid/internal/alloc"
	"github.com/snapid/snapid/internal/ctxsync"
	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/internal/leasefile"
	"github.com/snapid/snapid/registry"
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
type SequenceOption func(*Options) error

// Options are a Sequence's settings, as its SequenceOptions made them.
type Options struct {
	block, lease uint64
}

// NewOptions returns the settings opts make, from the defaults; an
// option given a value that means nothing is refused (ErrInvalidOption).
func NewOptions(opts ...SequenceOption) (Options, error) {
	o := Options{block: DefaultSequenceBlock, lease: DefaultSequenceLease}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return Options{}, err
		}
	}
	return o, nil
}

// SequenceBlock sets how many numbers the process takes from the host's
// lease file at a time (default DefaultSequenceBlock): one flock, one
// 8-byte write and one fdatasync per block. A busy process takes larger
// blocks, up to the lease size (see nextBlockSize). A process that exits
// leaves the rest of its block unused (a gap).
func SequenceBlock(n uint64) SequenceOption {
	return func(o *Options) error {
		if n == 0 {
			return fmt.Errorf("snapid: %w: SequenceBlock(0): a block holds at least 1 number", errs.ErrInvalidOption)
		}
		o.block = n
		return nil
	}
}

// MaxSequenceLease is the largest SequenceLeaseSize: 128 times it (the
// most a lease grows to) is at most 2^63-1, the largest lease a registry
// stores.
const MaxSequenceLease = registry.MaxSequence / maxLeaseGrowth

// SequenceLeaseSize sets how many numbers the host leases from its data
// centre at a time (default DefaultSequenceLease). The rest of a lease is
// lost (a gap) when the host restarts after a crash; a clean restart
// carries it over. n is at most MaxSequenceLease: leases grow to 128×n
// while the host leases fast, and a lease is at most 2^63-1 numbers.
func SequenceLeaseSize(n uint64) SequenceOption {
	return func(o *Options) error {
		if n == 0 {
			return fmt.Errorf("snapid: %w: SequenceLeaseSize(0): a lease holds at least 1 number", errs.ErrInvalidOption)
		}
		if n > MaxSequenceLease {
			return fmt.Errorf("snapid: %w: SequenceLeaseSize(%d): at most %d (leases grow to %d times it, and hold at most 2^63-1 numbers)",
				errs.ErrInvalidOption, n, MaxSequenceLease, maxLeaseGrowth)
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
	h      Host
	set    *Set
	name   string
	reg    registry.SequenceRegistry
	o      Options
	log    *slog.Logger
	alloc  *alloc.Block
	closed atomic.Bool

	mu         ctxsync.Mutex // guards lf and the fields below (the flock is per open file, not per goroutine)
	lf         *leasefile.File
	fileClosed bool
	seen       leasefile.Range // the current range this process last saw, for the roll-back check
	high       uint64          // the highest position this process saw in seen
	seenAhead  leasefile.Range // the lease taken in advance this process last saw
	past       pastRanges      // earlier ranges this process saw as current
	seenGen    uint64          // the generation of the lease file this process last saw
	seenSess   string          // the session of the lease file this process last saw

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
	// stopCtx ends, at Close and Generator.Close (its cause then
	// ErrClosed), the Sequence's background work and every wait of its
	// takes (see working): for the lease file's lock, the refill lock,
	// the registry, and the pauses between its tries.
	stopCtx context.Context
	stop    func()
}

// Name returns the sequence's name.
func (s *Sequence) Name() string { return s.name }

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
		return 0, errs.ErrClosed
	}
	if err := alloc.ContextError(ctx); err != nil {
		return 0, err
	}
	return s.alloc.Next(ctx)
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
		return 0, fmt.Errorf("snapid: %w: NextN(%d): take 1 to %d numbers (the lease size)", errs.ErrInvalidOption, k, s.o.lease)
	}
	if s.closed.Load() {
		return 0, errs.ErrClosed
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
	if err := alloc.ContextError(ctx); err != nil {
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
		return 0, errs.ErrClosed
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
			return 0, alloc.ContextError(ctx)
		}
	}
}

// Close stops the Sequence: background work ends, later calls return
// ErrClosed, and the lease file is closed, once raised to what this
// process saw of it (see settle). The rest of the process's block is not
// returned (a gap). It is idempotent.
func (s *Sequence) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.stop()
	s.alloc.Close()
	s.bgMu.Lock()
	s.stopping = true
	s.bgMu.Unlock()
	s.wg.Wait()
	s.settle()
	s.set.remove(s)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refill.Close()
	s.fileClosed = true
	return s.lf.Close()
}

// Open returns the Sequence name of h over the lease file lf (open, under
// its lock's rules) and refill, the flock of the host's refill lock
// beside it, once it checked the file against the registry's record of
// the host's lease (verify; reachable is false if the registry could not
// be reached to confirm that the sequence exists). The Sequence is added
// to set until it closes. On an error, lf is left open for the caller to
// close.
func Open(ctx context.Context, h Host, set *Set, reg registry.SequenceRegistry, name string, o Options, lf *leasefile.File, refill *flock.Flock, reachable bool) (*Sequence, error) {
	s := &Sequence{h: h, set: set, name: name, reg: reg, o: o, log: h.Log, lf: lf,
		refill: refill, refillSem: make(chan struct{}, 1)}
	stopCtx, stop := context.WithCancelCause(context.Background())
	s.stopCtx, s.stop = stopCtx, func() { stop(errs.ErrClosed) }
	if err := s.verify(ctx, reachable); err != nil {
		s.stop()
		return nil, err
	}
	s.blockSize.Store(o.block)
	s.leaseSize.Store(o.lease)
	s.alloc = alloc.NewBlock(o.block, func(ctx context.Context, _ uint64) (uint64, uint64, error) {
		first, count, err := s.take(ctx, s.nextBlockSize(), 1, true)
		s.blockTaken.Add(count)
		return first, count, err
	})
	set.add(s)
	return s, nil
}

// Busy reports whether the Sequence is taking a lease or a block in the
// background.
func (s *Sequence) Busy() bool { return s.prefetching.Load() || s.alloc.Busy() }
