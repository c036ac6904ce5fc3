package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// register --force --start 5 on a counter that already issued 7 says why
// the next number is 8, not 5.
func TestRegisterForceStartBelowCounterSaysWhy(t *testing.T) {
	a, _, _ := registryEnv(t)
	a.vars["SNAPID_NAME"] = "web_1"
	r := a.run(t, "next", "-n", "7")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = a.run(t, "register", "--force", "--start", "5")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "next number 8")
	assert.Contains(t, r.stderr, "the next number is 8, not --start 5")
	assert.Contains(t, r.stderr, "is ever lowered")
}

// next without --counter on the machine that holds the name with another
// counter says the holder is this machine and points at --counter, not at
// a forced take-over of its own name; and, for a counter that is gone, at
// a forced release (the way docs/operations.md gives).
func TestNextHeldByThisMachineHint(t *testing.T) {
	a, _, _ := registryEnv(t)
	a.vars["SNAPID_NAME"] = "web_1"
	a.vars["SNAPID_COUNTER"] = filepath.Join(t.TempDir(), "server.u64")
	r := a.run(t, "register")
	require.Equal(t, exitOK, r.code, r.stderr)
	delete(a.vars, "SNAPID_COUNTER") // the per-user counter
	// Where this host's record of web_1 is kept, the record refuses the
	// other counter first, pointing at the one it names.
	for _, cmd := range []string{"next", "register"} {
		line := requireOneErrorLine(t, a.run(t, cmd))
		assert.Contains(t, line, "server.u64")
		assert.Contains(t, line, "--counter or SNAPID_COUNTER")
		assert.NotContains(t, line, "register --force", "no take-over of its own name")
	}
	// A program of this machine keeping its records in another place
	// (another SNAPID_BINDING_DIR): the registry's refusal says the holder
	// is this machine.
	a.vars["SNAPID_BINDING_DIR"] = t.TempDir()
	for _, cmd := range []string{"next", "register"} {
		line := requireOneErrorLine(t, a.run(t, cmd))
		assert.Contains(t, line, "node name taken")
		assert.Contains(t, line, "this very machine")
		assert.Contains(t, line, "--counter (or SNAPID_COUNTER)")
		assert.NotContains(t, line, "'snapctl register --force", "no take-over of its own name")
		assert.Contains(t, line, "if that counter is gone (removed), release the name first with 'snapctl release --force --start N'")
	}
}

// status and check-names give one verdict on a name without a row: with
// a registry configured, status --name vm needs attention (exit 1) as
// check-names reports not_registered (exit 1).
func TestStatusAgreesWithCheckNamesOnUnregistered(t *testing.T) {
	a, _, _ := registryEnv(t)
	r := a.run(t, "register", "--name", "web_1") // creates the registry
	require.Equal(t, exitOK, r.code, r.stderr)
	b := newFakeEnv(t)
	r = b.run(t, "next", "--name", "vm") // a counter used without a registry
	require.Equal(t, exitOK, r.code, r.stderr)
	b.vars["SNAPID_CASSANDRA"], b.vars["SNAPID_KEYSPACE"] = a.vars["SNAPID_CASSANDRA"], a.vars["SNAPID_KEYSPACE"]
	r = b.run(t, "check-names", "--name", "vm")
	require.Equal(t, exitProblems, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "not_registered")
	st, r := statusJSON(t, b, "--name", "vm")
	require.Equal(t, exitProblems, r.code, r.stdout+r.stderr)
	assert.Contains(t, strings.Join(st.Attention, "|"), "no row in the registry")
}

// One counter, one name, and one verdict: on a host whose counter holds
// web_2, register as web_1 is refused before any registry write, status
// for web_1 needs attention, and check-names finds no shared owner; after
// a release of another name, status for web_2 says its programs refuse it,
// as next does.
func TestSecondNameOnCounterOneVerdict(t *testing.T) {
	a, _, _ := registryEnv(t)
	r := a.run(t, "register", "--name", "web_2")
	require.Equal(t, exitOK, r.code, r.stderr)
	line := requireOneErrorLine(t, a.run(t, "register", "--name", "web_1"))
	assert.Contains(t, line, `holds the name "web_2"`)
	assert.Regexp(t, `one counter (file )?serves one name`, line)
	assert.Equal(t, 1, strings.Count(line, "nothing was changed"), line)
	line = requireOneErrorLine(t, a.run(t, "next", "--name", "web_1"))
	assert.Contains(t, line, `holds the name "web_2"`)
	r = a.run(t, "check-names", "--name", "web_2")
	assert.NotContains(t, r.stdout, "shared_owner")
	assert.NotContains(t, r.stdout, "web_1")
	st, r := statusJSON(t, a, "--name", "web_1")
	require.Equal(t, exitProblems, r.code, r.stdout+r.stderr)
	assert.Contains(t, strings.Join(st.Attention, "|"), `this counter holds "web_2"`)
	r = a.run(t, "next", "--name", "web_2")
	require.Equal(t, exitOK, r.code, r.stderr)
	_, r = statusJSON(t, a, "--name", "web_2")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)

	// The host released web_2: next refuses any name, and status says so.
	r = a.run(t, "release", "--name", "web_2")
	require.Equal(t, exitOK, r.code, r.stderr)
	requireOneErrorLine(t, a.run(t, "next", "--name", "web_3"))
	st, r = statusJSON(t, a, "--name", "web_3")
	require.Equal(t, exitProblems, r.code, r.stdout+r.stderr)
	assert.Contains(t, strings.Join(st.Attention, "|"), `released "web_2"`)
}

// check-names with SNAPID_COUNTER set and no name audits the name that
// counter is in use under, as status does, not one derived from the host
// name (which it would call not registered, advising a register that is
// then refused): one verdict.
func TestCheckNamesAuditsTheCounterName(t *testing.T) {
	a, _, _ := registryEnv(t)
	a.vars["SNAPID_COUNTER"] = filepath.Join(t.TempDir(), "counter.u64")
	r := a.run(t, "register", "--name", "web_2")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = a.run(t, "check-names")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	assert.NotContains(t, r.stdout, "not_registered")
	assert.NotContains(t, r.stdout, a.host)
	assert.Contains(t, r.stderr, `using "web_2", the name the counter`)
	st, r := statusJSON(t, a)
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	assert.Equal(t, "web_2", st.Name)
}

// --username without the password variable says the variable is
// missing, before anything connects.
func TestUsernameWithoutPasswordVariable(t *testing.T) {
	f := newFakeEnv(t)
	f.vars["SNAPID_CASSANDRA"] = "127.0.0.1:1"
	for _, cmd := range [][]string{{"next", "--name", "web_1"}, {"names"}, {"setup", "--replication", "1"}} {
		line := requireOneErrorLine(t, f.run(t, append(cmd, "--username", "alice")...))
		assert.Contains(t, line, "SNAPID_CASSANDRA_PASSWORD is not set", cmd)
		assert.NotContains(t, line, "reachable", cmd)
	}
	requireEmptyDir(t, f.home)
}
