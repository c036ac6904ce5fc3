package snapid_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// A start-up call that failed transiently is not sent again when the
// caller's deadline falls before the next attempt: the caller gets the
// registry's error at once, not when its deadline comes. And the wait
// before an attempt ends when the caller's context does (a caller that
// leaves meanwhile is not held for the rest of the wait). The waits are
// an hour long, far beyond the seconds the test allows each outcome.
func TestRetryGivesUpBeforeTheDeadline(t *testing.T) {
	const wait = time.Hour
	ExportRetryWaits(t, func(int) time.Duration { return wait })
	for _, tc := range []struct {
		name     string
		deadline time.Duration // the caller's deadline from now
		leave    bool          // the caller cancels its context after the first attempt
	}{
		{"deadline before the next attempt", wait / 2, false},
		{"caller leaves during the wait", 2 * wait, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			var claims atomic.Int64
			reg.SetHook(func(_ context.Context, op, _ string) error {
				if op != "claim" {
					return nil
				}
				if claims.Add(1) == 1 && tc.leave {
					go cancel() // the caller leaves while the first failure's wait runs
				}
				return errContention
			})
			h := newSeqHost(t, "web_1")
			done := make(chan error, 1)
			go func() {
				g, err := OpenContext(ctx, h.path, h.name, WithRegistry(reg), WithHostInfo(h.info))
				if err == nil {
					g.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				require.ErrorIs(t, err, ErrRegistry)
				require.Equal(t, int64(1), claims.Load(), "attempts")
			case <-time.After(30 * time.Second):
				t.Fatalf("Open still waiting after 30 s (the wait before the next attempt is %v, the caller's deadline %v, the caller left: %v)", wait, tc.deadline, tc.leave)
			}
		})
	}
}
