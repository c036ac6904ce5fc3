package claim

import (
	"log/slog"
	"sync"
	"time"
)

// failureSummaryInterval is how often a failure that goes on is logged
// again, as one summary line.
const failureSummaryInterval = 5 * time.Minute

// failureLog logs a failure that repeats (an extension of the reserved
// range or a heartbeat while the registry is away) as one warning when it
// starts, then at most one summary line every failureSummaryInterval while
// it lasts, and one line when it ends: an outage does not flood the log,
// and its end is visible. It is safe for concurrent use.
type failureLog struct {
	log  *slog.Logger
	what string // what fails, e.g. "extending the reserved range"
	hint string // what it means for the caller, on the first line
	now  func() time.Time

	mu       sync.Mutex
	since    time.Time // when the failure started; zero while all is well
	failures int       // since it started
	unlogged int       // since the last line
	lastLine time.Time
}

func newFailureLog(log *slog.Logger, now func() time.Time, what, hint string) *failureLog {
	return &failureLog{log: log, now: now, what: what, hint: hint}
}

// failed records a failure; attrs go on each line logged.
func (f *failureLog) failed(err error, attrs ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	f.failures++
	if f.since.IsZero() {
		f.since, f.lastLine, f.unlogged = now, now, 0
		msg := "snapid: " + f.what + " failed"
		if f.hint != "" {
			msg += "; " + f.hint
		}
		f.log.Warn(msg, append(attrs, "err", err)...)
		return
	}
	f.unlogged++
	if now.Sub(f.lastLine) >= failureSummaryInterval {
		f.log.Warn("snapid: "+f.what+" still failing", append(attrs,
			"failures", f.unlogged, "failing_for", now.Sub(f.since).Round(time.Second), "err", err)...)
		f.lastLine, f.unlogged = now, 0
	}
}

// succeeded ends a failure, if one was going on, with one line.
func (f *failureLog) succeeded(attrs ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.since.IsZero() {
		return
	}
	f.log.Info("snapid: "+f.what+" works again", append(attrs,
		"failures", f.failures, "failed_for", f.now().Sub(f.since).Round(time.Second))...)
	f.since, f.failures, f.unlogged = time.Time{}, 0, 0
}
