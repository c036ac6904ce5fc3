package cassandra

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// lossyNums loses the replies of the next inserts of the numbers table:
// after the insert was applied (applied), or before it was sent.
type lossyNums struct {
	cql.NumQuerier
	mu      sync.Mutex
	lose    int
	applied bool
	lost    int
}

func (l *lossyNums) Insert(ctx context.Context, key string, n uint64, name, token string) (bool, cql.NumRow, error) {
	l.mu.Lock()
	lose := l.lose > 0
	if lose {
		l.lose--
		l.lost++
	}
	l.mu.Unlock()
	if lose && !l.applied {
		return false, cql.NumRow{}, errors.New("injected: the request timed out before it was sent")
	}
	ok, cur, err := l.NumQuerier.Insert(ctx, key, n, name, token)
	if lose && err == nil {
		return false, cql.NumRow{}, errors.New("injected: the reply was lost")
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
			lossy := &lossyNums{NumQuerier: q, lose: 2, applied: applied}
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
			row, found, err := q.Read(ctx, "number:"+strconv.FormatUint(n, 10), true)
			require.NoError(t, err)
			require.True(t, found)
			require.Equal(t, "lossy", str(row.Name))
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
		ok, _, err := q.Insert(ctx, "number:"+strconv.FormatUint(n, 10), n, "someone_else", "t")
		require.NoError(t, err)
		require.True(t, ok)
	}
	h := mustClaim(t, ctx, r, "late", "owner1")
	n, err := r.AssignNumber(ctx, "late", "owner1", h.Session)
	require.NoError(t, err)
	require.Greater(t, n, uint64(300))
}

// intruderNums, at the first insert of a row whose key starts with
// prefix, has another attempt insert that row first (another name or
// number, another token), then loses this insert's answer: the insert was
// not applied, and only the token of the row found says so.
type intruderNums struct {
	cql.NumQuerier
	prefix  string
	number  uint64 // the intruder's number (for a name row)
	name    string // the intruder's name (for a number row)
	mu      sync.Mutex
	done    bool
	intrude string // the key it intruded on
}

func (l *intruderNums) Insert(ctx context.Context, key string, n uint64, name, token string) (bool, cql.NumRow, error) {
	l.mu.Lock()
	intrude := !l.done && strings.HasPrefix(key, l.prefix)
	if intrude {
		l.done, l.intrude = true, key
	}
	l.mu.Unlock()
	if !intrude {
		return l.NumQuerier.Insert(ctx, key, n, name, token)
	}
	in, rowName := n, l.name
	if l.number != 0 {
		in, rowName = l.number, name
	}
	if ok, _, err := l.NumQuerier.Insert(ctx, key, in, rowName, "intruder-token"); err != nil || !ok {
		return false, cql.NumRow{}, fmt.Errorf("the intruder's insert of %s: applied %v, %v", key, ok, err)
	}
	if _, _, err := l.NumQuerier.Insert(ctx, key, n, name, token); err != nil {
		return false, cql.NumRow{}, err
	}
	return false, cql.NumRow{}, errors.New("injected: the reply was lost")
}

// An INSERT … IF NOT EXISTS whose answer was lost, with another attempt's
// row written in between, is resolved as not applied (the row's token is
// not ours): a number row another name took is never also this name's,
// and a name row another attempt gave a number is the name's number.
func TestAssignNumberLostAnswerAnotherWriterBetween(t *testing.T) {
	t.Run("number row", func(t *testing.T) {
		_, ctx, r := oneRegistry(t)
		q, _, err := r.numbers(ctx, true)
		require.NoError(t, err)
		in := &intruderNums{NumQuerier: q, prefix: "number:", name: "intruder"}
		r.nums.q = in
		h := mustClaim(t, ctx, r, "lossy", "owner1")
		n, err := r.AssignNumber(ctx, "lossy", "owner1", h.Session)
		require.NoError(t, err)
		require.True(t, in.done)
		require.NotEqual(t, "number:"+strconv.FormatUint(n, 10), in.intrude, "the intruder's number was also given to lossy")
		row, found, err := q.Read(ctx, "number:"+strconv.FormatUint(n, 10), true)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, "lossy", str(row.Name), "number %d's row names another name: two names hold one number", n)
	})
	t.Run("name row", func(t *testing.T) {
		_, ctx, r := oneRegistry(t)
		q, _, err := r.numbers(ctx, true)
		require.NoError(t, err)
		in := &intruderNums{NumQuerier: q, prefix: "name:", number: 777}
		r.nums.q = in
		h := mustClaim(t, ctx, r, "lossy", "owner1")
		n, err := r.AssignNumber(ctx, "lossy", "owner1", h.Session)
		require.NoError(t, err)
		require.True(t, in.done)
		require.Equal(t, uint64(777), n, "the name's row gives it 777; it was told another number")
		got, err := r.Get(ctx, "lossy")
		require.NoError(t, err)
		require.Equal(t, n, got.Number)
	})
}

// gatedNums holds every insert of a name's row until want of them arrived
// (or a bound of seconds passed), so that concurrent assignments for one
// name all take a number before any gives one.
type gatedNums struct {
	cql.NumQuerier
	want    int
	mu      sync.Mutex
	arrived int
	all     chan struct{}
}

func (g *gatedNums) Insert(ctx context.Context, key string, n uint64, name, token string) (bool, cql.NumRow, error) {
	if strings.HasPrefix(key, "name:") {
		g.mu.Lock()
		if g.arrived++; g.arrived == g.want {
			close(g.all)
		}
		g.mu.Unlock()
		select {
		case <-g.all:
		case <-time.After(20 * time.Second):
		}
	}
	return g.NumQuerier.Insert(ctx, key, n, name, token)
}

// Eight concurrent assignments for one name, each taking a number of its
// own before any gives one, are all told the one number the name's row
// got first.
func TestAssignNumberConcurrentOneName(t *testing.T) {
	_, ctx, r := oneRegistry(t)
	q, _, err := r.numbers(ctx, true)
	require.NoError(t, err)
	const n = 8
	g := &gatedNums{NumQuerier: q, want: n, all: make(chan struct{})}
	r.nums.q = g
	h := mustClaim(t, ctx, r, "busy", "owner1")
	got := make([]uint64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = r.AssignNumber(ctx, "busy", "owner1", h.Session)
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
	}
	row, found, err := q.Read(ctx, "name:busy", true)
	require.NoError(t, err)
	require.True(t, found)
	want, err := number("busy", row)
	require.NoError(t, err)
	for i := range n {
		require.Equal(t, want, got[i], "assignment %d of %v was told another number than the name's row holds", i, got)
	}
	g.mu.Lock()
	require.Equal(t, n, g.arrived, "every assignment took a number of its own before giving it")
	g.mu.Unlock()
}

// A number taken for a name whose give never came (an assignment whose
// outcome stayed unknown) is listed as NumberTaken, with the time it was
// taken (the row's write time), until the name's next assignment settles
// it; a name with no row in the numbers table has neither.
func TestListNumberTakenNotGiven(t *testing.T) {
	_, ctx, r := oneRegistry(t)
	q, _, err := r.numbers(ctx, true)
	require.NoError(t, err)
	numbered := mustClaim(t, ctx, r, "numbered", "owner1")
	_, err = r.AssignNumber(ctx, "numbered", "owner1", numbered.Session)
	require.NoError(t, err)
	h := mustClaim(t, ctx, r, "pending", "owner2")
	before := time.Now().Add(-time.Second)
	applied, _, err := q.Insert(ctx, "number:7", 7, "pending", newClaimToken()) // the take, without its give
	require.NoError(t, err)
	require.True(t, applied)
	after := time.Now().Add(time.Second)

	rows, err := r.List(ctx)
	require.NoError(t, err)
	var got registry.Holder
	for _, row := range rows {
		if row.Name == "pending" {
			got = row
		}
	}
	require.Equal(t, "pending", got.Name)
	require.Zero(t, got.Number)
	require.Equal(t, uint64(7), got.NumberTaken)
	require.True(t, got.NumberTakenAt.After(before) && got.NumberTakenAt.Before(after), "taken at %v", got.NumberTakenAt)
	ns, err := r.NodeNumber(ctx, "pending")
	require.NoError(t, err)
	require.Equal(t, NumberState{Taken: 7, TakenAt: got.NumberTakenAt}, ns)

	n, err := r.AssignNumber(ctx, "pending", "owner2", h.Session)
	require.NoError(t, err)
	ns, err = r.NodeNumber(ctx, "pending")
	require.NoError(t, err)
	require.Equal(t, NumberState{Number: n}, ns, "settled")
	ns, err = r.NodeNumber(ctx, "nobody")
	require.NoError(t, err)
	require.Equal(t, NumberState{}, ns)
}
