package sequence

import (
	"log/slog"
	"time"

	"github.com/snapid/snapid/internal/clock"
)

// Host is what a Sequence needs of the Generator whose host it leases
// for: the host's claim of its name, the registry's timeouts and the
// Generator's clock, and whether the Generator is closed or lost its
// claim.
type Host struct {
	Node      string                          // the node name the host claimed
	Owner     string                          // the claim's owner token
	Session   string                          // the claim's session
	Timeout   time.Duration                   // the registry timeout: the longest wait for the registry, or for a lock another process holds
	RetryWait func(attempt int) time.Duration // the wait before a failed registry call is sent again; nil: the default backoff
	Clock     clock.Clock
	Log       *slog.Logger
	Closed    func() bool  // whether the Generator is closed
	Lost      func() error // why the host's claim was lost; nil while it holds
}
