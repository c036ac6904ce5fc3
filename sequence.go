package snapid

import (
	"context"

	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// Sequence hands out the numbers of a cluster-wide integer sequence (see
// admin.CreateSequence), from leases its host holds in the registry.
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
	s *engine.Sequence
	g *Generator // whose Sequences() list it
}

// Close stops the Sequence: background work ends, later calls return
// ErrClosed, and the lease file is closed, once raised to what this
// process saw of it. The rest of the process's block is not
// returned (a gap). It is idempotent.
func (s *Sequence) Close() error {
	err := s.s.Close()
	s.g.forget(s.s)
	return err
}

// Lease reads the host's lease file under its lock (it waits for an
// update in progress, and for any other holder of the lock no longer
// than the registry timeout: ErrLocked). It is safe for concurrent use;
// after Close it returns ErrClosed.
func (s *Sequence) Lease() (SequenceLeaseState, error) {
	return s.s.Lease()
}

// Name returns the sequence's name.
func (s *Sequence) Name() string {
	return s.s.Name()
}

// Next returns a new number of the sequence. It is safe for concurrent
// use. In steady state it takes the number from the process's block in
// memory (one atomic add); the next block is taken from the lease file in
// the background when half of the current one is used, and the host's
// next lease in the background when half of its lease is used. At the
// sequence's max it returns an error wrapping ErrExhausted, every time.
func (s *Sequence) Next() (uint64, error) {
	return s.s.Next()
}

// NextContext is Next, but the caller waits at most as long as ctx allows:
// while the process's next block is taken (from the lease file, or with a
// lease from the registry), a caller whose context ends returns an error
// wrapping ctx.Err() (and its cause, if any) and the block goes on being
// taken for the others. An ended context takes nothing. It is safe for
// concurrent use.
func (s *Sequence) NextContext(ctx context.Context) (uint64, error) {
	return s.s.NextContext(ctx)
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
	return s.s.NextN(k)
}

// NextNContext is NextN, but the caller waits at most as long as ctx
// allows: for the lease file's lock, for another process of the host
// taking a lease, and for the registry. A caller whose context ends
// returns an error wrapping ctx.Err() (and its cause, if any), and its
// call takes nothing from the lease file afterwards (numbers taken in the
// instant its context ended are never handed out: a gap). An ended context
// takes nothing. It is safe for concurrent use.
func (s *Sequence) NextNContext(ctx context.Context, k uint64) (first uint64, err error) {
	return s.s.NextNContext(ctx, k)
}

// Space asks the registry how much of the sequence is left to lease (see
// SequenceStatus.Space). It reads the sequence's whole status
// (SequenceRegistry.SequenceStatus): call it every minute or so, not per
// number. It is safe for concurrent use, and after Close.
func (s *Sequence) Space(ctx context.Context) (registry.SequenceSpace, error) {
	return s.s.Space(ctx)
}

// Stats returns the Sequence's counts. It is safe for concurrent use, and
// after Close.
func (s *Sequence) Stats() SequenceStats {
	return s.s.Stats()
}
