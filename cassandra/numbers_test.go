package cassandra

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// lossyNums loses the replies of the next inserts of the numbers table:
// after the insert was applied (applied), or before it was sent.
type lossyNums struct {
	numQuerier
	mu      sync.Mutex
	lose    int
	applied bool
	lost    int
}

func (l *lossyNums) insert(ctx context.Context, key string, n uint64, name, token string) (bool, numRow, error) {
	l.mu.Lock()
	lose := l.lose > 0
	if lose {
		l.lose--
		l.lost++
	}
	l.mu.Unlock()
	if lose && !l.applied {
		return false, numRow{}, errors.New("injected: the request timed out before it was sent")
	}
	ok, cur, err := l.numQuerier.insert(ctx, key, n, name, token)
	if lose && err == nil {
		return false, numRow{}, errors.New("injected: the reply was lost")
	}
	return ok, cur, err
}

// An answer lost before or after a number was taken, or given to the
// name, is resolved by a serial read: the name gets one number, and
// another name never gets it.
func TestAssignNumberLostAnswers(t *testing.T) {
	for _, applied := range []bool{false, true} {
		t.Run(map[bool]string{false: "lost before", true: "applied, then lost"}[applied], func(t *testing.T) {
			_, ctx, r := oneRegistry(t)
			q, _, err := r.numbers(ctx, true)
			require.NoError(t, err)
			lossy := &lossyNums{numQuerier: q, lose: 2, applied: applied}
			r.nums.q = lossy
			h := mustClaim(t, ctx, r, "lossy", "owner1")
			n, err := r.AssignNumber(ctx, "lossy", "owner1", h.Session)
			require.NoError(t, err)
			require.Equal(t, 2, lossy.lost, "the take and the give both lost their answers")
			got, err := r.Get(ctx, "lossy")
			require.NoError(t, err)
			require.Equal(t, n, got.Number)
			again, err := r.AssignNumber(ctx, "lossy", "owner1", h.Session)
			require.NoError(t, err)
			require.Equal(t, n, again)
			row, found, err := q.read(ctx, "number:"+strconv.FormatUint(n, 10), true)
			require.NoError(t, err)
			require.True(t, found)
			require.Equal(t, "lossy", str(row.name))
			h2 := mustClaim(t, ctx, r, "other", "owner2")
			m, err := r.AssignNumber(ctx, "other", "owner2", h2.Session)
			require.NoError(t, err)
			require.NotEqual(t, n, m)
		})
	}
}

// A hint far behind (300 numbers taken, no hint written) is passed within
// the attempts: the jumps grow after each number found taken.
func TestAssignNumberHintBehind(t *testing.T) {
	_, ctx, r := oneRegistry(t)
	q, _, err := r.numbers(ctx, true)
	require.NoError(t, err)
	for n := uint64(1); n <= 300; n++ {
		ok, _, err := q.insert(ctx, "number:"+strconv.FormatUint(n, 10), n, "someone_else", "t")
		require.NoError(t, err)
		require.True(t, ok)
	}
	h := mustClaim(t, ctx, r, "late", "owner1")
	n, err := r.AssignNumber(ctx, "late", "owner1", h.Session)
	require.NoError(t, err)
	require.Greater(t, n, uint64(300))
}
