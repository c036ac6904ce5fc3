package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"

	"github.com/snapid/snapid/internal/alloc"
	"github.com/snapid/snapid/internal/claim"
	"github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/internal/ctxsync"
	"github.com/snapid/snapid/internal/idform"
	"github.com/snapid/snapid/internal/sequence"
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
// In block mode (WithBlock) numbers increase per Generator and are served
// from memory; see WithBlock.
type Generator struct {
	host   *hostRecord // the host's record of the name
	name   string
	path   string
	log    *slog.Logger
	gc     *alloc.GroupCommit
	block  *alloc.Block       // nil in strict mode
	shards *alloc.Shards      // nil unless WithCPUShards in block mode
	res    *claim.Reservation // nil without a registry
	nums   *numberClaim       // the name's node number and the cluster's stride (with a registry)
	form   idform.Form        // the ids' form (set at Open, then read-only)

	mu         ctxsync.Mutex // guards file, fileClosed and the file operations
	file       *counterFile
	fileClosed bool
	closed     atomic.Bool

	stats *genStats
	clock clock.Clock // every time it reads, waits for or sets as a deadline (options.clock)

	seqs sequence.Set // the open Sequences, and the counts of those closed
}

// Open opens the counter file at counterPath for the node name, creating
// the file (last issued number 0, so the first id is "<name>-1") if it does
// not exist.
//
// Open validates everything before it issues anything: the name (see
// ValidateName), the options, the file (exactly 8 bytes, a regular file, not
// a symbolic link unless WithFollowSymlinks), and the host's record of the
// name, which every Open keeps, with a registry or without: a name the host
// issued from another counter is refused (ErrNameBound), as is a counter
// below the floor the record keeps (ErrRolledBack; with a registry it is
// raised instead). A damaged state file is ErrCorrupt in a FileError naming
// it. A failed Open leaves the counter and the record as they were: what
// a first Open the registry refuses made (the counter, the record, the
// files beside the counter) is removed, unless another program of the host
// uses it meanwhile. With a registry, a failure after the claim was made
// (or may have been) leaves the counter this call created and the files
// beside it: the registry's row may name them.
//
// With WithRegistry, Open also claims the name in the registry before it
// returns (see OpenContext), giving the claim the registry timeout; the
// registry refuses a second counter file under the name (ErrNameTaken).
func Open(counterPath, name string, opts ...Option) (*Generator, error) {
	return OpenContext(context.Background(), counterPath, name, opts...)
}

// OpenContext is Open with a context for the registry claim. With
// WithRegistry it claims the name in the registry before it returns: another
// owner's active claim is ErrNameTaken and the Generator is not returned;
// the first process of the host raises the counter to the registry's
// reserved mark and reserves the first step. The other processes of the
// host join its claim; one under another name than the claim's is refused
// with ErrNameMismatch, whether the registry can be reached or not. Only
// the claim uses ctx.
func OpenContext(ctx context.Context, counterPath, name string, opts ...Option) (*Generator, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := o.refuseOwner("Open"); err != nil {
		return nil, err
	}
	if counterPath == "" {
		return nil, &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf("%w: empty counter path", ErrInvalidOption)}
	}
	if o.reg.numbers == nil {
		if err := useRecordedNumber(ctx, counterPath, name, &o); err != nil {
			return nil, err
		}
	}
	form, err := standaloneForm(&o)
	if err != nil {
		return nil, err
	}
	// Lock files beside the counter are opened by path for every lock:
	// an absolute path keeps them right if the program changes directory.
	if counterPath, err = filepath.Abs(counterPath); err != nil {
		return nil, &FileError{Op: "open", Path: counterPath, Err: err}
	}
	if err := checkRecordsBeside(counterPath, &o); err != nil {
		return nil, err
	}
	if o.reg.registry != nil {
		// Before anything is created or written, on disk or in the
		// registry.
		if err := checkHostFiles(counterPath, &o); err != nil {
			return nil, err
		}
		if err := precheckBeforeHostFiles(ctx, counterPath, name, &o); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("snapid: open %s: the context ended before the name could be claimed: %w", counterPath, err)
		}
	}
	var file *counterFile
	openFile := func() (err error) {
		file, err = openCounter(ctx, counterPath, &o)
		return err
	}
	// Every path keeps the host's record of the name (see
	// DefaultBindingDir): judged before the counter is created, so that a
	// refused name changes nothing. Without a registry it records the
	// form too (see formhistory.go); with one, once the claim gave the
	// node number.
	hr, err := withRecord(ctx, name, counterPath, form, &o, openFile, func() *counterFile { return file })
	if err != nil {
		if file != nil {
			file.Close() // opened, then the record refused it
		}
		return nil, err
	}
	g := &Generator{name: name, path: counterPath, log: o.logger, file: file, stats: newGenStats(), form: form, clock: o.clock}
	g.host = hr
	if o.reg.registry == nil {
		hr.watchForm(form)
	}
	fail := func() {
		_ = hr.close(file) // as a clean close: the name's record left as found
		file.Close()
	}
	if o.reg.registry != nil {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = o.clock.WithTimeout(ctx, o.reg.timeout)
			defer cancel()
		}
		g.res, g.nums, err = startClaim(ctx, counterPath, name, &o, hr, g.withFile)
		if err != nil {
			fail()
			return nil, err
		}
		g.form, err = numberedForm(&o, g.nums)
		if err == nil {
			err = hr.useRegistryForm(ctx, file, g.form, g.nums.number, &o)
		}
		if err != nil {
			// As Close: leave the host's presence, then close the files
			// beside the counter.
			_ = g.res.Close()
			g.res.Files().Close()
			fail()
			return nil, err
		}
	}
	file.host = hr
	g.file.form = &g.form
	g.gc = alloc.NewGroupCommit(g.flush)
	if o.block > 0 {
		g.block = alloc.NewBlock(o.block, func(ctx context.Context, k uint64) (uint64, uint64, error) {
			first, err := g.gc.Reserve(ctx, k)
			if errors.Is(err, ErrExhausted) && k > 1 {
				// A block that does not fit below the form's bound takes
				// nothing: what is left is served one number at a time.
				k = 1
				first, err = g.gc.Reserve(ctx, k)
			}
			return first, k, err
		})
		if o.cpuShards {
			g.shards = alloc.NewShards(g.block, max(1, min(256, o.block/16)))
		}
	}
	return g, nil
}

// Name returns the node name.
func (g *Generator) Name() string { return g.name }

// Path returns the counter file's path.
func (g *Generator) Path() string { return g.path }

// UniqueID returns a new id, "<name>-<number>" unless WithFormat chose
// another form. It is safe for concurrent use.
func (g *Generator) UniqueID() (string, error) {
	return g.UniqueIDContext(context.Background())
}

// UniqueIDContext is UniqueID waiting at most as long as ctx allows: when
// ctx ends first it returns ctx's error (errors.Is matches
// context.DeadlineExceeded or context.Canceled), and a number its update
// reserved for it is never handed out (a gap). The update itself goes on
// for the callers that share it. It is safe for concurrent use.
func (g *Generator) UniqueIDContext(ctx context.Context) (string, error) {
	var buf [MaxNameLen + 1 + 20]byte
	b, err := g.AppendUniqueIDContext(ctx, buf[:0])
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// AppendUniqueID appends a new id to dst and returns the extended buffer,
// as strconv.AppendUint does: with a dst of room enough it allocates
// nothing. On error dst is returned unchanged. It is safe for concurrent
// use.
func (g *Generator) AppendUniqueID(dst []byte) ([]byte, error) {
	return g.AppendUniqueIDContext(context.Background(), dst)
}

// AppendUniqueIDContext is AppendUniqueID waiting at most as long as ctx
// allows (see UniqueIDContext).
func (g *Generator) AppendUniqueIDContext(ctx context.Context, dst []byte) ([]byte, error) {
	n, err := g.NextContext(ctx)
	if err != nil {
		return dst, err
	}
	return g.form.AppendID(dst, g.name, n), nil
}

// UniqueUint64 returns a new striped id as an integer (number × stride +
// node number, see FormatStriped), allocating nothing. Other forms are not
// integers: ErrInvalidOption. It is safe for concurrent use.
func (g *Generator) UniqueUint64() (uint64, error) {
	return g.UniqueUint64Context(context.Background())
}

// UniqueUint64Context is UniqueUint64 waiting at most as long as ctx
// allows (see UniqueIDContext).
func (g *Generator) UniqueUint64Context(ctx context.Context) (uint64, error) {
	if g.form.Format != FormatStriped {
		return 0, fmt.Errorf("snapid: %w: UniqueUint64: the %s form is not an integer", ErrInvalidOption, g.form.Format)
	}
	n, err := g.NextContext(ctx)
	if err != nil {
		return 0, err
	}
	return n*g.form.Stride + g.form.Node, nil
}

// NextID is UniqueID returning the parsed form.
func (g *Generator) NextID() (ID, error) {
	return g.NextIDContext(context.Background())
}

// NextIDContext is UniqueIDContext returning the parsed form.
func (g *Generator) NextIDContext(ctx context.Context) (ID, error) {
	n, err := g.NextContext(ctx)
	if err != nil {
		return ID{}, err
	}
	return g.form.ID(g.name, n), nil
}

// Form returns the form of the ids the Generator hands out, and the node
// number and stride it uses (0 where the form needs none).
func (g *Generator) Form() (f Format, nodeNumber, stride uint64) {
	return g.form.Format, g.form.Node, g.form.Stride
}

// Next returns a new number: the counter's, which every id form carries
// (in FormatDecimal never one ending in 0). Past the form's bound (see
// WithMaxID) it returns ErrExhausted. It is safe for concurrent use.
func (g *Generator) Next() (uint64, error) {
	return g.NextContext(context.Background())
}

// NextContext is Next waiting at most as long as ctx allows (see
// UniqueIDContext). It is safe for concurrent use.
func (g *Generator) NextContext(ctx context.Context) (uint64, error) {
	for {
		n, err := g.next(ctx)
		switch {
		case err != nil:
			return 0, err
		case n > g.form.Limit:
			return 0, g.form.Exhausted(n)
		case !g.form.Skip(n):
			return n, nil
		}
	}
}

// next takes one number from the counter, whatever the form.
func (g *Generator) next(ctx context.Context) (uint64, error) {
	if g.closed.Load() {
		return 0, ErrClosed
	}
	if g.res != nil {
		// The name was taken (the registry said so, to this process or,
		// through the heartbeat record, to another of the host): no more
		// ids, not even from a block taken from the counter before.
		if err := g.res.Lost(); err != nil {
			return 0, err
		}
	}
	if ctx.Done() != nil {
		if err := alloc.ContextError(ctx); err != nil {
			return 0, err // an ended context reserves nothing
		}
	}
	switch {
	case g.shards != nil:
		return g.shards.Next(ctx)
	case g.block != nil:
		return g.block.Next(ctx)
	}
	return g.gc.Reserve(ctx, 1)
}

// NextN reserves n consecutive numbers with one counter update and returns
// the first; the numbers are first, first+1, …, first+n-1. In block mode
// too, they come straight from the counter file. Numbers that would pass
// the form's bound (WithMaxID) are ErrExhausted and nothing is taken (the
// error says how many are left). It is safe for concurrent use.
func (g *Generator) NextN(n uint64) (first uint64, err error) {
	return g.NextNContext(context.Background(), n)
}

// NextNContext is NextN waiting at most as long as ctx allows (see
// UniqueIDContext). A caller whose ctx ended while its update waited for
// the counter's lock (another process held it) takes nothing once the
// lock is free, unless callers that stayed share the update (their
// numbers are then a gap). It is safe for concurrent use.
func (g *Generator) NextNContext(ctx context.Context, n uint64) (first uint64, err error) {
	if n == 0 {
		return 0, fmt.Errorf("snapid: %w: NextN(0): reserve at least 1 number", ErrInvalidOption)
	}
	if g.form.Format == FormatDecimal {
		return 0, fmt.Errorf("snapid: %w: NextN: the decimal form skips numbers ending in 0, so it hands out numbers one at a time (Next, UniqueID)", ErrInvalidOption)
	}
	if g.closed.Load() {
		return 0, ErrClosed
	}
	first, err = g.gc.Reserve(ctx, n)
	if err == nil && (first > g.form.Limit || n-1 > g.form.Limit-first) {
		// Never: the update refuses numbers past the bound.
		return 0, g.form.Exhausted(first + min(n-1, MaxNumber-first))
	}
	return first, err
}

// NextIDs is NextIDsContext with context.Background.
func (g *Generator) NextIDs(n uint64, fn func(ID)) error {
	return g.NextIDsContext(context.Background(), n, fn)
}

// NextIDsContext reserves n ids of the Generator's form with one counter
// update, all of them or none, and calls fn with each, in order. In
// FormatDecimal the update takes as many counter numbers as hold n that
// do not end in 0. Ids that would pass the form's bound (WithMaxID) are
// ErrExhausted, and nothing is taken: the error says how many are left.
// A caller whose ctx ends while the update waits for the counter's lock
// takes nothing (see NextNContext). It is safe for concurrent use; fn is
// called on the caller's goroutine.
func (g *Generator) NextIDsContext(ctx context.Context, n uint64, fn func(ID)) error {
	if n == 0 {
		return fmt.Errorf("snapid: %w: NextIDs(0): reserve at least 1 id", ErrInvalidOption)
	}
	if g.closed.Load() {
		return ErrClosed
	}
	if g.form.Format != FormatDecimal {
		first, err := g.NextNContext(ctx, n)
		if err != nil {
			return err
		}
		for i := range n {
			fn(g.form.ID(g.name, first+i))
		}
		return nil
	}
	if err := alloc.ContextError(ctx); err != nil {
		return err // an ended context reserves nothing
	}
	first, err := g.take(ctx, n, true, func() bool { return ctx.Err() != nil })
	if errors.Is(err, alloc.ErrCallersLeft) {
		err = alloc.ContextError(ctx)
	}
	if err != nil {
		return err
	}
	for v := first; n > 0; v++ {
		if !g.form.Skip(v) {
			fn(g.form.ID(g.name, v))
			n--
		}
	}
	return nil
}

// flush is the group-commit leader's counter update. With a registry, a
// number above the reserved mark makes it extend the mark synchronously
// and try again; if that fails, nothing is issued. An extension that
// succeeded but did not suffice means other processes of the host used
// the new room first (progress for the host): it tries again for as long
// as the registry timeout allows, counted from the first wait, so that a
// process that keeps losing the counter's lock to busier ones is not
// failed while the registry answers.
func (g *Generator) flush(k uint64, gone func() bool) (uint64, error) {
	return g.take(context.Background(), k, false, gone)
}

// take is flush for k numbers or, with decimal, k ids of the decimal
// form (see counterFile.advance). A take for one caller (the decimal
// form's NextIDsContext; the group commit's leader takes for many, with
// context.Background) stops when the caller's context ends: its wait for
// the file mutex (an update in flight may hold it for as long as another
// process holds the counter's lock) and a synchronous extension, which it
// asks for itself, end with ErrCallersLeft.
func (g *Generator) take(caller context.Context, k uint64, decimal bool, gone func() bool) (uint64, error) {
	var within context.Context // ends a registry timeout after the first wait
	for {
		first, err := g.advance(caller.Done(), k, decimal, gone)
		if err == nil {
			return first, nil
		}
		var need *claim.NeedMarkError
		if !errors.As(err, &need) {
			return first, err
		}
		if within == nil {
			var cancel context.CancelFunc
			within, cancel = g.clock.WithTimeout(context.Background(), g.res.Options().Timeout)
			defer cancel()
		} else if within.Err() != nil {
			return first, err
		}
		ctx, cancel := g.clock.WithTimeout(g.res.Context(), g.res.Options().Timeout)
		stop := context.AfterFunc(caller, cancel)
		err = g.res.Extend(ctx, need.Next)
		stop()
		cancel()
		if errors.Is(err, ErrClosed) {
			return 0, err
		}
		if caller.Err() != nil {
			return 0, alloc.ErrCallersLeft
		}
		if err != nil {
			return 0, fmt.Errorf("snapid: %w (%d issued, %d reserved): %w", ErrReservationExhausted, need.Next-k, need.Mark, err)
		}
	}
}

func (g *Generator) advance(done <-chan struct{}, k uint64, decimal bool, gone func() bool) (uint64, error) {
	if !g.mu.LockOrDone(done) {
		return 0, alloc.ErrCallersLeft
	}
	defer g.mu.Unlock()
	if g.closed.Load() {
		return 0, ErrClosed
	}
	var hook advanceHook
	if g.res != nil {
		hook = g.res
	}
	start := g.clock.Now()
	first, err := g.file.advance(k, decimal, hook, gone, g.closed.Load)
	taken := k
	if decimal && err == nil {
		taken, _ = idform.DecimalSpan(first-1, k) // the numbers ending in 0 are taken too
	}
	g.stats.updated(taken, g.clock.Since(start), err)
	if err != nil {
		return 0, err
	}
	return first, nil
}

// withFile runs fn on the counter file under the file mutex, for the
// registry's work, waiting for the mutex and the file's lock no longer
// than ctx allows (another call may hold the mutex while it waits for
// another process's lock on the counter).
func (g *Generator) withFile(ctx context.Context, fn func(c *counterFile) error) error {
	if !g.mu.LockOrDone(ctx.Done()) {
		return fmt.Errorf("waiting for this process's update of the counter in progress: %w", alloc.ContextError(ctx))
	}
	defer g.mu.Unlock()
	if g.fileClosed {
		return ErrClosed
	}
	return g.file.WithLockContext(ctx, func() error { return fn(g.file) })
}

// withFileUnless is withFile waiting for the counter's lock only until
// stop returns an error (see counterfile.File.LockUnless): a wait that
// holds g.mu must end when Close is called, which takes g.mu.
func (g *Generator) withFileUnless(stop func() error, fn func(c *counterFile) error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fileClosed {
		return ErrClosed
	}
	if err := g.file.LockUnless(stop); err != nil {
		return err
	}
	defer g.file.Unlock()
	return fn(g.file)
}

// stopped is ErrClosed once Close was called.
func (g *Generator) stopped() error {
	if g.closed.Load() {
		return ErrClosed
	}
	return nil
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
	if g.closed.Load() {
		return nil
	}
	g.seqs.Settle()
	if g.closed.Swap(true) {
		return nil
	}
	if g.block != nil {
		g.block.Close()
	}
	// Wait for the counter update in progress, if any: it returns its
	// numbers (every later one sees closed and returns ErrClosed). Only then
	// may this process leave the host's presence: the last process sets the
	// registry's mark back to the counter, which must cover every number
	// issued, and the files beside the counter may be closed.
	g.mu.Lock()
	//lint:ignore SA2001 an empty critical section is the barrier
	g.mu.Unlock()
	var err error
	if g.res != nil {
		err = g.res.Close()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	// A late synchronous extension must not touch the descriptors: it
	// finds fileClosed and returns ErrClosed.
	g.fileClosed = true
	if g.res != nil {
		g.res.Files().Close()
	}
	if herr := g.host.close(g.file); err == nil {
		err = herr
	}
	if cerr := g.file.Close(); err == nil {
		err = cerr
	}
	return err
}

// absPath makes path absolute (relative to the working directory), so
// that the checks of the directories leading to it (which walk from /)
// and every later open name one and the same file. A path that cannot be
// made absolute is returned as it is; opening it fails.
func absPath(path string) string {
	if path == "" {
		return path
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}
