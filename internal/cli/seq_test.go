package cli

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/snapid/snapid/internal/engine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// seqNumbers requires stdout to be n numbers, one per line and nothing
// else, and returns them.
func seqNumbers(t *testing.T, r result, n int) []uint64 {
	t.Helper()
	require.Equal(t, exitOK, r.code, r.stderr)
	require.True(t, strings.HasSuffix(r.stdout, "\n"), "stdout: %q", r.stdout)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, n, "stdout: %q", r.stdout)
	var out []uint64
	for _, l := range lines {
		v, err := strconv.ParseUint(l, 10, 64)
		require.NoError(t, err, "line %q", l)
		require.Equal(t, strconv.FormatUint(v, 10), l, "plain decimal")
		out = append(out, v)
	}
	return out
}

func TestSeqCommands(t *testing.T) {
	t.Parallel()
	a, k, ks := registryEnv(t)
	a.vars["SNAPID_NAME"] = "web_1"
	// Bad input: exit 2, one line, nothing created.
	for _, args := range [][]string{
		{"seq"}, {"seq", "frob", "x"}, {"seq", "create"}, {"seq", "create", "--start", "5"},
		{"seq", "create", "Bad-Name"}, {"seq", "create", "articles", "--start", "0"},
		{"seq", "create", "articles", "--start", "10", "--max", "9"},
		{"seq", "create", "articles", "--max", "9223372036854775808"},
		{"seq", "create", "articles", "extra"},
		{"seq", "next", "articles", "-n", "0"},
		{"seq", "next", "missing"},
	} {
		requireError(t, a.run(t, args...))
	}
	r := a.run(t, "seq", "show", "articles")
	assert.Contains(t, requireError(t, r), "snapctl seq create", "a sequence that does not exist")

	// A CMS: article numbers in a signed 32-bit column, above the ones
	// that exist.
	r = a.run(t, "seq", "create", "articles", "--start", "1000001", "--max", "2147483647")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "sequence articles: start 1000001, max 2147483647\n"+
		"registry (GLOBAL): the next range handed to a data centre starts at 1000001 (not a number a host hands out next)\n", r.stdout)
	got := seqNumbers(t, a.run(t, "seq", "next", "articles", "-n", "3"), 3)
	assert.Equal(t, []uint64{1000001, 1000002, 1000003}, got)
	got = seqNumbers(t, a.run(t, "seq", "next", "articles"), 1)
	assert.Equal(t, []uint64{1000004}, got, "each run leases what it prints: no gap between runs")

	b := newFakeEnv(t)
	b.vars = map[string]string{"SNAPID_BINDING_DIR": b.vars["SNAPID_BINDING_DIR"], "SNAPID_CASSANDRA": a.vars["SNAPID_CASSANDRA"], "SNAPID_KEYSPACE": ks, "SNAPID_NAME": "web_2"}
	got = append(got, seqNumbers(t, b.run(t, "seq", "next", "articles", "-n", "5"), 5)...)
	got = append(got, seqNumbers(t, a.run(t, "seq", "next", "articles", "-n", "2"), 2)...)
	seen := map[uint64]bool{}
	for _, v := range got {
		require.False(t, seen[v], "%d issued twice", v)
		require.True(t, v >= 1000001 && v <= 2147483647)
		seen[v] = true
	}

	// Re-creating never lowers: a lower max than what was handed out is
	// refused, the same bounds change nothing.
	line := requireError(t, a.run(t, "seq", "create", "articles", "--start", "1000001", "--max", "1000002"))
	assert.Contains(t, line, "invalid sequence bounds")
	r = a.run(t, "seq", "create", "articles", "--start", "1", "--max", "2147483647")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "next 1\n")
	// Run again, each figure says what it is: GLOBAL's position is no
	// number a host hands out next; the data centre's next is.
	rs := a.run(t, "seq", "show", "articles", "--json")
	require.Equal(t, exitOK, rs.code, rs.stderr)
	var st seqShowJSON
	require.NoError(t, json.Unmarshal([]byte(rs.stdout), &st))
	require.Len(t, st.Ranges, 1)
	assert.NotEqual(t, "1000012", st.Next, "GLOBAL is ahead of what the hosts hand out")
	assert.Contains(t, r.stdout, "registry (GLOBAL): the next range handed to a data centre starts at "+st.Next+" (not a number a host hands out next)\n")
	assert.Contains(t, r.stdout, "data centre "+st.Ranges[0].DC+": next number leased to a host 1000012 (its range 1000001-")
	assert.NotContains(t, r.stdout, "next "+st.Next+"\n")
	// Without --max an existing sequence keeps its max (its 32-bit cap).
	r = a.run(t, "seq", "create", "articles", "--start", "5")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "max 2147483647\n")
	// A raised start once numbers were handed out is refused.
	line = requireError(t, a.run(t, "seq", "create", "articles", "--start", "5000000"))
	assert.Contains(t, line, "start 5000000 is above numbers already handed")
	r = a.run(t, "seq", "show", "articles")
	assert.Contains(t, r.stdout, "sequence articles: start 1000001, max 2147483647")
	// A sequence NAME's error does not point at --name (the node name).
	line = requireError(t, a.run(t, "seq", "create", "Articles"))
	assert.NotContains(t, line, "--name")
	assert.Contains(t, line, "sequence's NAME")

	r = a.run(t, "seq", "show", "articles", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var show seqShowJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &show))
	assert.Equal(t, "1000001", show.Start)
	assert.Equal(t, "2147483647", show.Max)
	require.Len(t, show.Leases, 2)
	require.NotEmpty(t, show.Grants)
	require.NotNil(t, show.ThisHost)
	assert.Equal(t, "web_1", show.ThisHost.NodeName)
	assert.Contains(t, r.stdout, `"node_name": "web_1"`, "the key names what it holds: the node name")
	assert.NotContains(t, r.stdout, `"host":`)
	r = a.run(t, "seq", "show", "articles")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "sequence articles: start 1000001, max 2147483647")
	assert.Contains(t, r.stdout, "this host (web_1)")

	r = a.run(t, "check-names")
	require.Equal(t, exitOK, r.code, "stdout %s stderr %s", r.stdout, r.stderr)

	// A small sequence runs out: exit 2, nothing printed.
	r = a.run(t, "seq", "create", "tiny", "--start", "5", "--max", "7")
	require.Equal(t, exitOK, r.code, r.stderr)
	seqNumbers(t, a.run(t, "seq", "next", "tiny", "-n", "3"), 3)
	r = a.run(t, "seq", "next", "tiny")
	line = requireError(t, r)
	assert.Contains(t, line, "--max")
	assert.Empty(t, r.stdout)
	// Fewer left than asked: says how many are left, not that every
	// number was handed out.
	r = a.run(t, "seq", "create", "tiny2", "--start", "5", "--max", "7")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = a.run(t, "seq", "next", "tiny2", "-n", "5")
	line = requireError(t, r)
	assert.Contains(t, line, "3 numbers are left")
	assert.NotContains(t, line, "every number")
	assert.Empty(t, r.stdout)

	// A lease row planted beyond what its data centre handed out, and
	// overlapping another host's: check-names reports both (exit 1).
	dc := k.LocalDC(t)
	k.Exec(t, `INSERT INTO "`+ks+`".sequences (seq, part, kind, key, first, owner, session, lease_first, lease_last) VALUES (?, ?, 'host', 'rogue', 0, 'o', 's', 1000001, 2000000000)`,
		"articles", "dc:"+dc)
	r = a.run(t, "check-names", "--json")
	require.Equal(t, exitProblems, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"sequence_beyond_global"`)
	assert.Contains(t, r.stdout, `"sequence_overlap"`)
}

func TestSeqHelp(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	r := f.run(t, "help", "seq")
	require.Equal(t, exitOK, r.code, r.stderr)
	for _, s := range []string{"seq create", "seq next", "seq show", "2147483647"} {
		assert.Contains(t, r.stdout, s)
	}
	r = f.run(t, "help")
	assert.Contains(t, r.stdout, "seq ")
	line := requireError(t, f.run(t, "seq", "create", "x"))
	assert.Contains(t, line, "needs a registry")
	for _, sub := range []string{"create", "next", "show"} {
		r = f.run(t, "help", "seq", sub)
		require.Equal(t, exitOK, r.code, "help seq %s: %s", sub, r.stderr)
		assert.Contains(t, r.stdout, "snapctl seq "+sub)
		assert.Contains(t, r.stdout, "-timeout")
	}
	r = f.run(t, "help", "seq", "create")
	assert.Contains(t, r.stdout, "keeps its max")
	assert.Contains(t, r.stdout, "higher --start is refused")
	requireError(t, f.run(t, "help", "seq", "frob"))
}

// `seq next` of a sequence that does not exist claims no name and creates
// no file.
func TestSeqNextMissingSequenceCreatesNothing(t *testing.T) {
	t.Parallel()
	a, k, ks := registryEnv(t)
	a.vars["SNAPID_NAME"] = "web_1"
	b := newFakeEnv(t)
	b.vars = map[string]string{"SNAPID_BINDING_DIR": b.vars["SNAPID_BINDING_DIR"], "SNAPID_CASSANDRA": a.vars["SNAPID_CASSANDRA"], "SNAPID_KEYSPACE": ks, "SNAPID_NAME": "web_2"}
	r := b.run(t, "seq", "create", "other")
	require.Equal(t, exitOK, r.code, r.stderr)

	line := requireError(t, a.run(t, "seq", "next", "nosuch"))
	assert.Contains(t, line, "snapctl seq create")
	requireEmptyDir(t, a.home, "no counter, lease or state file")
	requireEmptyDir(t, a.vars["SNAPID_BINDING_DIR"], "no name binding")
	var n int
	require.NoError(t, k.Admin.Query(`SELECT COUNT(*) FROM "`+ks+`".node_names WHERE name = 'web_1'`).Scan(&n))
	assert.Zero(t, n, "the name is not claimed")
}

// The hint of a lease that cannot be had says what to do: ask for fewer
// when some are left here, raise the max for more here, and where other
// data centres' ranges hold numbers (for their own hosts).
func TestSeqExhaustedHint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		e    *engine.SequenceExhaustedError
		says []string
		not  string
	}{
		{&engine.SequenceExhaustedError{Sequence: "s", DC: "dc1", Max: 100, Wanted: 1},
			[]string{"raise the max with 'snapctl seq create s --max M' for more numbers here"}, "other data centres"},
		{&engine.SequenceExhaustedError{Sequence: "s", DC: "dc1", Max: 100, Wanted: 1, OtherDCs: map[string]uint64{"dc2": 56}},
			[]string{"for more numbers here; the 56 numbers other data centres' ranges hold go to their own hosts ('snapctl seq show s' shows where)"}, ""},
		{&engine.SequenceExhaustedError{Sequence: "s", DC: "dc1", Max: 100, Wanted: 8, GlobalLeft: 6, Largest: 6, OtherDCs: map[string]uint64{"dc2": 56}},
			[]string{"ask for at most 6", "the 56 numbers other data centres' ranges hold go to their own hosts"}, ""},
		{&engine.SequenceExhaustedError{Sequence: "s", DC: "dc1", Max: 100, Wanted: 1, OtherDCs: map[string]uint64{"dc2": 0}},
			[]string{"for more numbers here"}, "other data centres' ranges hold"},
	} {
		hint := seqExhaustedHint(fmt.Errorf("lease: %w", tc.e))
		for _, s := range tc.says {
			assert.Contains(t, hint, s)
		}
		if tc.not != "" {
			assert.NotContains(t, hint, tc.not)
		}
	}
}
