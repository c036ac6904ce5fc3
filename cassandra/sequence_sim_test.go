package cassandra_test

// Sequences over the simulated cluster (internal/simcql): races and data
// centres set up exactly, without Cassandra.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/internal/simcql"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// racingSeqs holds every conditional batch back until n reads of GLOBAL's
// partition were made, so that n creates all find no sequence before any
// of them creates it.
type racingSeqs struct {
	cql.SeqQuerier
	n     int
	mu    sync.Mutex
	reads int
	ready chan struct{}
}

func (q *racingSeqs) ReadPartition(ctx context.Context, cons gocql.Consistency, seq, part string) ([]cql.SeqRow, error) {
	rows, err := q.SeqQuerier.ReadPartition(ctx, cons, seq, part)
	if part == cql.PartGlobal {
		q.mu.Lock()
		if q.reads++; q.reads == q.n {
			close(q.ready)
		}
		q.mu.Unlock()
	}
	return rows, err
}

func (q *racingSeqs) CASBatch(ctx context.Context, serial gocql.SerialConsistency, cons gocql.Consistency, stmts ...cql.SeqStmt) (bool, error) {
	select {
	case <-q.ready:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return q.SeqQuerier.CASBatch(ctx, serial, cons, stmts...)
}

// Two creates of one sequence racing (both find no sequence, one creates
// it first): the one that loses does not change what the winner made and
// reported. With other bounds it fails with ErrSequenceExists, naming the
// bounds the sequence has, and changes nothing; with the same bounds it
// succeeds. Whichever wins, every create that succeeds reports the
// sequence as it is.
func TestSequenceCreateRace(t *testing.T) {
	t.Parallel()
	type create struct {
		start, max uint64
		keepMax    bool
	}
	one, both := func(registry.SequenceStatus) int { return 1 }, func(registry.SequenceStatus) int { return 2 }
	for _, tc := range []struct {
		name string
		a, b create
		ok   func(st registry.SequenceStatus) int // how many creates succeed, given what the winner made
	}{
		{"other max", create{1, 100, false}, create{1, 200, false}, one},
		{"other start", create{1, 100, false}, create{50, 100, false}, one},
		{"same bounds", create{10, 100, false}, create{10, 100, false}, both},
		// Without --max the loser takes any max: if the create with max
		// 100 wins, both succeed; if the other wins (max 2^63-1), the
		// create asking for max 100 is told.
		{"max kept", create{1, 100, false}, create{1, 0, true}, func(st registry.SequenceStatus) int {
			if st.Max == 100 {
				return 2
			}
			return 1
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := simcql.New(rand.New(rand.NewPCG(1, 2)))
			b := c.Backend("dc1", time.Now)
			b.Seqs = &racingSeqs{SeqQuerier: b.Seqs, n: 2, ready: make(chan struct{})}
			var regs [2]*cassandra.Registry
			for i := range regs {
				regs[i], _ = cassandra.NewBackendRegistry(b)
				t.Cleanup(regs[i].Close)
			}
			var wg sync.WaitGroup
			infos, errs := make([]registry.SequenceInfo, 2), make([]error, 2)
			for i, cr := range []create{tc.a, tc.b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if cr.keepMax {
						infos[i], errs[i] = regs[i].CreateSequenceKeepMax(t.Context(), "articles", cr.start)
					} else {
						infos[i], errs[i] = regs[i].CreateSequence(t.Context(), "articles", cr.start, cr.max)
					}
				}()
			}
			wg.Wait()
			st, err := regs[0].SequenceStatus(t.Context(), "articles")
			require.NoError(t, err)
			ok := 0
			for i, err := range errs {
				if err == nil {
					ok++
					assert.Equal(t, st.Start, infos[i].Start, "create %d reports the sequence as it is", i)
					assert.Equal(t, st.Max, infos[i].Max, "create %d reports the sequence as it is", i)
					continue
				}
				require.ErrorIs(t, err, registry.ErrSequenceExists, "create %d", i)
				assert.Contains(t, err.Error(), fmt.Sprintf(`sequence "articles" was created meanwhile by another create, with start %d and max %d, not the `,
					st.Start, st.Max))
				assert.Contains(t, err.Error(), "nothing was changed")
			}
			assert.Equal(t, tc.ok(st), ok, "creates that succeed (the others are told what exists): %v", errs)
		})
	}
}

// A data centre that cannot lease is told what is left where: its own
// ranges, GLOBAL, and what other data centres' ranges hold unleased
// (numbers that only their own hosts can lease). Here dc2 took a range of
// 64 from GLOBAL and leased 8 of it, then dc1 uses up the rest: dc1 is
// exhausted while dc2's range holds 56; with a GLOBAL that still has 6,
// a lease of at least 8 in dc1 is short, and says the same.
func TestSequenceExhaustedSaysWhatIsLeftWhere(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		max       uint64
		min       uint64 // the fewest numbers dc1's last lease asks for
		exhausted bool
		says      string
	}{
		{"exhausted", 130, 1, true, `GLOBAL handed every number up to max 130 to data centres, and data centre "dc1" leased every number of its ranges to hosts ` +
			`(their leases may still hold numbers not issued yet); other data centres' ranges hold 56 numbers not leased yet ("dc2" 56), which only their own hosts can lease`},
		{"short", 70, 8, false, `8 consecutive numbers asked for, at most 6 are left together for data centre "dc1" (0 unleased in its ranges, ` +
			`6 not yet handed out by GLOBAL, max 70); ask for at most 6; other data centres' ranges hold 56 numbers not leased yet ("dc2" 56), which only their own hosts can lease`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := simcql.New(rand.New(rand.NewPCG(3, 4)))
			dc1, dc2 := c.Registry("dc1", time.Now), c.Registry("dc2", time.Now)
			t.Cleanup(dc1.Close)
			t.Cleanup(dc2.Close)
			ctx := t.Context()
			_, err := dc1.CreateSequence(ctx, "s", 1, tc.max)
			require.NoError(t, err)
			lease := func(r cql.Registry, name string, prev registry.SequenceLease, min uint64) (registry.SequenceLease, error) {
				h, err := r.Get(ctx, name)
				require.NoError(t, err)
				return r.LeaseSequence(ctx, registry.LeaseRequest{Sequence: "s", Name: name, Owner: h.Owner, Session: h.Session,
					PrevFirst: prev.First, PrevLast: prev.Last, Size: 8, Min: min})
			}
			for i, r := range []cql.Registry{dc1, dc2} {
				_, err := r.Claim(ctx, registry.Claim{Name: fmt.Sprintf("host_%d", i+1), Owner: fmt.Sprintf("%032d", i+1)})
				require.NoError(t, err)
			}
			l, err := lease(dc2, "host_2", registry.SequenceLease{}, 1)
			require.NoError(t, err)
			require.Equal(t, registry.SequenceLease{First: 1, Last: 8}, registry.SequenceLease{First: l.First, Last: l.Last}, "dc2 took [1, 64] and leased 8")
			c.Settle()
			// dc1 leases what is left to it, 8 at a time.
			var prev registry.SequenceLease
			for tc.exhausted {
				l, err := lease(dc1, "host_1", prev, 1)
				c.Settle()
				if err != nil {
					break
				}
				prev = l
			}
			for range 64 {
				c.Tick() // dc1's replicas catch up with dc2's lease
			}
			_, err = lease(dc1, "host_1", prev, tc.min)
			var e *registry.SequenceExhaustedError
			require.ErrorAs(t, err, &e)
			assert.Equal(t, tc.exhausted, errors.Is(err, registry.ErrExhausted), "%v", err)
			assert.Equal(t, map[string]uint64{"dc2": 56}, e.OtherDCs)
			assert.Contains(t, err.Error(), tc.says)
		})
	}
}
