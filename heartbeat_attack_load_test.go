package snapid_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/snapidtest"
	"github.com/stretchr/testify/assert"
)

// While Touch fails (an overloaded or unreachable registry), how many
// Touch calls does one host of P processes send per interval? The design
// brief: one per host per interval (it was one per process before).
func TestHeartbeatAttackTouchStormDuringOutage(t *testing.T) {
	const (
		interval = 10 * time.Second
		procs    = 8
	)
	reg := snapidtest.NewRegistry()
	fh := newFakeHost(t, nil)
	_, path := ctPath(t)
	for range procs {
		g := fh.open(path, "web_1", reg, WithHeartbeat(interval), WithCloneWindow(0))
		defer g.Close()
	}
	var touches atomic.Int64
	reg.SetHook(func(_ context.Context, op, _ string) error {
		if op == "touch" {
			touches.Add(1)
			return fmt.Errorf("%w: overloaded", ErrRegistry)
		}
		return nil
	})
	fh.run(20*interval, interval/4, nil)
	per := float64(touches.Load()) / 20
	t.Logf("%d processes: %.1f Touch calls per interval while the registry fails them", procs, per)
	assert.LessOrEqual(t, per, float64(procs), "the host sends more Touches during an outage than one per process per interval")
	// The holder backs off to one try per interval, and the others step
	// in only half an interval after the last try (a try that has not
	// come back by then may be a stopped holder's): at most two per
	// interval for the host, whatever its processes.
	assert.LessOrEqual(t, per, 2.2, "the host sends more than about two Touches per interval during an outage")
}
