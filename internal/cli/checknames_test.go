package cli

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With the Cassandra registry: setup --stride records the cluster's
// stride once (another is refused, a bad one changes nothing), next
// --format striped and decimal use the name's node number, names lists
// it and show prints the host's.
func TestNodeNumbersWithRegistry(t *testing.T) {
	t.Parallel()
	f, s, ks := registryEnvBare(t, nil)
	dc := s.LocalDC(t)
	line := requireError(t, f.run(t, "setup", "--replication", dc+":1", "--stride", "1"))
	assert.Contains(t, line, "--stride")
	assert.Nil(t, s.Replication(t, ks), "a bad stride created the keyspace")
	// No keyspace yet: --stride alone cannot create it, and says what
	// is missing.
	line = requireError(t, f.run(t, "setup", "--stride", "1000"))
	assert.Contains(t, line, "keyspace "+ks+" does not exist")
	assert.Contains(t, line, "setup needs --replication")
	assert.Nil(t, s.Replication(t, ks))
	r := f.run(t, "setup", "--replication", dc+":1")
	require.Equal(t, exitOK, r.code, r.stderr)
	// The keyspace exists: the stride is recorded without --replication.
	r = f.run(t, "setup", "--stride", "1000")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "stride 1000 recorded")
	assert.Contains(t, r.stdout, "keyspace "+ks+" exists: left as it was (replication "+dc+":1)")
	r = f.run(t, "setup", "--replication", dc+":1", "--stride", "100")
	require.NotEqual(t, exitOK, r.code)
	assert.Contains(t, r.stderr, "stride")

	f.host = "web_1"
	r = f.run(t, "next", "-n", "2", "--format", "striped")
	require.Equal(t, exitOK, r.code, r.stderr)
	ids := strings.Fields(r.stdout)
	require.Len(t, ids, 2)
	v0, err := strconv.ParseUint(ids[0], 10, 64)
	require.NoError(t, err)
	v1, err := strconv.ParseUint(ids[1], 10, 64)
	require.NoError(t, err)
	n := v0 % 1000
	require.NotZero(t, n)
	assert.Equal(t, v0+1000, v1, "striped ids of one node grow by the stride")
	num := strconv.FormatUint(n, 10)
	r = f.run(t, "next", "--format", "decimal")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.True(t, strings.HasPrefix(r.stdout, num+"."), "%q, node number %d", r.stdout, n)
	r = f.run(t, "next", "--format", "decimal", "--node-number", strconv.FormatUint(n+1, 10))
	require.NotEqual(t, exitOK, r.code)
	assert.Contains(t, r.stderr, "node number")

	r = f.run(t, "names")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "NODE NUMBER")
	assert.Regexp(t, `web_1_tester .* `+num+`\n`, r.stdout) // snapctl's own counter: the host's and the user's name
	r = f.run(t, "show")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "node number "+num+",")
	r = f.run(t, "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `node number\s+`+num+`\n`, r.stdout)
	assert.Regexp(t, `cluster stride\s+1000\n`, r.stdout)
	r = f.run(t, "status", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"stride": "1000"`)
	r = f.run(t, "names", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"stride": "1000"`)
	r = f.run(t, "names")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "cluster stride 1000")
}

// check-names reports a name whose node number is not below the
// cluster's stride (its host cannot use the striped form); names numbered
// one at a time get 1, 2, … so stride S leaves room for S-1 of them.
func TestCheckNamesNumberAboveStride(t *testing.T) {
	t.Parallel()
	f, s, _ := registryEnv(t)
	dc := s.LocalDC(t)
	r := f.run(t, "setup", "--replication", dc+":1", "--stride", "3")
	require.Equal(t, exitOK, r.code, r.stderr)
	for i, name := range []string{"web_1", "web_2", "web_3"} {
		f.host = name
		r = f.run(t, "next", "--format", "decimal", "--counter", filepath.Join(t.TempDir(), "counter"))
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Equal(t, strconv.Itoa(i+1)+".1\n", r.stdout, "names numbered one at a time get dense numbers")
	}
	r = f.run(t, "check-names")
	require.Equal(t, exitProblems, r.code, r.stdout+r.stderr)
	assert.Regexp(t, `number_above_stride\s+web_3\s+.*node number 3, not below the cluster's stride 3`, r.stdout)
	assert.NotContains(t, r.stdout, "web_2 ")
	r = f.run(t, "status", "--counter", filepath.Join(t.TempDir(), "counter"))
	assert.Contains(t, r.stdout, "not below the cluster's stride 3")
}
