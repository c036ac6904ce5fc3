package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/gofrs/flock"
	"github.com/snapid/snapid/internal/alloc"
	"github.com/snapid/snapid/internal/counterfile"
	"github.com/snapid/snapid/internal/sequence"
	"github.com/snapid/snapid/registry"
)

// The sequences' client side (internal/sequence), under the names the
// Generator's callers use.
type (
	Sequence           = sequence.Sequence
	SequenceOption     = sequence.SequenceOption
	SequenceStats      = sequence.SequenceStats
	SequenceLeaseState = sequence.SequenceLeaseState
)

// Defaults and bounds of the SequenceOptions.
const (
	DefaultSequenceBlock = sequence.DefaultSequenceBlock
	DefaultSequenceLease = sequence.DefaultSequenceLease
	MaxSequenceLease     = sequence.MaxSequenceLease
)

// SequenceBlock and SequenceLeaseSize set a Sequence's block and lease
// sizes (see internal/sequence).
var (
	SequenceBlock     = sequence.SequenceBlock
	SequenceLeaseSize = sequence.SequenceLeaseSize
)

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
// file of this host's current claim is used as it is, with a warning,
// and a sequence this host has no lease file of is refused (ErrRegistry),
// nothing created; once the registry answered that the sequence exists,
// a lease file it then cannot check is refused, not used unchecked.
//
// Close the Sequence before its Generator.
//
// Sequence waits for the registry, and for the lease file's lock, at most
// the registry timeout (WithRegistryTimeout); see SequenceContext.
func (g *Generator) Sequence(name string, opts ...SequenceOption) (*Sequence, error) {
	return g.SequenceContext(context.Background(), name, opts...)
}

// SequenceContext is Sequence waiting at most as long as ctx allows, and
// never longer than the registry timeout: for the registry, and for the
// locks of the sequence's files beside the counter, which another process
// (another user's, if the files are readable to it) may hold. Past that,
// the error wraps ErrLocked and names the holder.
func (g *Generator) SequenceContext(ctx context.Context, name string, opts ...SequenceOption) (*Sequence, error) {
	if err := ValidateName(name); err != nil {
		return nil, fmt.Errorf("sequence name: %w", err)
	}
	o, err := sequence.NewOptions(opts...)
	if err != nil {
		return nil, err
	}
	if g.closed.Load() {
		return nil, ErrClosed
	}
	var reg registry.Registry
	if g.res != nil {
		reg = g.res.Registry()
	}
	sr, err := sequenceRegistry(reg)
	if err != nil {
		return nil, err
	}
	// The registry first: a sequence that does not exist is refused before
	// anything is created on disk.
	reachable := true
	ctx, cancel := g.clock.WithTimeout(ctx, g.res.Options().Timeout)
	defer cancel()
	if _, err := sr.HostLease(ctx, name, g.name); err != nil && !errors.Is(err, ErrRegistry) {
		return nil, err
	} else if err != nil {
		// Without the registry, only a lease file this host already has
		// tells that the sequence exists: none is made for a name the
		// registry could not confirm (a misspelt one stays off the disk).
		if _, serr := os.Lstat(leasePath(g.path, name)); errors.Is(serr, fs.ErrNotExist) {
			return nil, fmt.Errorf("sequence %q: the registry could not be reached to check that it exists, and this host has no lease file of it; nothing was created: %w", name, err)
		}
		reachable = false
	}
	fo := defaultOptions()
	fopt := g.file.Options()
	fo.followSymlinks, fo.sync, fo.io = fopt.Follow, fopt.Sync, fopt.IO
	fo.fs, fo.fileMode = g.res.Files().Options().FS, g.res.Files().Options().Mode
	if err := checkSequenceFiles(g.path, name, &fo); err != nil {
		return nil, err
	}
	// A caller gone by now (its context, or the registry timeout, ended
	// as the registry answered) leaves nothing made either.
	if err := alloc.ContextError(ctx); err != nil {
		return nil, fmt.Errorf("snapid: sequence %q: %w; nothing was created", name, err)
	}
	lf, err := openLeaseFile(ctx, g.path, name, g.name, g.res.Files().Owner(), &fo)
	if err != nil {
		return nil, err
	}
	refillPath := leasePath(g.path, name) + refillSuffix
	if err := counterfile.CreateBeside(fo.fs, refillPath, nil, fo.fileMode); err != nil {
		lf.Close()
		return nil, err
	}
	if err := counterfile.CheckBeside(refillPath, fo.followSymlinks); err != nil {
		lf.Close()
		return nil, err
	}
	refill := flock.New(refillPath, flock.SetFlag(openFlags(fo.followSymlinks)))
	s, err := sequence.Open(ctx, g.sequenceHost(), &g.seqs, sr, name, o, lf, refill, reachable)
	if err != nil {
		lf.Close()
		return nil, err
	}
	return s, nil
}

// SequenceTotals returns, for every sequence this Generator opened, the
// counts of its Sequences added up, the closed ones included (so that the
// counts never go down when one of two Sequences of a name closes), by
// name. It is safe for concurrent use.
func (g *Generator) SequenceTotals() []SequenceStats { return g.seqs.Totals() }

// Sequences returns the Sequences of this Generator that are open, by
// name (a sequence opened twice appears twice). It is safe for concurrent
// use.
func (g *Generator) Sequences() []*Sequence { return g.seqs.Open() }

// sequenceHost is what g's Sequences need of it.
func (g *Generator) sequenceHost() sequence.Host {
	r := g.res
	return sequence.Host{
		Node: g.name, Owner: r.Files().Owner(), Session: r.Session(),
		Timeout: r.Options().Timeout, RetryWait: r.Options().RetryWait,
		Clock: g.clock, Log: g.log,
		Closed: g.closed.Load,
		Lost:   r.Lost,
	}
}
