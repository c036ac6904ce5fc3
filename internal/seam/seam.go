// Package seam lets the simulator (internal/sim) reach the library's
// fault seams, which package internal/engine keeps unexported: the counter file's
// I/O, the file-system layer that creates and renames state files, the
// registry side's clock, and a crash that abandons a Generator as a
// killed process would.
//
// Package snapid fills the variables in at init; this package imports
// nothing of snapid (snapid imports it), so every value crossing it is
// typed any: an Option going out, a *Generator coming in. Only
// internal/sim and snapid's own tests may import it.
package seam

import (
	"os"
	"time"

	"github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/internal/statefile"
)

// FileIO is the counter and lease files' I/O: pread, pwrite and fsync.
type FileIO interface {
	ReadAt(f *os.File, b []byte, off int64) (int, error)
	WriteAt(f *os.File, b []byte, off int64) (int, error)
	Sync(f *os.File) error
}

var (
	// WithIO returns a snapid.Option replacing the counter and lease
	// files' I/O.
	WithIO func(FileIO) any
	// WithFS returns a snapid.Option replacing the file-system layer
	// (creating, linking, renaming, removing and syncing state files).
	WithFS func(statefile.FS) any
	// WithClock returns a snapid.Option replacing the Generator's clock:
	// every time it reads (heartbeats, clone windows, reservation rates,
	// block and lease sizes), every timer, ticker and sleep, every
	// context deadline it creates. Each Generator has its own, so each
	// simulated host may run its own clock.
	WithClock func(c clock.Clock) any
	// WithRetryWait returns a snapid.Option replacing the waits between
	// a start-up's retried registry calls.
	WithRetryWait func(wait func(attempt int) time.Duration) any
	// Crash abandons a *snapid.Generator as a killed process would: its
	// locks and descriptors go away, nothing is written and nothing is
	// returned to the registry.
	Crash func(g any) error
	// Settle waits until the *snapid.Generator has no background work
	// running (an extension, a block or lease reserved ahead, a group
	// commit finishing for callers that left), so that a simulator running one operation at a
	// time sees the same history on every run.
	Settle func(g any)
)
