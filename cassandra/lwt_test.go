package cassandra

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testRequestError is an error the server sent, with its protocol code, as
// gocql reports it (gocql.RequestError).
type testRequestError struct {
	code int
	msg  string
}

func (e testRequestError) Code() int       { return e.code }
func (e testRequestError) Message() string { return e.msg }
func (e testRequestError) Error() string   { return fmt.Sprintf("%s (code 0x%04x)", e.msg, e.code) }

var _ gocql.RequestError = testRequestError{}

// errOverloaded is what Cassandra 5.0 answers an LWT whose commit found too
// many hints in flight: after a quorum accepted the proposal.
var errOverloaded = testRequestError{code: gocql.ErrCodeOverloaded, msg: "Too many in flight hints"}

func TestOutcomeUnknownClassification(t *testing.T) {
	definite := map[string]error{
		"syntax":         testRequestError{code: gocql.ErrCodeSyntax},
		"invalid":        testRequestError{code: gocql.ErrCodeInvalid},
		"unauthorized":   testRequestError{code: gocql.ErrCodeUnauthorized},
		"unprepared":     testRequestError{code: gocql.ErrCodeUnprepared},
		"protocol":       testRequestError{code: gocql.ErrCodeProtocol},
		"config":         testRequestError{code: gocql.ErrCodeConfig},
		"credentials":    testRequestError{code: gocql.ErrCodeCredentials},
		"already exists": testRequestError{code: gocql.ErrCodeAlreadyExists},
		"no connections": gocql.ErrNoConnections,
		"session closed": fmt.Errorf("wrapped: %w", gocql.ErrSessionClosed),
	}
	unknown := map[string]error{
		"overloaded":     errOverloaded,
		"bootstrapping":  testRequestError{code: gocql.ErrCodeBootstrapping},
		"server":         testRequestError{code: gocql.ErrCodeServer},
		"write timeout":  errCASTimeout,
		"unavailable":    errUnavail,
		"cas unknown":    testRequestError{code: 0x1700},
		"unlisted code":  testRequestError{code: 0x7777},
		"client timeout": gocql.ErrTimeoutNoResponse,
		"context":        context.DeadlineExceeded,
		"anything else":  errors.New("connection reset"),
	}
	for what, err := range definite {
		assert.False(t, outcomeUnknown(err), "%s is definite", what)
	}
	for what, err := range unknown {
		assert.True(t, outcomeUnknown(err), "%s is unknown", what)
	}
}

// An LWT answered Overloaded may have been applied (Cassandra 5.0 checks
// hint overload in the commit phase): the outcome is resolved by a serial
// read, whether the statement ran or not.
func TestCassandraOverloadedIsUnknown(t *testing.T) {
	k := newTestKeyspace(t)
	ctx := testCtx(t)
	for _, ran := range []bool{true, false} {
		t.Run(fmt.Sprintf("statement ran %v", ran), func(t *testing.T) {
			r := k.registry(t)
			overloaded := true // the next statement fails Overloaded
			l := lossy(r, func(int, string) lossPlan {
				p := lossPlan{loseReply: overloaded && ran, dropRequest: overloaded && !ran, err: errOverloaded}
				overloaded = false
				return p
			})
			name := testName(t)
			h, err := r.Claim(ctx, testClaim(name, "owner_a"))
			require.NoError(t, err)
			assert.Equal(t, "owner_a", h.Owner)
			assert.Equal(t, 1, l.reads, "resolved by a serial read")
			wantCalls := 1
			if !ran {
				wantCalls = 2 // not applied: sent again
			}
			assert.Equal(t, wantCalls, l.casCalls)
			got, err := r.Get(ctx, name)
			require.NoError(t, err)
			assert.Equal(t, h, got, "the claim is in the registry")

			l.casCalls, l.reads, overloaded = 0, 0, true
			require.NoError(t, r.Release(ctx, name, "owner_a", 42))
			assert.Equal(t, wantCalls, l.casCalls)
			got, err = r.Get(ctx, name)
			require.NoError(t, err)
			assert.Equal(t, registry.StateReleased, got.State)
			assert.Equal(t, uint64(42), got.Reserved)
		})
	}
}

// Marks are unsigned: a mark at or above 2^63 (a negative bigint) still
// orders above small values in every condition.
func TestCassandraMarksAbove2p63(t *testing.T) {
	k := newTestKeyspace(t)
	ctx := testCtx(t)
	ra, rb := k.registry(t), k.registry(t)
	name := testName(t)
	mustClaim(t, ctx, ra, name, "owner_a")
	const floor = uint64(1)<<63 + 100
	c := testClaim(name, "owner_b")
	c.Force, c.Floor = true, floor
	h, err := rb.Claim(ctx, c)
	require.NoError(t, err)
	require.Equal(t, floor, h.Reserved)

	before, _ := rawRow(t, rb, name)
	err = rb.Release(ctx, name, "owner_b", 5)
	require.ErrorIs(t, err, registry.ErrMarkMoved, "a release cannot record less than the mark")
	assert.Contains(t, err.Error(), fmt.Sprint(floor))
	after, _ := rawRow(t, rb, name)
	assert.Equal(t, before, after, "the mark is unchanged")
	err = rb.Release(ctx, name, "owner_b", floor-1)
	require.ErrorIs(t, err, registry.ErrMarkMoved)

	require.NoError(t, rb.Release(ctx, name, "owner_b", floor+100))
	got, err := rb.Get(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, registry.StateReleased, got.State)
	assert.Equal(t, floor+100, got.Reserved)

	// A take-over of the released name starts above it; a forced one with
	// a small floor keeps the high mark.
	h = mustClaim(t, ctx, ra, name, "owner_a")
	assert.Equal(t, floor+100, h.Reserved)
	c.Floor = 7
	h, err = rb.Claim(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, floor+100, h.Reserved)
}

// Release decides from the row it read and writes only if that row is
// still there: a mark moved in between is seen again, never overwritten by
// a lower final value.
func TestCassandraReleaseRereadsChangedRow(t *testing.T) {
	_, ctx, r := oneRegistry(t)
	name := testName(t)
	mustClaim(t, ctx, r, name, "owner_a")
	session := sessionOf(t, r, name)
	_, err := r.Extend(ctx, name, "owner_a", session, 0, 100)
	require.NoError(t, err)
	other := newTestRegistryLike(t, r)
	moved := false
	lossy(r, func(_ int, _ string) lossPlan {
		if moved {
			return lossPlan{}
		}
		moved = true
		return lossPlan{before: func() {
			// Another process of the host extends between the read and the
			// conditional write.
			_, err := other.Extend(ctx, name, "owner_a", session, 100, 500)
			assert.NoError(t, err)
		}}
	})
	err = r.Release(ctx, name, "owner_a", 200)
	require.ErrorIs(t, err, registry.ErrMarkMoved)
	got, err := r.Get(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, uint64(500), got.Reserved)
	assert.Equal(t, registry.StateActive, got.State)
	require.NoError(t, r.Release(ctx, name, "owner_a", 500))
}

// newTestRegistryLike opens another registry on r's keyspace and table.
func newTestRegistryLike(t *testing.T, r *Registry) *Registry {
	t.Helper()
	other, err := NewRegistry(testCtx(t), Config{Hosts: requireCassandra(t), Keyspace: r.ks, Table: r.tbl, NoCreate: true})
	require.NoError(t, err)
	t.Cleanup(other.Close)
	return other
}

// A later claim by the same owner (a restart, or a copy of the counter
// directory) replaces the session: the earlier session can no longer move
// the mark, even with the right current value.
func testExtendOldSessionRefused(t *testing.T, r registry.Registry, raw func() any) {
	ctx := testCtx(t)
	name := testName(t)
	h1 := mustClaim(t, ctx, r, name, "owner_a")
	_, err := r.Extend(ctx, name, "owner_a", h1.Session, h1.Reserved, 100)
	require.NoError(t, err)
	h2 := mustClaim(t, ctx, r, name, "owner_a")
	require.NotEqual(t, h1.Session, h2.Session, "each claim has a session of its own")
	require.Equal(t, uint64(100), h2.Reserved)

	before := raw()
	_, err = r.Extend(ctx, name, "owner_a", h1.Session, 100, 200)
	require.ErrorIs(t, err, snapid.ErrNameTaken)
	assert.Equal(t, before, raw(), "nothing changed")
	got, err := r.Get(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, uint64(100), got.Reserved, "the mark is unchanged")

	_, err = r.Extend(ctx, name, "owner_a", h2.Session, 100, 200)
	require.NoError(t, err, "the current session extends")
}

// The in-memory registry is held to the same by the conformance suite
// (registrytest, ExtendConditionalOnSession).
func TestExtendOldSessionRefused(t *testing.T) {
	t.Run("cassandra", func(t *testing.T) {
		_, _, r := oneRegistry(t)
		var name string
		testExtendOldSessionRefused(t, &nameSpy{Registry: r, name: &name}, func() any {
			row, _ := rawRow(t, r, name)
			return row
		})
	})
}

// nameSpy records the name of the last claim, for raw reads of its row.
type nameSpy struct {
	registry.Registry
	name *string
}

func (s *nameSpy) Claim(ctx context.Context, c registry.Claim) (registry.Holder, error) {
	*s.name = c.Name
	return s.Registry.Claim(ctx, c)
}

// A claim whose reply was lost is resolved by a serial read, and a
// Generator's Stats count it as resolved, not as applied.
func TestCassandraResolvedOutcomeCounted(t *testing.T) {
	k := newTestKeyspace(t)
	r := k.registry(t)
	lost := true
	lossy(r, func(int, string) lossPlan {
		p := lossPlan{loseReply: lost, err: errOverloaded}
		lost = false
		return p
	})
	path := filepath.Join(t.TempDir(), "counter.u64")
	g, err := snapid.OpenContext(testCtx(t), path, testName(t), snapid.Config{
		Registry:   &snapid.RegistryConfig{Registry: r},
		NoSync:     true,
		BindingDir: hostRecords(t, "host"),
	})
	require.NoError(t, err)
	defer g.Close()
	counts := map[string]uint64{}
	for _, c := range g.Stats().Registry.Calls {
		if c.Call == "claim" {
			counts[c.Outcome] = c.Count
		}
	}
	assert.Equal(t, map[string]uint64{engine.RegistryApplied: 0, engine.RegistryConditionFailed: 0,
		engine.RegistryResolved: 1, engine.RegistryError: 0}, counts)
}
