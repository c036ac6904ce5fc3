package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// waitCtx bounds a test's waits for other goroutines: seconds, which no
// starvation of a busy machine reaches.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestFakeTimerFiresOnlyWhenAdvanced(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	tm := f.NewTimer(time.Second)
	f.Advance(999 * time.Millisecond)
	select {
	case <-tm.C():
		t.Fatal("the timer fired before its time")
	default:
	}
	f.Advance(time.Millisecond)
	select {
	case got := <-tm.C():
		if !got.Equal(start.Add(time.Second)) {
			t.Fatalf("fired at %v, want %v", got, start.Add(time.Second))
		}
	default:
		t.Fatal("the timer did not fire at its time")
	}
	if f.Waiters() != 0 {
		t.Fatalf("%d waiters after the timer fired, want 0", f.Waiters())
	}
	if tm.Stop() {
		t.Fatal("Stop of a fired timer reported it active")
	}
	if tm.Reset(time.Minute); f.Waiters() != 1 {
		t.Fatal("Reset did not arm the timer again")
	}
	if !tm.Stop() || f.Waiters() != 0 {
		t.Fatal("Stop did not disarm the timer")
	}
}

func TestFakeTickerTicksPerPeriodAndDropsUnread(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	tk := f.NewTicker(time.Second)
	defer tk.Stop()
	for i := 1; i <= 3; i++ {
		f.Advance(time.Second)
		got := <-tk.C()
		if want := start.Add(time.Duration(i) * time.Second); !got.Equal(want) {
			t.Fatalf("tick %d at %v, want %v", i, got, want)
		}
	}
	f.Advance(5 * time.Second) // five ticks, one buffered
	<-tk.C()
	select {
	case <-tk.C():
		t.Fatal("more than one tick buffered, want the others dropped as time.Ticker does")
	default:
	}
	if got := f.Now(); !got.Equal(start.Add(8 * time.Second)) {
		t.Fatalf("Now %v, want %v", got, start.Add(8*time.Second))
	}
}

func TestFakeSleepAndBlockUntil(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	done := make(chan struct{})
	go func() {
		f.Sleep(time.Minute)
		close(done)
	}()
	if err := f.BlockUntil(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	f.Advance(time.Minute)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Sleep did not return once the clock passed its end")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.BlockUntil(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("BlockUntil with nothing armed and ctx ended: %v, want context.Canceled", err)
	}
}

func TestFakeSetBackFiresNothing(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	tm := f.NewTimer(time.Second)
	f.Advance(-time.Hour)
	f.Advance(time.Hour + 999*time.Millisecond)
	select {
	case <-tm.C():
		t.Fatal("a timer fired after the clock was set back and forward again, short of its time")
	default:
	}
	f.Set(start.Add(time.Second))
	<-tm.C()
}

func TestFakeDeadlineContext(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	ctx, cancel := f.WithTimeout(context.Background(), time.Second)
	defer cancel()
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(start.Add(time.Second)) {
		t.Fatalf("Deadline %v %v, want %v", d, ok, start.Add(time.Second))
	}
	if f.Until(start.Add(time.Second)) != time.Second {
		t.Fatal("Until disagrees with the clock")
	}
	f.Advance(999 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatalf("ended before its deadline: %v", ctx.Err())
	}
	f.Advance(time.Millisecond)
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		t.Fatalf("Err %v, Cause %v, want context.DeadlineExceeded", ctx.Err(), context.Cause(ctx))
	}
	<-child.Done()
	if !errors.Is(child.Err(), context.DeadlineExceeded) {
		t.Fatalf("a derived context's Err %v, want context.DeadlineExceeded", child.Err())
	}

	// Cancelled first: Canceled, and the deadline is disarmed.
	ctx2, cancel2 := f.WithTimeout(context.Background(), time.Second)
	cancel2()
	<-ctx2.Done()
	if !errors.Is(ctx2.Err(), context.Canceled) {
		t.Fatalf("cancelled: Err %v, want context.Canceled", ctx2.Err())
	}
	if err := waitFor(waitCtx(t), func() bool { return f.Deadlines() == 0 }); err != nil {
		t.Fatalf("a cancelled deadline stays armed: %v", err)
	}

	// A parent's earlier deadline is kept.
	ctx3, cancel3 := f.WithTimeout(ctx, time.Hour)
	defer cancel3()
	if d, _ := ctx3.Deadline(); !d.Equal(start.Add(time.Second)) {
		t.Fatalf("Deadline %v, want the parent's %v", d, start.Add(time.Second))
	}

	// A deadline already past ends the context at once.
	ctx4, cancel4 := f.WithDeadline(context.Background(), f.Now())
	defer cancel4()
	if !errors.Is(ctx4.Err(), context.DeadlineExceeded) {
		t.Fatalf("past deadline: Err %v, want context.DeadlineExceeded", ctx4.Err())
	}
}

func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// AdvanceIdle moves the clock only while no context waits on it for its
// deadline, so that a call in flight is not timed out by the move.
func TestFakeAdvanceIdleLeavesDeadlinesAlone(t *testing.T) {
	t.Parallel()
	f := NewFake(start)
	if !f.AdvanceIdle(time.Second) || !f.Now().Equal(start.Add(time.Second)) {
		t.Fatalf("idle clock not moved: %v", f.Now())
	}
	timer := f.NewTimer(time.Second) // a sleeper does not hold the clock
	if !f.AdvanceIdle(time.Second) {
		t.Fatal("a timer kept the clock from moving")
	}
	<-timer.C()
	ctx, cancel := f.WithTimeout(context.Background(), 100*time.Millisecond)
	if f.AdvanceIdle(time.Second) || !f.Now().Equal(start.Add(2*time.Second)) || ctx.Err() != nil {
		t.Fatalf("moved while a deadline waits: now %v, ctx %v", f.Now(), ctx.Err())
	}
	cancel()
	if !f.AdvanceIdle(time.Second) || !f.Now().Equal(start.Add(3*time.Second)) {
		t.Fatalf("not moved once the deadline's context ended: %v", f.Now())
	}
}

func TestRealIsTheWallClock(t *testing.T) {
	t.Parallel()
	var c Clock = OrReal(nil)
	before := time.Now()
	if got := c.Now(); got.Before(before) {
		t.Fatalf("Real.Now %v before time.Now %v", got, before)
	}
	ctx, cancel := c.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || d.Before(before.Add(time.Hour)) {
		t.Fatalf("Real.WithTimeout deadline %v", d)
	}
}
