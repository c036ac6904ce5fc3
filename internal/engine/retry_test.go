package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A start-up storm's transient failure of one of the other registry calls
// a first start makes (the name's row for its node number, the cluster's
// stride) is sent again within the caller's 10 s: Open succeeds.
func TestStartUpCallsRetried(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	_, err := Open(path, "web_1", WithRegistry(reg), WithSync(false), WithCloneWindow(0), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}),
		WithRetryWait(func(int) time.Duration { return time.Millisecond }))
	t.Logf("Open: %v; %d extends sent", err, extends.Load())
	assert.LessOrEqual(t, extends.Load(), int64(1), "a definite answer was sent again")
}

// A start-up call that failed transiently is not sent again when the
// caller's deadline falls before the next attempt: the caller gets the
// registry's error at once, not when its deadline comes. And the wait
// before an attempt ends when the caller's context does (a caller that
// leaves meanwhile is not held for the rest of the wait). The waits are
// an hour long, far beyond the seconds the test allows each outcome.
func TestRetryGivesUpBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	const wait = time.Hour
	waitFor := WithRetryWait(func(int) time.Duration { return wait })
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
				g, err := OpenContext(ctx, h.path, h.name, WithRegistry(reg), WithHostInfo(h.info), waitFor)
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

// contendedRegistry is the in-memory registry under the load of a
// start-up storm: a share of the calls a start-up makes fail as Paxos
// contention and overload make them fail on Cassandra, either before
// anything is applied (a timeout in the prepare phase, an overloaded node)
// or after (the answer lost: an unknown outcome the registry could not
// resolve in time).
type contendedRegistry struct {
	*registrytest.Registry
	mu       sync.Mutex
	rng      *rand.Rand
	failRate float64
	failed   atomic.Int64
	lost     atomic.Int64
	fails    map[string]int // calls failed, by name
}

// maxFails is the most calls for one name that fail: fewer than a
// caller's tries (retry.Attempts), so that the storm, however the hosts'
// calls interleave, never fails a caller by chance alone.
const maxFails = 6

var errContention = fmt.Errorf("%w: contention: operation timed out (test)", ErrRegistry)

// fate decides one call for name: fail before, fail after (lost
// answer), or go.
func (c *contendedRegistry) fate(name string) (before, after bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fails == nil {
		c.fails = map[string]int{}
	}
	if c.rng.Float64() >= c.failRate || c.fails[name] >= maxFails {
		return false, false
	}
	c.fails[name]++
	if c.rng.IntN(2) == 0 {
		c.failed.Add(1)
		return true, false
	}
	c.lost.Add(1)
	return false, true
}

func contended[T any](c *contendedRegistry, name string, call func() (T, error)) (T, error) {
	before, after := c.fate(name)
	if before {
		var zero T
		return zero, errContention
	}
	v, err := call()
	if after && err == nil {
		var zero T
		return zero, fmt.Errorf("%w: the outcome is unknown (test)", errContention)
	}
	return v, err
}

func (c *contendedRegistry) Claim(ctx context.Context, cl registry.Claim) (registry.Holder, error) {
	return contended(c, cl.Name, func() (registry.Holder, error) { return c.Registry.Claim(ctx, cl) })
}

func (c *contendedRegistry) Extend(ctx context.Context, name, owner, session string, old, new uint64) (registry.Holder, error) {
	return contended(c, name, func() (registry.Holder, error) { return c.Registry.Extend(ctx, name, owner, session, old, new) })
}

func (c *contendedRegistry) AssignNumber(ctx context.Context, name, owner, session string) (uint64, error) {
	return contended(c, name, func() (uint64, error) { return c.Registry.AssignNumber(ctx, name, owner, session) })
}

func (c *contendedRegistry) LeaseSequence(ctx context.Context, req registry.LeaseRequest) (registry.SequenceLease, error) {
	return contended(c, req.Name, func() (registry.SequenceLease, error) { return c.Registry.LeaseSequence(ctx, req) })
}

// A data centre's hosts all start at once on a registry that fails a third
// of their claims, extensions, node numbers and leases (at most six of
// each host's, fewer than its tries), half of them after applying them:
// every host issues its first id and its first sequence number with no
// error returned, within its deadline, and no id or number is issued
// twice.
func TestStartUpStorm(t *testing.T) {
	t.Parallel()
	const hosts = 60
	inner := registrytest.NewRegistry()
	createSeq(t, inner, "orders", 1, registry.MaxSequence)
	reg := &contendedRegistry{Registry: inner, rng: rand.New(rand.NewPCG(1, 2)), failRate: 1.0 / 3}
	stormWait := WithRetryWait(func(attempt int) time.Duration { return time.Duration(rand.N(1<<min(attempt, 6))) * time.Millisecond })

	type result struct {
		id  string
		n   uint64
		err error
	}
	results := make([]result, hosts)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range hosts {
		h := newSeqHost(t, fmt.Sprintf("storm_%d", i))
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res := &results[i]
			g, err := OpenContext(ctx, h.path, h.name, WithRegistry(reg), WithSync(false), WithHostInfo(h.info),
				WithFormat(FormatDecimal), stormWait)
			if err != nil {
				res.err = fmt.Errorf("open: %w", err)
				return
			}
			defer g.Close()
			if res.id, err = g.UniqueIDContext(ctx); err != nil {
				res.err = fmt.Errorf("first id: %w", err)
				return
			}
			s, err := g.Sequence("orders")
			if err != nil {
				res.err = fmt.Errorf("sequence: %w", err)
				return
			}
			defer s.Close()
			if res.n, err = s.NextContext(ctx); err != nil {
				res.err = fmt.Errorf("first sequence number: %w", err)
			}
		})
	}
	close(start)
	wg.Wait()
	ids, nums := map[string]int{}, map[uint64]int{}
	for i, r := range results {
		require.NoError(t, r.err, "host %d", i)
		if j, dup := ids[r.id]; dup {
			t.Fatalf("hosts %d and %d both issued %s", j, i, r.id)
		}
		if j, dup := nums[r.n]; dup {
			t.Fatalf("hosts %d and %d both took sequence number %d", j, i, r.n)
		}
		ids[r.id], nums[r.n] = i, i
	}
	t.Logf("%d hosts served; %d calls failed before applying, %d answers lost after", hosts, reg.failed.Load(), reg.lost.Load())
	require.Positive(t, reg.failed.Load())
	require.Positive(t, reg.lost.Load())
}

// A registry that keeps failing is not retried forever: the caller's
// deadline ends it with the registry's error, and a definite answer is
// returned at once.
func TestStartUpRetriesBounded(t *testing.T) {
	t.Parallel()
	inner := registrytest.NewRegistry()
	var claims atomic.Int64
	inner.SetHook(func(_ context.Context, op, _ string) error {
		if op == "claim" {
			claims.Add(1)
			return errContention
		}
		return nil
	})
	h := newSeqHost(t, "down_1")
	// Room for every attempt on a busy machine: the count, not the time,
	// is what is checked.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := OpenContext(ctx, h.path, h.name, WithRegistry(inner), WithHostInfo(h.info), WithRetryWait(func(int) time.Duration { return 5 * time.Millisecond }))
	require.ErrorIs(t, err, ErrRegistry)
	require.Equal(t, int64(ExportRetryAttempts), claims.Load(), "attempts of a claim that keeps failing")

	// Another owner's active claim is an answer, not a failure.
	inner.SetHook(nil)
	g := newSeqHost(t, "taken_1").open(t, inner)
	defer g.Close()
	claims.Store(0)
	inner.SetHook(func(_ context.Context, op, _ string) error {
		if op == "claim" {
			claims.Add(1)
		}
		return nil
	})
	other := newSeqHost(t, "taken_1")
	_, err = Open(filepath.Join(other.dir, "c2.u64"), "taken_1", WithRegistry(inner), WithHostInfo(HostInfo{Hostname: "x", MachineID: "mx"}))
	require.True(t, errors.Is(err, ErrNameTaken), "%v", err)
	require.Equal(t, int64(1), claims.Load(), "a definite refusal is not sent again")

	// Definite answers that a registry wraps in ErrRegistry are not sent
	// again either; failures and lost answers are.
	for _, d := range []error{ErrNameTaken, ErrProbableClone, registry.ErrMarkMoved, registry.ErrNotRegistered, registry.ErrLeaseMoved, ErrNoSequence, ErrExhausted, ErrInvalidOption, context.Canceled} {
		require.False(t, ExportTransient(fmt.Errorf("%w: %w", ErrRegistry, d)), "%v", d)
	}
	require.True(t, ExportTransient(errContention))
	require.True(t, ExportTransient(fmt.Errorf("%w: %w", ErrRegistry, context.DeadlineExceeded)), "an attempt that timed out")
	require.False(t, ExportTransient(errors.New("disk full")))
}
