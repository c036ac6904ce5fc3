package cassandra

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/cql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// errReadTimeout is what a SERIAL read answers while a node rejoins.
var errReadTimeout = testRequestError{code: gocql.ErrCodeReadTimeout, msg: "Operation timed out - received only 1 responses."}

func TestRetryableReadClassification(t *testing.T) {
	retryable := map[string]error{
		"read timeout":   errReadTimeout,
		"write timeout":  testRequestError{code: gocql.ErrCodeWriteTimeout},
		"unavailable":    testRequestError{code: gocql.ErrCodeUnavailable},
		"read failure":   testRequestError{code: gocql.ErrCodeReadFailure},
		"cas unknown":    testRequestError{code: gocql.ErrCodeCASWriteUnknown},
		"overloaded":     errOverloaded,
		"bootstrapping":  testRequestError{code: gocql.ErrCodeBootstrapping},
		"client timeout": fmt.Errorf("wrapped: %w", gocql.ErrTimeoutNoResponse),
		"conn closed":    gocql.ErrConnectionClosed,
		"no connections": gocql.ErrNoConnections,
		"eof":            io.EOF,
	}
	definite := map[string]error{
		"syntax":         testRequestError{code: gocql.ErrCodeSyntax},
		"invalid":        testRequestError{code: gocql.ErrCodeInvalid},
		"unauthorized":   testRequestError{code: gocql.ErrCodeUnauthorized},
		"credentials":    testRequestError{code: gocql.ErrCodeCredentials},
		"config":         testRequestError{code: gocql.ErrCodeConfig},
		"server":         testRequestError{code: gocql.ErrCodeServer},
		"session closed": gocql.ErrSessionClosed,
		"context":        context.Canceled,
		"anything else":  errors.New("something else"),
	}
	for what, err := range retryable {
		assert.True(t, retryableRead(err), "%s is retried", what)
	}
	for what, err := range definite {
		assert.False(t, retryableRead(err), "%s is not retried", what)
	}
}

// A read failing twice with errors that pass (a node rejoining) and then
// succeeding succeeds: Get and the serial read that resolves an unknown
// outcome.
func TestReadRetriedUntilItSucceeds(t *testing.T) {
	k := newTestKeyspace(t)
	r := k.registry(t)
	ctx := testCtx(t)
	h, err := r.Claim(ctx, testClaim(testName(t), "owner_a"))
	require.NoError(t, err)
	l := lossy(r, nil)

	l.readFailures = []error{errReadTimeout, testRequestError{code: gocql.ErrCodeUnavailable}}
	got, err := r.Get(ctx, h.Name)
	require.NoError(t, err)
	assert.Equal(t, h.Owner, got.Owner)
	assert.Equal(t, 3, l.reads, "two failures, then the read that succeeded")

	// An extension whose reply is lost, resolved by a serial read that
	// fails twice first.
	l.reads = 0
	l.plan = func(n int, _ string) lossPlan {
		if n == 1 {
			return lossPlan{loseReply: true, err: errCASTimeout}
		}
		return lossPlan{}
	}
	l.readFailures = []error{errReadTimeout, errReadTimeout}
	ext, err := r.Extend(ctx, h.Name, h.Owner, h.Session, h.Reserved, h.Reserved+100)
	require.NoError(t, err)
	assert.Equal(t, h.Reserved+100, ext.Reserved)
	assert.Equal(t, 3, l.reads)
	assert.Equal(t, 1, l.casCalls, "the write is not sent again: its outcome was resolved as applied")
}

// A read that keeps failing is retried until the caller's deadline, and the
// last error is returned, wrapped.
func TestReadRetryEndsAtDeadline(t *testing.T) {
	k := newTestKeyspace(t)
	r := k.registry(t)
	h, err := r.Claim(testCtx(t), testClaim(testName(t), "owner_a"))
	require.NoError(t, err)
	l := lossy(r, nil)
	l.readErr = errReadTimeout
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = r.Get(ctx, h.Name)
	took := time.Since(start)
	require.Error(t, err)
	assert.ErrorIs(t, err, snapid.ErrRegistry)
	assert.ErrorIs(t, err, errReadTimeout, "the last error is wrapped")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Greater(t, l.reads, 2)
	assert.Less(t, l.reads, 40, "backoff grows")
	assert.Less(t, took, 2*time.Second, "it stops at the deadline")
}

// A definite error (syntax, unauthorized) is returned at once.
func TestReadNotRetriedOnDefiniteError(t *testing.T) {
	k := newTestKeyspace(t)
	r := k.registry(t)
	ctx := testCtx(t)
	h, err := r.Claim(ctx, testClaim(testName(t), "owner_a"))
	require.NoError(t, err)
	l := lossy(r, nil)
	for _, e := range []error{testRequestError{code: gocql.ErrCodeSyntax, msg: "line 1:0 no viable alternative"},
		testRequestError{code: gocql.ErrCodeUnauthorized, msg: "no SELECT permission"}} {
		l.reads = 0
		l.readErr = e
		_, err = r.Get(ctx, h.Name)
		assert.ErrorIs(t, err, e)
		assert.ErrorIs(t, err, snapid.ErrRegistry)
		assert.Equal(t, 1, l.reads, "%v is not retried", e)
	}
}

// retryRead's own loop: without a deadline the budget bounds it; the
// waits grow.
func TestRetryReadBackoff(t *testing.T) {
	var calls []time.Time
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	err := retryRead(ctx, nil, "test", "x", func(context.Context) error {
		calls = append(calls, time.Now())
		return errReadTimeout
	})
	require.ErrorIs(t, err, errReadTimeout)
	require.GreaterOrEqual(t, len(calls), 4)
	first, last := calls[1].Sub(calls[0]), calls[len(calls)-1].Sub(calls[len(calls)-2])
	assert.Greater(t, last, first, "the waits grow")
	assert.GreaterOrEqual(t, first, readRetryBase/2)
}

// flakySeqQuerier fails its reads with the errors in fails, one each, then
// answers rows; its batches must not be called.
type flakySeqQuerier struct {
	cql.SeqQuerier
	fails []error
	reads int
	rows  []cql.SeqRow
}

func (f *flakySeqQuerier) next() error {
	f.reads++
	if len(f.fails) > 0 {
		err := f.fails[0]
		f.fails = f.fails[1:]
		return err
	}
	return nil
}

func (f *flakySeqQuerier) ReadPartition(context.Context, gocql.Consistency, string, string) ([]cql.SeqRow, error) {
	if err := f.next(); err != nil {
		return nil, err
	}
	return f.rows, nil
}

func (f *flakySeqQuerier) ReadAllGlobal(context.Context) ([]cql.SeqRow, error) {
	if err := f.next(); err != nil {
		return nil, err
	}
	return f.rows, nil
}

// Sequence reads (SequenceStatus, the serial reads of grants and leases)
// are retried the same way.
func TestSequenceReadsRetried(t *testing.T) {
	rows := []cql.SeqRow{{Seq: "orders", Part: cql.PartGlobal}}
	f := &flakySeqQuerier{fails: []error{errReadTimeout, testRequestError{code: gocql.ErrCodeUnavailable}}, rows: rows}
	q := retryReads(f, nil)
	got, err := q.ReadPartition(testCtx(t), gocql.Serial, "orders", cql.PartGlobal)
	require.NoError(t, err)
	assert.Equal(t, rows, got)
	assert.Equal(t, 3, f.reads)

	f.reads, f.fails = 0, []error{errReadTimeout}
	got, err = q.ReadAllGlobal(testCtx(t))
	require.NoError(t, err)
	assert.Equal(t, rows, got)
	assert.Equal(t, 2, f.reads)

	syntax := testRequestError{code: gocql.ErrCodeSyntax}
	f.reads, f.fails = 0, []error{syntax}
	_, err = q.ReadPartition(testCtx(t), gocql.LocalQuorum, "orders", cql.PartGlobal)
	require.ErrorIs(t, err, syntax)
	assert.Equal(t, 1, f.reads)
}
