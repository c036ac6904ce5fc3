package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// statusJSON runs status --json and decodes it.
func statusJSON(t *testing.T, f *fakeEnv, args ...string) (statusReport, result) {
	t.Helper()
	r := f.run(t, append([]string{"status", "--json"}, args...)...)
	var st statusReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), "stdout %q stderr %q", r.stdout, r.stderr)
	return st, r
}

// status: exit 1 before the counter exists, 0 once registered and held,
// 1 once another host took the name over (the cached mark of show says
// it is cached); register prints the owner token's fingerprint.
func TestStatusAndRegister(t *testing.T) {
	t.Parallel()
	a, _, ks := registryEnvBare(t, nil)
	a.vars["SNAPID_NAME"] = "web_1"
	st, r := statusJSON(t, a)
	require.Equal(t, exitProblems, r.code, r.stderr)
	assert.Contains(t, strings.Join(st.Attention, "|"), "no counter file")
	assert.Contains(t, strings.Join(st.Attention, "|"), "does not exist; check --keyspace", "no registry yet")

	r = a.run(t, "setup", "--replication", "1")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = a.run(t, "register")
	require.Equal(t, exitOK, r.code, r.stderr)
	path := filepath.Join(a.home, ".local", "state", "snapid", "counter.u64")
	tok, err := admin.OwnerToken(path)
	require.NoError(t, err)
	assert.Contains(t, r.stdout, "(owner "+registry.OwnerID(tok)+",")
	assert.NotContains(t, r.stdout, tok, "the token is a secret")

	st, r = statusJSON(t, a)
	require.Equal(t, exitOK, r.code, "%s %s", r.stdout, r.stderr)
	assert.Empty(t, st.Attention)
	assert.True(t, st.Counter.SizeOK)
	assert.Equal(t, "0", st.Counter.LastIssued)
	assert.Equal(t, "-rw-------", st.Counter.Mode)
	require.NotNil(t, st.Files)
	assert.Equal(t, registry.OwnerID(tok), st.Files.OwnerID)
	assert.Equal(t, "web_1", st.Files.SessionName)
	require.NotNil(t, st.Processes)
	assert.Equal(t, 0, *st.Processes)
	require.NotNil(t, st.Registry)
	assert.True(t, st.Registry.Found)
	assert.True(t, st.Registry.ThisHost)
	assert.True(t, st.Registry.Session)
	assert.Equal(t, registry.StateActive, st.Registry.State)
	r = a.run(t, "status")
	require.Equal(t, exitOK, r.code)
	assert.Contains(t, r.stdout, "held by this host, current session")
	assert.Contains(t, r.stdout, "status: healthy")

	// A copy of the counter directory claims the name on this machine: the
	// row is this owner token's, under another session. Without running
	// processes that is no matter (the next start claims again); with
	// them, they are superseded.
	// (In the place that holds this host's record of web_1 the copy is
	// another counter file under the name, refused; it claims from a
	// place of its own, as a program of this machine keeping its records
	// elsewhere.)
	cp := t.TempDir()
	testfs.CopyFiles(t, filepath.Dir(path), cp, "counter.u64", "counter.u64.owner")
	assert.Contains(t, requireError(t, a.run(t, "register", "--counter", filepath.Join(cp, "counter.u64"))), "another counter file")
	place := a.vars["SNAPID_BINDING_DIR"]
	a.vars["SNAPID_BINDING_DIR"] = t.TempDir()
	r = a.run(t, "register", "--counter", filepath.Join(cp, "counter.u64"))
	a.vars["SNAPID_BINDING_DIR"] = place
	require.Equal(t, exitOK, r.code, r.stderr)
	st, r = statusJSON(t, a)
	require.Equal(t, exitOK, r.code, "%v", st.Attention)
	assert.True(t, st.Registry.ThisHost)
	assert.False(t, st.Registry.Session)
	fd, err := syscall.Open(path+".presence", syscall.O_RDONLY, 0)
	require.NoError(t, err)
	require.NoError(t, syscall.Flock(fd, syscall.LOCK_SH)) // a running process
	st, r = statusJSON(t, a)
	syscall.Close(fd)
	require.Equal(t, exitProblems, r.code)
	// At least the lock taken above (the whole package's tests run in one
	// process, and in-process commands' locks can still be let go).
	assert.GreaterOrEqual(t, *st.Processes, 1)
	assert.Contains(t, strings.Join(st.Attention, "|"), "superseded")

	// Host b takes web_1 over.
	b := newFakeEnv(t)
	b.vars = map[string]string{"SNAPID_BINDING_DIR": b.vars["SNAPID_BINDING_DIR"], "SNAPID_CASSANDRA": a.vars["SNAPID_CASSANDRA"], "SNAPID_KEYSPACE": ks, "SNAPID_NAME": "web_1"}
	r = b.run(t, "register", "--force", "--start", "1000")
	require.Equal(t, exitOK, r.code, r.stderr)
	st, r = statusJSON(t, a)
	require.Equal(t, exitProblems, r.code)
	require.Len(t, st.Attention, 1, "%v", st.Attention)
	assert.Contains(t, st.Attention[0], "held by another owner")
	assert.False(t, st.Registry.ThisHost)
	r = a.run(t, "status")
	require.Equal(t, exitProblems, r.code)
	assert.Contains(t, r.stdout, "status: 1 item needs attention")
	r = a.run(t, "show")
	require.Equal(t, exitOK, r.code)
	assert.Contains(t, r.stdout, "cached on this host")

	// A host without an owner token configured with the name b holds.
	c := newFakeEnv(t)
	c.vars = map[string]string{"SNAPID_BINDING_DIR": c.vars["SNAPID_BINDING_DIR"], "SNAPID_CASSANDRA": a.vars["SNAPID_CASSANDRA"], "SNAPID_KEYSPACE": ks, "SNAPID_NAME": "web_1"}
	writeCounterAt(t, c)
	st, r = statusJSON(t, c)
	require.Equal(t, exitProblems, r.code)
	assert.Contains(t, strings.Join(st.Attention, "|"), "no owner token")

	// b releases the name: a normal state; its status says its programs
	// refuse it, and needs nothing done.
	r = b.run(t, "release")
	require.Equal(t, exitOK, r.code, r.stderr)
	st, r = statusJSON(t, b)
	require.Equal(t, exitOK, r.code, "%v", st.Attention)
	assert.Equal(t, "web_1", st.Files.Released)
	assert.Empty(t, st.Attention)
	assert.Contains(t, strings.Join(st.Notes, "|"), "refuse the name until 'snapctl register'")

	// Registered, but no registry configured: status cannot check the row.
	delete(a.vars, "SNAPID_CASSANDRA")
	st, r = statusJSON(t, a)
	require.Equal(t, exitProblems, r.code)
	assert.Contains(t, strings.Join(st.Attention, "|"), "no registry is configured")
}

// A planned release is a normal state: status right after it, and after
// another host took the name it handed over, notes it and exits 0. A
// release the registry did not take (this host records the name as
// released, the registry still holds it for this counter) needs
// attention.
func TestStatusAfterRelease(t *testing.T) {
	t.Parallel()
	a, _, ks := registryEnv(t)
	a.vars["SNAPID_NAME"] = "web_1"
	r := a.run(t, "next", "-n", "3")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = a.run(t, "release")
	require.Equal(t, exitOK, r.code, r.stderr)
	st, r := statusJSON(t, a)
	require.Equal(t, exitOK, r.code, "%v", st.Attention)
	assert.Empty(t, st.Attention)
	require.Len(t, st.Notes, 1)
	assert.Contains(t, st.Notes[0], `this host released "web_1"`)
	assert.Equal(t, registry.StateReleased, st.Registry.State)
	r = a.run(t, "status")
	require.Equal(t, exitOK, r.code, r.stdout)
	assert.Contains(t, r.stdout, "released, last held by this host")
	assert.Contains(t, r.stdout, "\nnote: this host released \"web_1\": its programs refuse the name until 'snapctl register' claims it again\nstatus: healthy\n")

	// Host b takes the name over, as a hand-over does.
	b := newFakeEnv(t)
	b.vars = map[string]string{"SNAPID_BINDING_DIR": b.vars["SNAPID_BINDING_DIR"], "SNAPID_CASSANDRA": a.vars["SNAPID_CASSANDRA"], "SNAPID_KEYSPACE": ks, "SNAPID_NAME": "web_1"}
	r = b.run(t, "register")
	require.Equal(t, exitOK, r.code, r.stderr)
	st, r = statusJSON(t, a)
	require.Equal(t, exitOK, r.code, "%v", st.Attention)
	assert.Empty(t, st.Attention)
	assert.Contains(t, strings.Join(st.Notes, "|"), `"web_1" is held by host`)

	// A release that did not finish: this host's record says released,
	// the registry (here a stand-in that fails the release itself) still
	// holds the name for this counter.
	c := newFakeEnv(t)
	c.vars = map[string]string{"SNAPID_BINDING_DIR": c.vars["SNAPID_BINDING_DIR"], "SNAPID_CASSANDRA": a.vars["SNAPID_CASSANDRA"], "SNAPID_KEYSPACE": ks, "SNAPID_NAME": "web_2"}
	r = c.run(t, "next")
	require.Equal(t, exitOK, r.code, r.stderr)
	path := filepath.Join(c.home, ".local", "state", "snapid", "counter.u64")
	tok, err := admin.OwnerToken(path)
	require.NoError(t, err)
	mem := registrytest.NewRegistry()
	mem.Put(registry.Holder{Name: "web_2", Owner: tok, State: registry.StateActive, Reserved: 1})
	mem.SetHook(func(_ context.Context, op, _ string) error {
		if op == "release" {
			return fmt.Errorf("%w: timed out", registry.ErrRegistry)
		}
		return nil
	})
	_, err = admin.Release(context.Background(), mem, path, "web_2", admin.WithBindingDir(c.vars["SNAPID_BINDING_DIR"]))
	require.ErrorIs(t, err, registry.ErrRegistry)
	st, r = statusJSON(t, c)
	require.Equal(t, exitProblems, r.code)
	assert.Contains(t, strings.Join(st.Attention, "|"), "the release did not finish")
}

// writeCounterAt creates f's default counter holding 0.
func writeCounterAt(t *testing.T, f *fakeEnv) string {
	t.Helper()
	dir := filepath.Join(f.home, ".local", "state", "snapid")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	path := filepath.Join(dir, "counter.u64")
	writeCounter(t, path, 0)
	return path
}

// status sees a damaged counter (exit 1, with the repair), and cannot look
// at an unusable registry configuration (exit 2).
func TestStatusDamagedAndUnusable(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	f.vars["SNAPID_NAME"] = "web_1"
	path := writeCounterAt(t, f)
	require.NoError(t, os.WriteFile(path, []byte("abc"), 0o600))
	st, r := statusJSON(t, f)
	require.Equal(t, exitProblems, r.code)
	require.Len(t, st.Attention, 1)
	assert.Contains(t, st.Attention[0], "init --force --start N")
	assert.False(t, st.Counter.SizeOK)

	f.vars["SNAPID_NAME"] = "Bad-Name"
	requireError(t, f.run(t, "status"))
}

// names lists every row; check-names from an administrator's machine does
// not check its own host name, does with --name or --counter, and
// --stale 0 turns the stale check off.
func TestNamesAndCheckNamesFromAdmin(t *testing.T) {
	t.Parallel()
	a, s, ks := registryEnv(t)
	for _, name := range []string{"web_2", "web_1"} {
		a.vars["SNAPID_NAME"] = name
		a.vars["SNAPID_COUNTER"] = filepath.Join(t.TempDir(), "counter.u64")
		r := a.run(t, "register")
		require.Equal(t, exitOK, r.code, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := time.Now().Add(-72 * time.Hour)
	require.NoError(t, s.Admin.Query(fmt.Sprintf(`INSERT INTO %s.node_names (name, owner, hostname, state, last_seen, registered_at, reserved) VALUES ('old_host', 'o3', 'h3', 'active', ?, ?, 7)`, ks),
		old, old).ExecContext(ctx))

	admin := newFakeEnv(t)
	admin.host = "admin-box"
	admin.vars = map[string]string{"SNAPID_BINDING_DIR": admin.vars["SNAPID_BINDING_DIR"], "SNAPID_CASSANDRA": a.vars["SNAPID_CASSANDRA"], "SNAPID_KEYSPACE": ks}
	r := admin.run(t, "names")
	require.Equal(t, exitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 5, r.stdout)
	assert.Contains(t, lines[0], "NAME")
	assert.Contains(t, lines[1], "old_host")
	assert.Contains(t, lines[1], "h3")
	assert.Contains(t, lines[1], " 7 ")
	assert.Contains(t, lines[2], "web_1")
	assert.Contains(t, lines[3], "web_2")
	assert.Equal(t, "names: 3 rows", lines[4])
	r = admin.run(t, "names", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var out struct {
		Rows []struct {
			Name         string `json:"name"`
			ReservedUpTo string `json:"reserved_up_to"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Rows, 3)
	assert.Equal(t, "7", out.Rows[0].ReservedUpTo)
	requireError(t, newFakeEnv(t).run(t, "names"))

	kinds := func(args ...string) (int, map[string]bool) {
		r := admin.run(t, append([]string{"check-names", "--json"}, args...)...)
		require.NotEqual(t, exitFailure, r.code, r.stderr)
		var rep checkReport
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
		k := map[string]bool{}
		for _, p := range rep.Problems {
			k[p.Kind+":"+p.Name] = true
		}
		return r.code, k
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want map[string]bool
	}{
		// old_host was written as a version before node numbers wrote
		// its rows: no number, while the names registered since have one.
		{"admin machine", nil, exitProblems, map[string]bool{"stale:old_host": true, "no_number:old_host": true}},
		{"stale off", []string{"--stale", "0"}, exitProblems, map[string]bool{"no_number:old_host": true}},
		{"stale off, negative", []string{"--stale", "-1s"}, exitProblems, map[string]bool{"no_number:old_host": true}},
		{"--counter: the host name is checked", []string{"--stale", "0", "--counter", filepath.Join(t.TempDir(), "c.u64")}, exitProblems,
			map[string]bool{"not_registered:admin_box": true, "no_number:old_host": true}},
		{"--name without owner token", []string{"--stale", "0", "--name", "web_1"}, exitProblems,
			map[string]bool{"held_by_other:web_1": true, "no_number:old_host": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, k := kinds(tc.args...)
			assert.Equal(t, tc.code, code)
			assert.Equal(t, tc.want, k)
		})
	}
}

// release of a counter that never registered says there is nothing to
// release here, not to run init.
func TestReleaseNeverRegistered(t *testing.T) {
	t.Parallel()
	f, _, _ := registryEnv(t)
	f.vars["SNAPID_NAME"] = "web_1"
	writeCounterAt(t, f)
	line := requireError(t, f.run(t, "release"))
	assert.Contains(t, line, "never registered")
	assert.Contains(t, line, "release --force --start N")
	assert.NotContains(t, line, "snapctl init")
}

// status shows the host's sequence leases from their lease files, and a
// damaged lease file needs attention.
func TestStatusSequenceLeases(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	path := filepath.Join(t.TempDir(), "counter.u64")
	f.vars["SNAPID_COUNTER"], f.vars["SNAPID_NAME"] = path, "web_1"
	reg := registrytest.NewRegistry()
	ctx := context.Background()
	for _, name := range []string{"orders", "invoices"} {
		_, err := admin.CreateSequence(ctx, reg, name, 1, 1_000_000)
		require.NoError(t, err)
	}
	g, err := engine.Open(path, "web_1", engine.WithRegistry(reg), engine.WithSync(false), engine.WithBindingDir(f.vars["SNAPID_BINDING_DIR"]))
	require.NoError(t, err)
	orders, err := g.Sequence("orders", engine.SequenceLeaseSize(100))
	require.NoError(t, err)
	_, err = orders.NextN(30)
	require.NoError(t, err)
	invoices, err := g.Sequence("invoices", engine.SequenceLeaseSize(40))
	require.NoError(t, err)
	_, err = invoices.NextN(5)
	require.NoError(t, err)
	require.NoError(t, orders.Close())
	require.NoError(t, invoices.Close())
	// A lease taken ahead: Next past half of the first one.
	_, err = admin.CreateSequence(ctx, reg, "tickets", 1, 1_000_000)
	require.NoError(t, err)
	tickets, err := g.Sequence("tickets", engine.SequenceBlock(10), engine.SequenceLeaseSize(100))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := tickets.Next()
		require.NoError(t, err)
		l, err := tickets.Lease()
		return err == nil && l.AheadFirst != 0
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, tickets.Close())
	require.NoError(t, g.Close())

	st, r := statusJSON(t, f)
	require.Len(t, st.Sequences, 3)
	tk := st.Sequences[2]
	assert.Equal(t, "tickets", tk.Sequence)
	assert.Equal(t, [4]uint64{1, 100, 101, tk.AheadLast}, [4]uint64{tk.CurrentFirst, tk.CurrentLast, tk.AheadFirst, tk.AheadLast})
	assert.Greater(t, tk.AheadLast, uint64(101))
	assert.Equal(t, 100-tk.Next+1+tk.AheadLast-100, tk.LeftNumbers, "the rest of the current range and the range ahead")
	st.Sequences = st.Sequences[:2]
	require.Equal(t, exitProblems, r.code, "registered, and no registry given: %s", r.stdout)
	assert.Equal(t, []statusSequence{
		{Sequence: "invoices", CurrentFirst: 1, CurrentLast: 40, Next: 6, LeftNumbers: 35, CurrentClaim: true},
		{Sequence: "orders", CurrentFirst: 1, CurrentLast: 100, Next: 31, LeftNumbers: 70, CurrentClaim: true},
	}, st.Sequences)
	r = f.run(t, "status")
	assert.Contains(t, r.stdout, "sequence orders")
	assert.Contains(t, r.stdout, "[1, 100], next 31: 70 left\n")

	// The host starts again (a new claim, a new session) and has not used
	// the sequences since: their leases are of the earlier claim.
	g, err = engine.Open(path, "web_1", engine.WithRegistry(reg), engine.WithSync(false), engine.WithBindingDir(f.vars["SNAPID_BINDING_DIR"]))
	require.NoError(t, err)
	require.NoError(t, g.Close())
	st, _ = statusJSON(t, f)
	require.Len(t, st.Sequences, 3)
	assert.False(t, st.Sequences[1].CurrentClaim)
	r = f.run(t, "status")
	assert.Contains(t, r.stdout, "[1, 100], next 31: 70 left (leased under an earlier claim of this host)\n")

	require.NoError(t, os.WriteFile(path+".seq.invoices", []byte("not a lease file"), 0o600))
	st, r = statusJSON(t, f)
	require.Equal(t, exitProblems, r.code)
	assert.Contains(t, strings.Join(st.Attention, "|"), `the lease file of sequence "invoices" is damaged`)
	require.Len(t, st.Sequences, 2)
	assert.Equal(t, "orders", st.Sequences[0].Sequence)
}

// jsonNumbers returns the paths of the JSON numbers in doc.
func jsonNumbers(t *testing.T, doc string) []string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(doc), &v), doc)
	var out []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range x {
				walk(path+"[]", e)
			}
		case float64:
			out = append(out, path)
		}
	}
	walk("", v)
	return out
}

// status --json and show --json give every counter value and mark as a
// string (one type for numbers that may pass 2^53); only the process
// count is a JSON number.
func TestJSONNumbersAreStrings(t *testing.T) {
	t.Parallel()
	a, _, _ := registryEnv(t)
	a.vars["SNAPID_NAME"] = "web_1"
	r := a.run(t, "register")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = a.run(t, "next", "-n", "10")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = a.run(t, "status", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, []string{".processes"}, jsonNumbers(t, r.stdout), r.stdout)
	assert.Contains(t, r.stdout, `"last_issued": "10"`)
	r = a.run(t, "show", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Empty(t, jsonNumbers(t, r.stdout), r.stdout)
	r = a.run(t, "help", "status")
	assert.Contains(t, r.stdout, "strings")
}

// A planned hand-over (release on the old host, register on the new one)
// is the normal path: the new host's counter starts at the name's mark
// with a calm notice, never the alarm of a crash, a restore or a
// take-over. A forced take-over of an active holder still raises it.
func TestPlannedHandOverDoesNotAlarm(t *testing.T) {
	t.Parallel()
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

// register --force --start 5 on a counter that already issued 7 says why
// the next number is 8, not 5.
func TestRegisterForceStartBelowCounterSaysWhy(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	a, _, _ := registryEnv(t)
	a.vars["SNAPID_NAME"] = "web_1"
	a.vars["SNAPID_COUNTER"] = filepath.Join(t.TempDir(), "server.u64")
	r := a.run(t, "register")
	require.Equal(t, exitOK, r.code, r.stderr)
	delete(a.vars, "SNAPID_COUNTER") // the per-user counter
	// Where this host's record of web_1 is kept, the record refuses the
	// other counter first, pointing at the one it names.
	for _, cmd := range []string{"next", "register"} {
		line := requireError(t, a.run(t, cmd))
		assert.Contains(t, line, "server.u64")
		assert.Contains(t, line, "--counter or SNAPID_COUNTER")
		assert.NotContains(t, line, "register --force", "no take-over of its own name")
	}
	// A program of this machine keeping its records in another place
	// (another SNAPID_BINDING_DIR): the registry's refusal says the holder
	// is this machine.
	a.vars["SNAPID_BINDING_DIR"] = t.TempDir()
	for _, cmd := range []string{"next", "register"} {
		line := requireError(t, a.run(t, cmd))
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
	t.Parallel()
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
	t.Parallel()
	a, _, _ := registryEnv(t)
	r := a.run(t, "register", "--name", "web_2")
	require.Equal(t, exitOK, r.code, r.stderr)
	line := requireError(t, a.run(t, "register", "--name", "web_1"))
	assert.Contains(t, line, `holds the name "web_2"`)
	assert.Regexp(t, `one counter (file )?serves one name`, line)
	assert.Equal(t, 1, strings.Count(line, "nothing was changed"), line)
	line = requireError(t, a.run(t, "next", "--name", "web_1"))
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
	requireError(t, a.run(t, "next", "--name", "web_3"))
	st, r = statusJSON(t, a, "--name", "web_3")
	require.Equal(t, exitProblems, r.code, r.stdout+r.stderr)
	assert.Contains(t, strings.Join(st.Attention, "|"), `released "web_2"`)
}

// check-names with SNAPID_COUNTER set and no name audits the name that
// counter is in use under, as status does, not one derived from the host
// name (which it would call not registered, advising a register that is
// then refused): one verdict.
func TestCheckNamesAuditsTheCounterName(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	f := newFakeEnv(t)
	f.vars["SNAPID_CASSANDRA"] = "127.0.0.1:1"
	for _, cmd := range [][]string{{"next", "--name", "web_1"}, {"names"}, {"setup", "--replication", "1"}} {
		line := requireError(t, f.run(t, append(cmd, "--username", "alice")...))
		assert.Contains(t, line, "SNAPID_CASSANDRA_PASSWORD is not set", cmd)
		assert.NotContains(t, line, "reachable", cmd)
	}
	requireEmptyDir(t, f.home)
}

// A registry row that cannot be read (here: a keyspace with 3 replicas on
// this one-node cluster, so that no serial read reaches its quorum) is
// shown as unknown, with the error, and needs attention (exit 1): it is
// not taken for a missing row, which a name that was never claimed shows.
func TestStatusRowUnreadableIsNotMissing(t *testing.T) {
	t.Parallel()
	f, _, _ := registryEnvBare(t, nil)
	f.vars["SNAPID_NAME"] = "web_1"
	r := f.run(t, "setup", "--replication", "3", "--allow-fragile-replication")
	require.Equal(t, exitOK, r.code, r.stderr)

	r = f.run(t, "status", "--timeout", "3s")
	require.Equal(t, exitProblems, r.code, r.stdout+r.stderr)
	assert.Regexp(t, `(?m)^registry +unknown: the row of "web_1" could not be read \(registry error: `, r.stdout)
	assert.NotContains(t, r.stdout, "no row")
	assert.Contains(t, r.stdout, `attention: the registry row of "web_1" could not be read, so whether this host holds it is unknown: `)
	st, r := statusJSON(t, f, "--timeout", "3s")
	require.Equal(t, exitProblems, r.code, r.stdout+r.stderr)
	require.NotNil(t, st.Registry)
	assert.False(t, st.Registry.Found)
	assert.Contains(t, st.Registry.Unreadable, `get "web_1"`)

	// A name without a row, in a keyspace whose rows can be read.
	g, _, _ := registryEnv(t)
	g.vars["SNAPID_NAME"] = "web_1"
	r = g.run(t, "status", "--timeout", "3s")
	require.Equal(t, exitProblems, r.code, r.stdout+r.stderr)
	assert.Regexp(t, `(?m)^registry +no row for "web_1"$`, r.stdout)
	assert.NotContains(t, r.stdout, "unknown")
}

// fakeRows is a registry for status's registry part: the name's row (or
// getErr) and what the registry holds about its node number (or nsErr).
type fakeRows struct {
	h      registry.Holder
	getErr error
	ns     cassandra.NumberState
	nsErr  error
}

func (f fakeRows) Get(context.Context, string) (registry.Holder, error) { return f.h, f.getErr }
func (f fakeRows) Stride(context.Context) (uint64, error)               { return 0, nil }
func (f fakeRows) NodeNumber(context.Context, string) (cassandra.NumberState, error) {
	return f.ns, f.nsErr
}

// status says what the registry holds about a node number the name's row
// does not show: one settled by the serial read, one taken for it by an
// assignment whose outcome was unknown (with when), or one that could not
// be read; not a silence that looks like a name never numbered.
func TestStatusNodeNumberUnsettled(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 23, 11, 47, 1, 0, time.UTC)
	row := registry.Holder{Name: "web_1", Owner: strings.Repeat("a", 32), Hostname: "web1", State: registry.StateActive, LastSeen: at}
	for _, tc := range []struct {
		name string
		reg  fakeRows
		line string // the node number line
		json func(t *testing.T, r *statusRow)
		// attention: as check-names' no_number, or a read that failed
		attention bool
	}{
		{"settled by the serial read", fakeRows{h: row, ns: cassandra.NumberState{Number: 4}}, "  node number     4",
			func(t *testing.T, r *statusRow) { assert.Equal(t, uint64(4), r.NodeNumber) }, false},
		{"taken, outcome unknown", fakeRows{h: row, ns: cassandra.NumberState{Taken: 7, TakenAt: at}},
			"  node number     none yet: 7 was taken for it at 2026-11-23T11:47:01Z, but its assignment did not complete " +
				"(outcome unknown: an answer lost or timed out); the next start settles it",
			func(t *testing.T, r *statusRow) {
				assert.Zero(t, r.NodeNumber)
				assert.Equal(t, uint64(7), r.NodeNumberTaken)
				assert.Equal(t, at, r.NodeNumberTakenAt)
			}, true},
		{"unreadable", fakeRows{h: row, nsErr: fmt.Errorf("snapid: %w: reading the node number of %q: %w", registry.ErrRegistry, "web_1", context.DeadlineExceeded)},
			`  node number     unknown: could not be read (registry error: reading the node number of "web_1": context deadline exceeded)`,
			func(t *testing.T, r *statusRow) {
				assert.Contains(t, r.NodeNumberUnreadable, "context deadline exceeded")
			}, true},
		{"none", fakeRows{h: row}, "", func(t *testing.T, r *statusRow) {
			assert.Zero(t, r.NodeNumber+r.NodeNumberTaken)
			assert.Empty(t, r.NodeNumberUnreadable)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			c := &cli{env: env{getenv: func(string) string { return "" }, stdout: &out, stderr: &out}}
			st := statusReport{Name: "web_1"}
			statusRegistry(t.Context(), c, tc.reg, &st, admin.HostFiles{}, func(f string, a ...any) {
				st.Attention = append(st.Attention, fmt.Sprintf(f, a...))
			})
			require.NoError(t, printStatus(c, &st))
			assert.Equal(t, tc.attention, strings.Contains(strings.Join(st.Attention, "|"), "the node number of"), "%v", st.Attention)
			if tc.line == "" {
				assert.NotContains(t, out.String(), "node number")
			} else {
				assert.Contains(t, out.String(), "\n"+tc.line+"\n")
			}
			tc.json(t, st.Registry)
		})
	}
}

// A number taken for a name whose give never came (what an assignment
// whose answer was lost leaves, here made by removing web_2's number row)
// is shown as such by names, check-names and status, with when it was
// taken: not as a name claimed before the registry gave numbers.
func TestNumberTakenOutcomeUnknownShown(t *testing.T) {
	t.Parallel()
	a, k, ks := registryEnv(t)
	r := a.run(t, "register", "--name", "web_1")
	require.Equal(t, exitOK, r.code, r.stderr)
	b := newFakeEnv(t)
	b.vars["SNAPID_CASSANDRA"], b.vars["SNAPID_KEYSPACE"] = a.vars["SNAPID_CASSANDRA"], ks
	r = b.run(t, "register", "--name", "web_2")
	require.Equal(t, exitOK, r.code, r.stderr)
	k.Exec(t, `DELETE FROM "`+ks+`".node_names_numbers WHERE id = 'name:web_2'`)

	r = a.run(t, "names")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^web_2 .* unsettled \(2 taken, outcome unknown\)$`, r.stdout)
	r = a.run(t, "check-names", "--json")
	require.Equal(t, exitProblems, r.code, r.stderr)
	var rep struct{ Problems []admin.Problem }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	var found bool
	for _, p := range rep.Problems {
		if p.Kind == admin.ProblemNoNumber {
			found = true
			assert.Regexp(t, `^"web_2" has no node number yet: number 2 was taken for it at 20\d\d-\d\d-\d\dT\S+Z, but its assignment did not complete `+
				`\(its outcome was unknown: an answer lost or timed out\); its host's next start settles it`, p.Detail)
			require.Len(t, p.Rows, 1)
			assert.Equal(t, uint64(2), p.Rows[0].NodeNumberTaken)
		}
	}
	assert.True(t, found, "no_number: %s", r.stdout)
	r = b.run(t, "status", "--name", "web_2")
	require.Equal(t, exitProblems, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, `attention: the node number of "web_2" is not settled (check-names: no_number): 2 was taken for it at `)
	assert.Regexp(t, `(?m)^  node number +none yet: 2 was taken for it at 20\S+Z, but its assignment did not complete \(outcome unknown`, r.stdout)
}
