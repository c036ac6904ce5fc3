package claim

import (
	"context"
	"log/slog"
	"time"

	"github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/registry"
)

// Options are a claim's settings (the engine's registry options).
type Options struct {
	Step        uint64        // the least numbers an extension reserves
	Horizon     time.Duration // the outage an extension's step covers at the recent rate
	Heartbeat   time.Duration // how often the host refreshes its last-seen
	Timeout     time.Duration // the longest wait for one registry call
	CloneWindow time.Duration // see Claim.CloneWindow
	Takeover    bool          // claim the name from another owner (Claim.Force)
	Floor       uint64        // the counter starts above it (Claim.Floor)
	Host        HostInfo      // this machine, as the registry records it
	HostSet     bool          // Host was given (else LocalHostInfo)
	Clock       clock.Clock
	RetryWait   func(attempt int) time.Duration // nil: retry's backoff
}

// Config is what Start needs: the registry, the name and the counter
// whose claim it is, and what the engine decides around the claim.
type Config struct {
	Registry registry.Registry
	Name     string
	Path     string      // the counter's path: the claim's files are beside it
	Files    FileOptions // how they are opened and made
	Options  Options
	Log      *slog.Logger
	// WithCounter runs fn on the counter under the Generator's file mutex
	// and the counter's lock, waiting for them no longer than ctx allows.
	WithCounter func(ctx context.Context, fn func(c Counter) error) error
	// Released is the name the host's records say was released with this
	// counter, "" if none: the claim may follow it (see
	// oneNamePerCounter).
	Released string
	// Precheck refuses, before the claim changes anything, a form the
	// host cannot use; Claimed, after the first process's claim h,
	// records what the name needs of it (its node number); Joined does
	// the same for a process joining the claim; Closing, for the host's
	// last process as it returns the reservation, records where the
	// host's sequence leases stand. Any may be nil.
	Precheck func(ctx context.Context) error
	Claimed  func(ctx context.Context, owner string, h registry.Holder) error
	Joined   func() error
	Closing  func(ctx context.Context, session string)
	// Unmake, for the host's first process whose claim was refused
	// before anything was claimed, called under the gate with no other
	// registry process of the host, removes what the engine made for
	// this Open (the counter, the host's record of the name) that no
	// program uses; the files beside the counter this Open made are
	// removed after it (Files.RemoveMade). May be nil.
	Unmake func(ctx context.Context)
}

// Counter is the counter file as the claim sees it, under its lock.
type Counter interface {
	Load() (uint64, error)
	Store(v uint64) error
	High() uint64 // the highest value this process read or wrote
	Path() string
}
