package snapid

import (
	"sync"
	"sync/atomic"
)

// blockAllocator serves numbers from a block reserved in the counter file
// (or, for a Sequence, in its lease file), without locks: a caller takes a number with one atomic add. When half of
// the current block is used, the next block is reserved in the background,
// so that in steady state no caller waits for the disk.
type blockAllocator struct {
	size    uint64
	reserve func(k uint64) (first, count uint64, err error) // count >= 1 (a Sequence sizes its own blocks)

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

func newBlockAllocator(size uint64, reserve func(uint64) (first, count uint64, err error)) *blockAllocator {
	return &blockAllocator{size: size, reserve: reserve}
}

// next returns a number. Numbers increase per allocator.
func (a *blockAllocator) next() (uint64, error) {
	n, _, err := a.take(1)
	return n, err
}

// take returns up to k consecutive numbers (first and how many, at least
// one), all from one block.
func (a *blockAllocator) take(k uint64) (first, count uint64, err error) {
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
		if err := a.refill(b); err != nil {
			return 0, 0, err
		}
	}
}

// cpuShards serves numbers from small runs taken from a blockAllocator,
// one run per P (through sync.Pool, whose caches are per P), so that
// callers on different cores do not write the same cache line for every
// number. Numbers stay unique; they carry no order across runs. A run
// dropped by the pool (at a garbage collection) or left at Close is a gap.
type cpuShards struct {
	blocks *blockAllocator
	run    uint64
	pool   sync.Pool
}

type shardRun struct{ next, left uint64 }

func (c *cpuShards) next() (uint64, error) {
	r, _ := c.pool.Get().(*shardRun)
	if r == nil {
		r = new(shardRun)
	}
	if r.left == 0 {
		first, count, err := c.blocks.take(c.run)
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

// prefetch starts reserving the next block unless that is already done.
func (a *blockAllocator) prefetch() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ahead == nil && !a.closed {
		a.ahead = &pendingBlock{done: make(chan struct{})}
		a.wg.Add(1)
		go func(p *pendingBlock) {
			defer a.wg.Done()
			p.first, p.count, p.err = a.reserve(a.size)
			close(p.done)
		}(a.ahead)
	}
}

// refill replaces the used-up block old with the next one.
func (a *blockAllocator) refill(old *block) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur.Load() != old {
		return nil // another caller refilled first
	}
	var first, count uint64
	var err error
	if p := a.ahead; p != nil {
		a.ahead = nil
		<-p.done
		first, count, err = p.first, p.count, p.err
	}
	if err != nil || first == 0 {
		// No block ahead, or its reservation failed (perhaps for a
		// reason that has passed): reserve now and report that result.
		first, count, err = a.reserve(a.size)
		if err != nil {
			return err
		}
	}
	nb := &block{first: first, last: first + (count - 1), half: first + count/2}
	nb.next.Store(first)
	a.cur.Store(nb)
	return nil
}

// close stops background reservations and waits for the one in flight.
func (a *blockAllocator) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.wg.Wait()
}
