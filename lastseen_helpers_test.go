package snapid_test

import (
	"context"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// watchLastSeen moves the host's fake clock d forward in steps of
// by, and after each samples the row's last-seen age and tries a clone's
// claim (same owner token, another machine) with the clone window: it
// must be refused while the host runs. It returns the worst age seen and
// whether the clone's claim went through. stalled are processes whose
// refresh is stopped mid-call (step does not wait for them).
func watchLastSeen(t *testing.T, h *fakeHost, reg *registrytest.Registry, window, d, by time.Duration, stalled ...*Generator) (worst time.Duration, cloned bool) {
	t.Helper()
	row, ok := reg.Row("web_1")
	require.True(t, ok)
	owner := row.Owner
	cloned = h.run(d, by, func() bool {
		row, _ := reg.Row("web_1")
		worst = max(worst, h.clk.Since(row.LastSeen))
		if window == 0 {
			return false // only watch
		}
		_, err := reg.Claim(context.Background(), registry.Claim{Name: "web_1", Owner: owner, Hostname: "h2", MachineID: "m2", CloneWindow: window})
		return err == nil
	}, stalled...)
	return worst, cloned
}
