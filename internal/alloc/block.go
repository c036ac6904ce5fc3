package alloc

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/snapid/snapid/internal/errs"
)

// Block serves numbers from a block reserved in the counter file
// (or, for a Sequence, in its lease file), without locks: a caller takes a number with one atomic add. When half of
// the current block is used, the next block is reserved in the background,
// so that in steady state no caller waits for the disk. A caller that finds
// the block used up waits for the next one, at most as long as its context
// allows; the reservation goes on without it.
type Block struct {
	size    uint64
	reserve func(ctx context.Context, k uint64) (first, count uint64, err error) // count >= 1 (a Sequence sizes its own blocks)

	cur atomic.Pointer[block]

	mu     sync.Mutex
	ahead  *pendingBlock // the next block, reserved or being reserved
	closed bool
	wg     sync.WaitGroup
}

type block struct {
	next              atomic.Uint64 // the next number to hand out
	first, last, half uint64        // last is inclusive, so a block may end at 2^64-1
}

type pendingBlock struct {
	done         chan struct{}
	first, count uint64
	err          error
}

func NewBlock(size uint64, reserve func(context.Context, uint64) (first, count uint64, err error)) *Block {
	return &Block{size: size, reserve: reserve}
}

// Next returns a number. Numbers increase per allocator.
func (a *Block) Next(ctx context.Context) (uint64, error) {
	n, _, err := a.Take(ctx, 1)
	return n, err
}

// Take returns up to k consecutive numbers (first and how many, at least
// one), all from one block.
func (a *Block) Take(ctx context.Context, k uint64) (first, count uint64, err error) {
	for {
		b := a.cur.Load()
		if b != nil {
			// next may pass last (and even wrap past 2^64-1) when many
			// callers race at the end of a block: such numbers are outside
			// [first, last] and are never returned.
			n := b.next.Add(k) - k
			if n >= b.first && n <= b.last {
				if n <= b.half && b.half-n < k {
					a.prefetch() // this take holds the middle number
				}
				return n, min(k, b.last-n+1), nil
			}
		}
		if err := a.refill(ctx, b); err != nil {
			return 0, 0, err
		}
	}
}

// Shards serves numbers from small runs taken from a Block,
// one run per P (through sync.Pool, whose caches are per P), so that
// callers on different cores do not write the same cache line for every
// number. Numbers stay unique; they carry no order across runs. A run
// dropped by the pool (at a garbage collection) or left at Close is a gap.
type Shards struct {
	blocks *Block
	run    uint64
	pool   sync.Pool
}

type shardRun struct{ next, left uint64 }

func (c *Shards) Next(ctx context.Context) (uint64, error) {
	r, _ := c.pool.Get().(*shardRun)
	if r == nil {
		r = new(shardRun)
	}
	if r.left == 0 {
		first, count, err := c.blocks.Take(ctx, c.run)
		if err != nil {
			c.pool.Put(r)
			return 0, err
		}
		r.next, r.left = first, count
	}
	n := r.next
	r.next++
	r.left--
	c.pool.Put(r)
	return n, nil
}

// Busy reports whether a reservation of the next block is in progress.
func (a *Block) Busy() bool {
	a.mu.Lock()
	p := a.ahead
	a.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// prefetch starts reserving the next block unless that is already done.
func (a *Block) prefetch() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ahead == nil && !a.closed {
		a.start()
	}
}

// start reserves the next block in a goroutine; the caller holds mu.
func (a *Block) start() *pendingBlock {
	p := &pendingBlock{done: make(chan struct{})}
	a.ahead = p
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		p.first, p.count, p.err = a.reserve(context.Background(), a.size)
		close(p.done)
	}()
	return p
}

// refill replaces the used-up block old with the next one. It waits for
// the reservation ahead outside mu, so that callers whose context ends can
// leave. A reservation that failed before this caller asked for it (perhaps
// for a reason that has passed) is tried again, and that result reported.
func (a *Block) refill(ctx context.Context, old *block) error {
	retried := false
	for {
		a.mu.Lock()
		if a.cur.Load() != old {
			a.mu.Unlock()
			return nil // another caller refilled first
		}
		p := a.ahead
		if p == nil {
			if a.closed {
				a.mu.Unlock()
				return errs.ErrClosed
			}
			p = a.start()
			retried = true
		}
		a.mu.Unlock()
		if cancel := ctx.Done(); cancel != nil {
			select {
			case <-p.done:
			case <-cancel:
				return ContextError(ctx)
			}
		} else {
			<-p.done
		}
		a.mu.Lock()
		if a.cur.Load() != old || a.ahead != p {
			a.mu.Unlock()
			continue // another caller took p
		}
		a.ahead = nil
		if p.err != nil {
			a.mu.Unlock()
			if retried {
				return p.err
			}
			retried = true
			continue
		}
		nb := &block{first: p.first, last: p.first + (p.count - 1), half: p.first + p.count/2}
		nb.next.Store(p.first)
		a.cur.Store(nb)
		a.mu.Unlock()
		return nil
	}
}

// Close stops background reservations and waits for the one in flight.
func (a *Block) Close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.wg.Wait()
}

// Unused returns how many reserved numbers the allocator has not handed
// out: the rest of the current block and a block reserved ahead.
func (a *Block) Unused() uint64 {
	var n uint64
	if b := a.cur.Load(); b != nil {
		// next passes last, and may wrap past 2^64-1, when callers race at
		// the end of a block: then nothing is left.
		if next := b.next.Load(); next >= b.first && next <= b.last {
			n = b.last - next + 1
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.ahead; p != nil {
		select {
		case <-p.done:
			if p.err == nil {
				n += p.count
			}
		default:
		}
	}
	return n
}

// NewShards serves numbers from runs of run numbers taken from blocks.
func NewShards(blocks *Block, run uint64) *Shards { return &Shards{blocks: blocks, run: run} }

// Issued returns how many of the reserved numbers (those its fill took)
// b handed out: reserved minus b.Unused(), never less than it returned
// before (kept in high). It is approximate while a block is being
// installed.
func (b *Block) Issued(reserved uint64, high *atomic.Uint64) uint64 {
	issued := reserved - min(reserved, b.Unused())
	for {
		old := high.Load()
		if issued <= old {
			return old
		}
		if high.CompareAndSwap(old, issued) {
			return issued
		}
	}
}
