package cassandra_test

// Node numbers over the simulated cluster (internal/simcql): assignments
// whose outcome stayed unknown, without Cassandra.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/internal/simcql"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// timingOutNums times out the next insert of a numbers row whose key
// starts with prefix, after making it (applied) or without, and fails
// the serial read that would resolve it: the assignment ends with its
// outcome unknown.
type timingOutNums struct {
	cql.NumQuerier
	mu      sync.Mutex
	prefix  string // "": nothing times out
	applied bool
	failed  string // the key whose resolution is to fail
}

var errTimedOut = errors.New("injected: the request timed out")

func (q *timingOutNums) Insert(ctx context.Context, key string, n uint64, name, token string) (bool, cql.NumRow, error) {
	q.mu.Lock()
	hit := q.prefix != "" && strings.HasPrefix(key, q.prefix)
	if hit {
		q.prefix, q.failed = "", key
	}
	q.mu.Unlock()
	if !hit {
		return q.NumQuerier.Insert(ctx, key, n, name, token)
	}
	if q.applied {
		if _, _, err := q.NumQuerier.Insert(ctx, key, n, name, token); err != nil {
			return false, cql.NumRow{}, err
		}
	}
	return false, cql.NumRow{}, errTimedOut
}

func (q *timingOutNums) Read(ctx context.Context, key string, serial bool) (cql.NumRow, bool, error) {
	q.mu.Lock()
	fail := serial && key == q.failed
	if fail {
		q.failed = ""
	}
	q.mu.Unlock()
	if fail {
		return cql.NumRow{}, false, errTimedOut
	}
	return q.NumQuerier.Read(ctx, key, serial)
}

// A node number assignment whose outcome stayed unknown (its insert timed
// out, and so did the serial read that would have resolved it) is listed
// as it stands: a number taken for the name but not given is NumberTaken,
// and check-names says so (outcome unknown), not that the name was claimed
// before the registry gave numbers. A give that was made is the name's
// number. The name's next assignment settles it: one number for the name,
// never one another name holds.
func TestNodeNumberOutcomeUnknown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		prefix  string // the insert that times out
		applied bool
		number  uint64 // listed after the failure
		taken   uint64
		detail  string // check-names' no_number detail
	}{
		{"take made, answer lost", "number:", true, 0, 2, `"web_2" has no node number yet: number 2 was taken for it, but its assignment did not complete ` +
			`(its outcome was unknown: an answer lost or timed out); its host's next start settles it`},
		{"take not made", "number:", false, 0, 0, `"web_2" has no node number: it was claimed before the registry gave numbers, or its host's assignment ` +
			`of one failed before a number was taken`},
		{"give not made", "name:", false, 0, 2, `"web_2" has no node number yet: number 2 was taken for it, but its assignment did not complete`},
		{"give made, answer lost", "name:", true, 2, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			c := simcql.New(rand.New(rand.NewPCG(5, 6)))
			b := c.Backend("dc1", time.Now)
			q := &timingOutNums{NumQuerier: b.Numbers}
			b.Numbers = q
			r, _ := cassandra.NewBackendRegistry(b)
			t.Cleanup(r.Close)
			claim := func(name string) registry.Holder {
				h, err := r.Claim(ctx, registry.Claim{Name: name, Owner: fmt.Sprintf("%032x", len(name)+int(name[len(name)-1]))})
				require.NoError(t, err)
				return h
			}
			h1, h2 := claim("web_1"), claim("web_2")
			n1, err := r.AssignNumber(ctx, h1.Name, h1.Owner, h1.Session)
			require.NoError(t, err)
			require.Equal(t, uint64(1), n1)

			q.mu.Lock()
			q.prefix, q.applied = tc.prefix, tc.applied
			q.mu.Unlock()
			_, err = r.AssignNumber(ctx, h2.Name, h2.Owner, h2.Session)
			require.ErrorIs(t, err, registry.ErrRegistry)
			require.ErrorContains(t, err, "the outcome is unknown")

			rows, err := r.List(ctx)
			require.NoError(t, err)
			got := holder(t, rows, "web_2")
			assert.Equal(t, tc.number, got.Number, "listed as it stands")
			assert.Equal(t, tc.taken, got.NumberTaken)
			ns, err := r.NodeNumber(ctx, "web_2")
			require.NoError(t, err)
			assert.Equal(t, cassandra.NumberState{Number: tc.number, Taken: tc.taken}, ns)
			if detail := noNumberDetail(rows); tc.detail == "" {
				assert.Empty(t, detail, "check-names")
			} else {
				assert.Contains(t, detail, tc.detail, "check-names")
				assert.NotContains(t, detail, "claimed before the registry gave numbers)", "check-names")
			}

			// The next start of web_2's host settles it.
			n2, err := r.AssignNumber(ctx, h2.Name, h2.Owner, h2.Session)
			require.NoError(t, err)
			if tc.number != 0 {
				assert.Equal(t, tc.number, n2, "the give that was made stands")
			}
			assert.NotEqual(t, n1, n2)
			rows, err = r.List(ctx)
			require.NoError(t, err)
			got = holder(t, rows, "web_2")
			assert.Equal(t, n2, got.Number)
			assert.Zero(t, got.NumberTaken, "settled")
			assert.Empty(t, noNumberDetail(rows))
			again, err := r.AssignNumber(ctx, h2.Name, h2.Owner, h2.Session)
			require.NoError(t, err)
			assert.Equal(t, n2, again, "one number for the name")
			// No other name gets a number taken for web_2.
			h3 := claim("web_3")
			n3, err := r.AssignNumber(ctx, h3.Name, h3.Owner, h3.Session)
			require.NoError(t, err)
			assert.NotContains(t, []uint64{n1, n2, tc.taken}, n3)
		})
	}
}

// holder is the row of name among rows.
func holder(t *testing.T, rows []registry.Holder, name string) registry.Holder {
	t.Helper()
	for _, h := range rows {
		if h.Name == name {
			return h
		}
	}
	t.Fatalf("no row %q", name)
	return registry.Holder{}
}

// noNumberDetail is check-names' no_number detail about rows, "" if none.
func noNumberDetail(rows []registry.Holder) string {
	for _, p := range admin.Audit(rows, admin.AuditConfig{Stale: -1, ClockSkew: -1}).Problems {
		if p.Kind == admin.ProblemNoNumber {
			return p.Detail
		}
	}
	return ""
}
