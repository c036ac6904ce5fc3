package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestTransient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"not the registry's", errors.New("disk full"), false},
		{"a registry failure", fmt.Errorf("%w: timed out", errs.ErrRegistry), true},
		{"a definite answer", fmt.Errorf("%w: %w", errs.ErrRegistry, errs.ErrNameTaken), false},
		{"a lease moved", fmt.Errorf("%w: %w", errs.ErrRegistry, registry.ErrLeaseMoved), false},
		{"marked definite", Definite{Err: fmt.Errorf("%w: the mark is below", errs.ErrRegistry)}, false},
		{"canceled", fmt.Errorf("%w: %w", errs.ErrRegistry, context.Canceled), false},
	} {
		require.Equal(t, tc.want, Transient(tc.err), tc.name)
	}
}

func TestBackoffBounded(t *testing.T) {
	t.Parallel()
	for attempt := range 40 {
		bound := min(Cap, Base<<min(attempt, 20))
		for range 50 {
			w := Backoff(attempt)
			require.GreaterOrEqual(t, w, time.Duration(0))
			require.LessOrEqual(t, w, bound, "attempt %d", attempt)
		}
	}
}

// Do sends a transient failure again, at most Attempts times, and stops
// at the first answer that is not transient.
func TestDo(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(0, 0))
	noWait := func(int) time.Duration { return 0 }
	calls := 0
	err := Do(context.Background(), clk, quiet, noWait, "op", func(context.Context) error {
		calls++
		return fmt.Errorf("%w: timed out", errs.ErrRegistry)
	})
	require.ErrorIs(t, err, errs.ErrRegistry)
	require.Equal(t, Attempts, calls)

	calls = 0
	err = Do(context.Background(), clk, quiet, noWait, "op", func(context.Context) error {
		calls++
		if calls < 3 {
			return fmt.Errorf("%w: timed out", errs.ErrRegistry)
		}
		return fmt.Errorf("%w: %w", errs.ErrRegistry, errs.ErrNameTaken)
	})
	require.ErrorIs(t, err, errs.ErrNameTaken)
	require.Equal(t, 3, calls)
}

// Pause waits on the clock it is given, and not when the caller's
// deadline leaves no room for the wait.
func TestPause(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(0, 0))
	wait := func(int) time.Duration { return time.Second }
	ctx, cancel := clk.WithTimeout(context.Background(), time.Second)
	defer cancel()
	require.False(t, Pause(ctx, clk, wait, 0, quiet), "the deadline leaves no room")

	done := make(chan bool, 1)
	go func() { done <- Pause(context.Background(), clk, wait, 0, quiet) }()
	require.NoError(t, clk.BlockUntil(context.Background(), 1))
	clk.Advance(time.Second)
	require.True(t, <-done)

	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- Pause(ctx, clk, wait, 0, quiet) }()
	require.NoError(t, clk.BlockUntil(context.Background(), 1))
	cancel()
	require.False(t, <-done, "a caller that leaves stops the wait")
}
