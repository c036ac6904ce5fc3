package snapid_test

import (
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Generator reads the time from its own clock only: on a fake clock set
// years from now, the registry statistics, the heartbeat's record and the
// refreshes follow the fake clock, and nothing moves while it stands
// still (no wall-clock timer, ticker or deadline drives it).
func TestGeneratorClockIsTheOnlyTime(t *testing.T) {
	const interval = 10 * time.Second
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, nil)
	_, path := ctPath(t)
	g := fh.open(path, "web_1", reg, WithHeartbeat(interval), WithCloneWindow(0), WithRegistryTimeout(time.Second))
	defer fh.close(g)
	calls := logCalls(reg)

	// Standing still for longer than the heartbeat and the registry
	// timeout of real time: no refresh.
	fh.settle()
	time.Sleep(2 * time.Second)
	assert.Zero(t, calls.count("touch"), "a refresh sent while the Generator's clock stood still")

	fh.until(interval/4, 8, func() bool { return calls.count("touch") > 0 }, "no refresh once the clock moved an interval")
	st := g.Stats()
	require.NotNil(t, st.Registry)
	for what, at := range map[string]time.Time{
		"last contact":     st.Registry.LastContact,
		"last heartbeat":   st.Registry.LastHeartbeat,
		"heartbeat record": g.ExportLastHostHeartbeat(),
	} {
		assert.False(t, at.Before(fakeStart) || at.After(fh.clk.Now()), "%s at %v: not on the Generator's clock (%v to %v)", what, at, fakeStart, fh.clk.Now())
	}
}
