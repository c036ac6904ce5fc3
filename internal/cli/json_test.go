package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
