package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A planned hand-over (release on the old host, register on the new one)
// is the normal path: the new host's counter starts at the name's mark
// with a calm notice, never the alarm of a crash, a restore or a
// take-over. A forced take-over of an active holder still raises it.
func TestPlannedHandOverDoesNotAlarm(t *testing.T) {
	const alarm = "after a crash, a restore or a take-over"
	a, _, _ := registryEnv(t)
	a.vars["SNAPID_NAME"] = "web_1"
	r := a.run(t, "next", "-n", "3")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = a.run(t, "release")
	require.Equal(t, exitOK, r.code, r.stderr)

	b := newFakeEnv(t) // the new host: a counter of its own
	b.vars["SNAPID_CASSANDRA"], b.vars["SNAPID_KEYSPACE"], b.vars["SNAPID_NAME"] = a.vars["SNAPID_CASSANDRA"], a.vars["SNAPID_KEYSPACE"], "web_1"
	r = b.run(t, "register")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.NotContains(t, r.stderr, alarm)
	assert.NotContains(t, r.stderr, "warning")
	r = b.run(t, "next")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "web_1-4\n", r.stdout, "the new host goes on after the old one's last id")
	assert.NotContains(t, r.stderr, alarm)

	// A take-over of the active holder (b) by a third counter: the alarm.
	c := newFakeEnv(t)
	for k, v := range b.vars {
		if k != "SNAPID_BINDING_DIR" {
			c.vars[k] = v
		}
	}
	r = c.run(t, "register", "--force", "--start", "2")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, alarm)
	assert.Equal(t, 1, strings.Count(r.stderr, "snapctl: warning:"), r.stderr)
}
