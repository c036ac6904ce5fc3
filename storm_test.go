package snapid_test

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

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

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
}

var errContention = fmt.Errorf("%w: contention: operation timed out (test)", ErrRegistry)

// fate decides one call: fail before, fail after (lost answer), or go.
func (c *contendedRegistry) fate() (before, after bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rng.Float64() >= c.failRate {
		return false, false
	}
	if c.rng.IntN(2) == 0 {
		c.failed.Add(1)
		return true, false
	}
	c.lost.Add(1)
	return false, true
}

func contended[T any](c *contendedRegistry, call func() (T, error)) (T, error) {
	before, after := c.fate()
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
	return contended(c, func() (registry.Holder, error) { return c.Registry.Claim(ctx, cl) })
}

func (c *contendedRegistry) Extend(ctx context.Context, name, owner, session string, old, new uint64) (registry.Holder, error) {
	return contended(c, func() (registry.Holder, error) { return c.Registry.Extend(ctx, name, owner, session, old, new) })
}

func (c *contendedRegistry) AssignNumber(ctx context.Context, name, owner, session string) (uint64, error) {
	return contended(c, func() (uint64, error) { return c.Registry.AssignNumber(ctx, name, owner, session) })
}

func (c *contendedRegistry) LeaseSequence(ctx context.Context, req registry.LeaseRequest) (registry.SequenceLease, error) {
	return contended(c, func() (registry.SequenceLease, error) { return c.Registry.LeaseSequence(ctx, req) })
}

// A data centre's hosts all start at once on a registry that fails a third
// of their claims, extensions, node numbers and leases, half of them after
// applying them: every host issues its first id and its first sequence
// number with no error returned, within its deadline, and no id or number
// is issued twice.
func TestStartUpStorm(t *testing.T) {
	const hosts = 60
	inner := registrytest.NewRegistry()
	createSeq(t, inner, "orders", 1, registry.MaxSequence)
	reg := &contendedRegistry{Registry: inner, rng: rand.New(rand.NewPCG(1, 2)), failRate: 1.0 / 3}
	ExportRetryWaits(t, func(attempt int) time.Duration { return time.Duration(rand.N(1<<min(attempt, 6))) * time.Millisecond })

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
				WithFormat(FormatDecimal))
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
	inner := registrytest.NewRegistry()
	var claims atomic.Int64
	inner.SetHook(func(_ context.Context, op, _ string) error {
		if op == "claim" {
			claims.Add(1)
			return errContention
		}
		return nil
	})
	ExportRetryWaits(t, func(int) time.Duration { return 5 * time.Millisecond })
	h := newSeqHost(t, "down_1")
	// Room for every attempt on a busy machine: the count, not the time,
	// is what is checked.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := OpenContext(ctx, h.path, h.name, WithRegistry(inner), WithHostInfo(h.info))
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
