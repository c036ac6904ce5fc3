package cassandra

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/cql"
)

// Reads change nothing, so a read that failed for a reason that may pass
// (a timeout, too few replicas up, a node still joining or overloaded, a
// lost connection) is sent again, after a wait that doubles from
// readRetryBase up to readRetryCap with random jitter, until it succeeds,
// fails for a definite reason, or the caller's context ends. A context
// without a deadline gets readRetryBudget. Writes are never retried here:
// an LWT whose outcome is unknown is resolved by a read (runLWT), and that
// read is retried.
const (
	readRetryBase   = 20 * time.Millisecond
	readRetryCap    = time.Second
	readRetryBudget = 30 * time.Second
)

// retryableRead reports whether a read that failed with err may succeed if
// sent again. Definite errors are not: statements Cassandra refuses
// (syntax, invalid, unauthorized, credentials, config, protocol, already
// exists, unprepared), a closed session, the caller's own context ending,
// and any error this list does not name.
func retryableRead(err error) bool {
	var re gocql.RequestError
	if errors.As(err, &re) {
		switch re.Code() {
		case gocql.ErrCodeUnavailable, gocql.ErrCodeReadTimeout, gocql.ErrCodeReadFailure,
			gocql.ErrCodeWriteTimeout, gocql.ErrCodeWriteFailure, gocql.ErrCodeCASWriteUnknown,
			gocql.ErrCodeOverloaded, gocql.ErrCodeBootstrapping:
			// A serial read may have to finish an LWT left in flight,
			// which can time out as a write (type CAS).
			return true
		}
		return false
	}
	switch {
	case errors.Is(err, gocql.ErrTimeoutNoResponse), errors.Is(err, gocql.ErrConnectionClosed),
		errors.Is(err, gocql.ErrNoConnections), errors.Is(err, gocql.ErrUnavailable),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// retryRead runs read until it succeeds, fails with an error that is not
// retryableRead, or ctx ends (then the last error is returned, wrapped
// with how many attempts were made, and wrapping ctx's error too). op and
// what name the read in the log.
func retryRead(ctx context.Context, log *slog.Logger, op, what string, read func(ctx context.Context) error) error {
	return retryReadWait(ctx, log, realWait, op, what, read)
}

// retryReadWait is retryRead waiting between attempts with wait.
func retryReadWait(ctx context.Context, log *slog.Logger, wait waitFunc, op, what string, read func(ctx context.Context) error) error {
	wait = orReal(wait)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, readRetryBudget)
		defer cancel()
	}
	start := time.Now()
	pause := readRetryBase
	for attempt := 1; ; attempt++ {
		err := read(ctx)
		if err == nil {
			if attempt > 1 && log != nil {
				log.Info("snapid: registry read succeeded after retries", "op", op, "what", what, "attempts", attempt)
			}
			return nil
		}
		if !retryableRead(err) || ctx.Err() != nil {
			if attempt == 1 {
				return err
			}
			return readGaveUp(ctx, err, attempt, start)
		}
		if log != nil {
			log.Debug("snapid: registry read failed; retrying", "op", op, "what", what, "attempt", attempt, "err", err)
		}
		// Jitter: a random wait in [wait/2, wait].
		d := pause/2 + rand.N(pause/2+1)
		if wait(ctx, d) != nil {
			return readGaveUp(ctx, err, attempt, start)
		}
		pause = min(2*pause, readRetryCap)
	}
}

func readGaveUp(ctx context.Context, last error, attempts int, start time.Time) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (read %d times in %v until the deadline: %w)", last, attempts, time.Since(start).Round(time.Millisecond), cerr)
	}
	return fmt.Errorf("%w (read %d times in %v)", last, attempts, time.Since(start).Round(time.Millisecond))
}

// serialRead reads the row of name at the serial consistency, retrying as
// retryRead does.
func (r *Registry) serialRead(ctx context.Context, op string, rec *cql.Record, name string) (found bool, err error) {
	err = retryReadWait(ctx, r.log, r.wait, op, name, func(ctx context.Context) error {
		*rec = cql.Record{}
		var rerr error
		found, rerr = r.q.SerialRead(ctx, rec, name)
		return rerr
	})
	return found, err
}

// retryingSeqQuerier retries the reads of a cql.SeqQuerier as retryRead
// does; its conditional batches are sent once, as they are.
type retryingSeqQuerier struct {
	cql.SeqQuerier
	log  *slog.Logger
	wait waitFunc // nil: realWait
}

// retryReads wraps q so that its reads are retried.
func retryReads(q cql.SeqQuerier, log *slog.Logger) cql.SeqQuerier {
	return &retryingSeqQuerier{SeqQuerier: q, log: log}
}

func (q *retryingSeqQuerier) ReadPartition(ctx context.Context, cons gocql.Consistency, seq, part string) (rows []cql.SeqRow, err error) {
	err = retryReadWait(ctx, q.log, q.wait, "sequence read", seq+"/"+part, func(ctx context.Context) error {
		var rerr error
		rows, rerr = q.SeqQuerier.ReadPartition(ctx, cons, seq, part)
		return rerr
	})
	return rows, err
}

func (q *retryingSeqQuerier) ReadAllGlobal(ctx context.Context) (rows []cql.SeqRow, err error) {
	err = retryReadWait(ctx, q.log, q.wait, "sequence list", "GLOBAL", func(ctx context.Context) error {
		var rerr error
		rows, rerr = q.SeqQuerier.ReadAllGlobal(ctx)
		return rerr
	})
	return rows, err
}
