package cassandra_test

// Sequences over the simulated cluster (internal/simcql): races and data
// centres set up exactly, without Cassandra.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gocql/gocql"
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
