package snapid

import (
	"context"
	"sync"

	"github.com/snapid/snapid/internal/engine"
)

// Generator hands out ids "<name>-<number>" from one counter file.
//
// A Generator is safe for concurrent use by any number of goroutines, and
// any number of Generators, in this process and in others (Snap! servers
// included), may use the same counter file at once: every update of the
// file happens under an exclusive flock on the file itself.
//
// In strict mode (the default) numbers are issued host-wide in strictly
// increasing order, without gaps unless a process dies between reserving a
// number and returning it. Concurrent callers share counter updates (group
// commit): one lock, one write and, with sync on, one fdatasync serve every
// caller that arrived while the previous update was in progress.
//
// In block mode (Config.Block) numbers increase per Generator and are served
// from memory; see Config.Block.
type Generator struct {
	g *engine.Generator

	mu   sync.Mutex
	seqs map[*engine.Sequence]*Sequence // the open Sequences handed out: one pointer each
}

// AppendUniqueID appends a new id to dst and returns the extended buffer,
// as strconv.AppendUint does: with a dst of room enough it allocates
// nothing. On error dst is returned unchanged. It is safe for concurrent
// use.
func (g *Generator) AppendUniqueID(dst []byte) ([]byte, error) {
	return g.g.AppendUniqueID(dst)
}

// AppendUniqueIDContext is AppendUniqueID waiting at most as long as ctx
// allows (see UniqueIDContext).
func (g *Generator) AppendUniqueIDContext(ctx context.Context, dst []byte) ([]byte, error) {
	return g.g.AppendUniqueIDContext(ctx, dst)
}

// Close stops the Generator and closes the counter file. With a registry,
// the last process of the host to close sets the registry's reserved mark
// back to the counter's value, so that a clean restart leaves no gap; an
// error doing so is returned (the Generator is closed all the same). Calls after Close
// return ErrClosed; calls in progress finish or fail with ErrClosed. In
// block mode the unused rest of the current block is not returned to the
// file. The lease files of the Generator's Sequences still open are
// raised to what this process saw of them first (see Sequence.Close);
// the Sequences themselves stay open, and take nothing more from their
// files. Close is idempotent.
func (g *Generator) Close() error {
	return g.g.Close()
}

// Form returns the form of the ids the Generator hands out, and the node
// number and stride it uses (0 where the form needs none).
func (g *Generator) Form() (f Format, nodeNumber uint64, stride uint64) {
	return g.g.Form()
}

// Name returns the node name.
func (g *Generator) Name() string {
	return g.g.Name()
}

// Next returns a new number: the counter's, which every id form carries
// (in FormatDecimal never one ending in 0). Past the form's bound (its
// MaxID) it returns ErrExhausted. It is safe for concurrent use.
func (g *Generator) Next() (uint64, error) {
	return g.g.Next()
}

// NextContext is Next waiting at most as long as ctx allows (see
// UniqueIDContext). It is safe for concurrent use.
func (g *Generator) NextContext(ctx context.Context) (uint64, error) {
	return g.g.NextContext(ctx)
}

// NextID is UniqueID returning the parsed form.
func (g *Generator) NextID() (ID, error) {
	return g.g.NextID()
}

// NextIDContext is UniqueIDContext returning the parsed form.
func (g *Generator) NextIDContext(ctx context.Context) (ID, error) {
	return g.g.NextIDContext(ctx)
}

// NextIDs is NextIDsContext with context.Background.
func (g *Generator) NextIDs(n uint64, fn func(ID)) error {
	return g.g.NextIDs(n, fn)
}

// NextIDsContext reserves n ids of the Generator's form with one counter
// update, all of them or none, and calls fn with each, in order. In
// FormatDecimal the update takes as many counter numbers as hold n that
// do not end in 0. Ids that would pass the form's bound (its MaxID) are
// ErrExhausted, and nothing is taken: the error says how many are left.
// A caller whose ctx ends while the update waits for the counter's lock
// takes nothing (see NextNContext). It is safe for concurrent use; fn is
// called on the caller's goroutine.
func (g *Generator) NextIDsContext(ctx context.Context, n uint64, fn func(ID)) error {
	return g.g.NextIDsContext(ctx, n, fn)
}

// NextN reserves n consecutive numbers with one counter update and returns
// the first; the numbers are first, first+1, …, first+n-1. In block mode
// too, they come straight from the counter file. Numbers that would pass
// the form's bound (its MaxID) are ErrExhausted and nothing is taken (the
// error says how many are left). It is safe for concurrent use.
func (g *Generator) NextN(n uint64) (first uint64, err error) {
	return g.g.NextN(n)
}

// NextNContext is NextN waiting at most as long as ctx allows (see
// UniqueIDContext). A caller whose ctx ended while its update waited for
// the counter's lock (another process held it) takes nothing once the
// lock is free, unless callers that stayed share the update (their
// numbers are then a gap). It is safe for concurrent use.
func (g *Generator) NextNContext(ctx context.Context, n uint64) (first uint64, err error) {
	return g.g.NextNContext(ctx, n)
}

// Path returns the counter file's path.
func (g *Generator) Path() string {
	return g.g.Path()
}

// Reservation reads the counter and, with a registry, the host's mark,
// under the counter's lock (it waits for an update in progress). It is
// safe for concurrent use; after Close it returns ErrClosed.
func (g *Generator) Reservation() (ReservationStatus, error) {
	return g.g.Reservation()
}

// Sequence opens the sequence name for this Generator's host. The
// Generator must have a registry (Config.Registry) that implements
// SequenceRegistry (else ErrSequencesUnsupported), and the sequence must
// exist (ErrNoSequence; see admin.CreateSequence). It creates the lease file
// beside the counter if missing, and checks it against the registry's
// record of this host's lease: ranges leased under an earlier claim of the
// host are carried over if the file is exactly as the host's last process
// recorded it at a clean close, and dropped otherwise, as are ranges older
// than the registry's record (a restored or copied file); dropped numbers
// are never issued again. If the registry cannot be reached, a
// file of this host's current claim is used as it is, with a warning,
// and a sequence this host has no lease file of is refused (ErrRegistry),
// nothing created.
//
// Close the Sequence before its Generator.
//
// Sequence waits for the registry, and for the lease file's lock, at most
// the registry timeout (RegistryConfig.Timeout); see SequenceContext.
func (g *Generator) Sequence(name string, opts ...SequenceOption) (*Sequence, error) {
	r0, r1 := g.g.Sequence(name, opts...)
	if r0 == nil {
		return nil, r1
	}
	return g.seq(r0), r1
}

// SequenceContext is Sequence waiting at most as long as ctx allows, and
// never longer than the registry timeout: for the registry, and for the
// locks of the sequence's files beside the counter, which another process
// (another user's, if the files are readable to it) may hold. Past that,
// the error wraps ErrLocked and names the holder.
func (g *Generator) SequenceContext(ctx context.Context, name string, opts ...SequenceOption) (*Sequence, error) {
	r0, r1 := g.g.SequenceContext(ctx, name, opts...)
	if r0 == nil {
		return nil, r1
	}
	return g.seq(r0), r1
}

// SequenceTotals returns, for every sequence this Generator opened, the
// counts of its Sequences added up, the closed ones included (so that the
// counts never go down when one of two Sequences of a name closes), by
// name. It is safe for concurrent use.
func (g *Generator) SequenceTotals() []SequenceStats {
	return g.g.SequenceTotals()
}

// Sequences returns the Sequences of this Generator that are open, by
// name (a sequence opened twice appears twice). It is safe for concurrent
// use.
func (g *Generator) Sequences() []*Sequence {
	// The lock first: a Sequence handed out while the list is read is in
	// it (seq takes the lock after the engine listed it), and none is
	// dropped from g.seqs for being handed out after the list was read.
	g.mu.Lock()
	defer g.mu.Unlock()
	open := g.g.Sequences()
	seqs := make([]*Sequence, len(open))
	kept := make(map[*engine.Sequence]*Sequence, len(open))
	for i, s := range open {
		w := g.seqs[s]
		if w == nil {
			w = &Sequence{s: s, g: g}
		}
		kept[s], seqs[i] = w, w
	}
	g.seqs = kept // the closed ones go
	return seqs
}

// Stats returns what the Generator did since Open. It is safe for
// concurrent use, during and after Close.
func (g *Generator) Stats() Stats {
	return g.g.Stats()
}

// UniqueID returns a new id, "<name>-<number>" unless Config.Form chose
// another form. It is safe for concurrent use.
func (g *Generator) UniqueID() (string, error) {
	return g.g.UniqueID()
}

// UniqueIDContext is UniqueID waiting at most as long as ctx allows: when
// ctx ends first it returns ctx's error (errors.Is matches
// context.DeadlineExceeded or context.Canceled), and a number its update
// reserved for it is never handed out (a gap). The update itself goes on
// for the callers that share it. It is safe for concurrent use.
func (g *Generator) UniqueIDContext(ctx context.Context) (string, error) {
	return g.g.UniqueIDContext(ctx)
}

// UniqueUint64 returns a new striped id as an integer (number × stride +
// node number, see FormatStriped), allocating nothing. Other forms are not
// integers: ErrInvalidOption. It is safe for concurrent use.
func (g *Generator) UniqueUint64() (uint64, error) {
	return g.g.UniqueUint64()
}

// UniqueUint64Context is UniqueUint64 waiting at most as long as ctx
// allows (see UniqueIDContext).
func (g *Generator) UniqueUint64Context(ctx context.Context) (uint64, error) {
	return g.g.UniqueUint64Context(ctx)
}

// wrap gives the engine's Generator to the caller of Open.
func wrap(g *engine.Generator, err error) (*Generator, error) {
	if g == nil {
		return nil, err
	}
	return &Generator{g: g}, err
}

// seq is the Sequence handed out for s: the same pointer each time.
func (g *Generator) seq(s *engine.Sequence) *Sequence {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.seqs[s]
	if w == nil {
		if g.seqs == nil {
			g.seqs = map[*engine.Sequence]*Sequence{}
		}
		w = &Sequence{s: s, g: g}
		g.seqs[s] = w
	}
	return w
}

// forget drops the Sequence handed out for s, closed.
func (g *Generator) forget(s *engine.Sequence) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.seqs, s)
}
