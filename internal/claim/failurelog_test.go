package claim

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A failure that repeats is one warning when it starts, one summary per
// interval while it lasts (counting the failures since the last line), and
// one line when it ends; a new failure after that is a new first line.
func TestFailureLogSummarises(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	now := time.Unix(1_000_000, 0)
	f := newFailureLog(log, func() time.Time { return now }, "extending the reserved range", "ids keep flowing until the mark")
	lines := func() []string {
		s := strings.TrimSpace(buf.String())
		buf.Reset()
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	boom := errors.New("registry unreachable")

	f.succeeded("name", "web_1")
	assert.Empty(t, lines(), "nothing to say while all is well")

	for range 39 {
		f.failed(boom, "name", "web_1")
		now = now.Add(time.Second)
	}
	got := lines()
	if assert.Len(t, got, 1, "39 failures within the interval: one line") {
		assert.Contains(t, got[0], "level=WARN")
		assert.Contains(t, got[0], "extending the reserved range failed; ids keep flowing until the mark")
		assert.Contains(t, got[0], "name=web_1")
		assert.Contains(t, got[0], `err="registry unreachable"`)
	}

	now = now.Add(failureSummaryInterval)
	f.failed(boom, "name", "web_1")
	got = lines()
	if assert.Len(t, got, 1, "a summary once the interval has passed") {
		assert.Contains(t, got[0], "still failing")
		assert.Contains(t, got[0], "failures=39", "the failures since the first line")
	}
	f.failed(boom, "name", "web_1")
	assert.Empty(t, lines(), "no second summary within the interval")

	now = now.Add(time.Minute)
	f.succeeded("name", "web_1")
	got = lines()
	if assert.Len(t, got, 1) {
		assert.Contains(t, got[0], "level=INFO")
		assert.Contains(t, got[0], "extending the reserved range works again")
		assert.Contains(t, got[0], "failures=41")
	}
	f.succeeded("name", "web_1")
	assert.Empty(t, lines(), "recovery is said once")

	f.failed(boom, "name", "web_1")
	got = lines()
	if assert.Len(t, got, 1) {
		assert.Contains(t, got[0], "extending the reserved range failed")
	}
}
