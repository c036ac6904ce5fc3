package snapid_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
)

// A start-up storm's transient failure of one of the other registry calls
// a first start makes (the name's row for its node number, the cluster's
// stride) is sent again within the caller's 10 s: Open succeeds.
func TestStartUpCallsRetried(t *testing.T) {
	for _, op := range []string{"get", "stride"} {
		t.Run(op, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			var failed atomic.Bool
			reg.SetHook(func(_ context.Context, o, _ string) error {
				if o == op && failed.CompareAndSwap(false, true) {
					return fmt.Errorf("%w: contention: operation timed out (test)", ErrRegistry)
				}
				return nil
			})
			_, path := ctPath(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			g, err := OpenContext(ctx, path, "web_1", WithRegistry(reg), WithSync(false), WithCloneWindow(0),
				WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}), WithFormat(FormatStriped), WithStride(100))
			if err == nil {
				g.Close()
			}
			assert.NoError(t, err, "one transient %s failure failed Open after %v with %v left", op, time.Since(start), time.Until(start.Add(10*time.Second)))
		})
	}
}

// The registry answers a definite condition ("the registry's mark is
// below this host's") wrapped in ErrRegistry only: the first extension is
// not sent again.
func TestStartUpDefiniteNotRetried(t *testing.T) {
	reg := registrytest.NewRegistry()
	_, path := ctPath(t)
	g := openReg(t, path, "web_1", reg, WithCloneWindow(0))
	_, _ = g.Next()
	crash(t, g) // the mark stays in the file and the registry
	var extends atomic.Int64
	reg.SetHook(func(_ context.Context, op, _ string) error {
		if op == "extend" {
			extends.Add(1)
			// the registry's mark is below the host's (a row restored
			// from a backup between the claim and its first extension)
			if r, ok := reg.Row("web_1"); ok && r.Reserved > 1 {
				r.Reserved = 1
				reg.Put(r)
			}
		}
		return nil
	})
	ExportRetryWaits(t, func(int) time.Duration { return time.Millisecond })
	_, err := Open(path, "web_1", WithRegistry(reg), WithSync(false), WithCloneWindow(0), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}))
	t.Logf("Open: %v; %d extends sent", err, extends.Load())
	assert.LessOrEqual(t, extends.Load(), int64(1), "a definite answer was sent again")
}
