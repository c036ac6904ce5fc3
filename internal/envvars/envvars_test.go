package envvars

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// misspelt builds a variable's name that is not snapid's from its part
// after the prefix: written whole in a source file, the name would be
// found by TestEveryVariableIsKnown.
func misspelt(rest string) string { return Prefix + rest }

// nameRE matches a SNAPID_ variable's name in any file: a name ending in
// "_" is a family's prefix ("SNAPID_SIM_*").
var nameRE = regexp.MustCompile(`SNAPID_[A-Z0-9_]+`)

// Every SNAPID_ name written anywhere in the repository (code, scripts,
// tests, docs, CI) is in the list, so that the list cannot fall behind
// the variables read: a variable missing from it would be warned about
// as unknown where it is set on purpose.
func TestEveryVariableIsKnown(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "the repository's root")
	found := map[string]string{} // name: a file that names it
	files := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == ".git" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 {
			return nil // a binary file
		}
		files++
		rel, _ := filepath.Rel(root, p)
		for _, m := range nameRE.FindAllString(string(b), -1) {
			if _, ok := found[m]; !ok {
				found[m] = rel
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 100, "the walk reads the repository")
	require.Contains(t, found, "SNAPID_CASSANDRA", "the walk finds the variables")
	for name, file := range found {
		if prefix, family := strings.CutSuffix(name, "_"); family {
			assert.True(t, slices.ContainsFunc(known, func(k string) bool { return strings.HasPrefix(k, prefix+"_") }),
				"%s names the family %s*, of which no variable is known", file, name)
			continue
		}
		assert.True(t, IsKnown(name), "%s names %s: add it to the list of known variables", file, name)
	}
	seen := map[string]bool{}
	for _, k := range known {
		assert.False(t, seen[k], "%s listed twice", k)
		seen[k] = true
		assert.Contains(t, found, k, "%s is listed but named nowhere in the repository: drop it", k)
	}
}

func TestUnknown(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []string
		want    []Var
	}{
		{"none", []string{"HOME=/root", "SNAPID_CASSANDRA=db1", "SNAPID_SIM_SEED=3", "SNAPID_CASSANDRA_DIR=/x"}, nil},
		{"a letter left out", []string{misspelt("CASANDRA") + "=127.0.0.1"}, []Var{{misspelt("CASANDRA"), "SNAPID_CASSANDRA"}}},
		{"two letters swapped", []string{misspelt("KEYSAPCE") + "=ks"}, []Var{{misspelt("KEYSAPCE"), "SNAPID_KEYSPACE"}}},
		{"a letter added", []string{misspelt("NAMES") + "=web_1"}, []Var{{misspelt("NAMES"), "SNAPID_NAME"}}},
		{"lower case", []string{strings.ToLower("SNAPID_CASSANDRA") + "=db1"}, []Var{{"snapid_cassandra", "SNAPID_CASSANDRA"}}},
		{"a known name with more after it", []string{misspelt("CASSANDRA_HOSTS") + "=db1"}, []Var{{misspelt("CASSANDRA_HOSTS"), "SNAPID_CASSANDRA"}}},
		{"nothing close", []string{misspelt("FROBNICATE") + "=1"}, []Var{{misspelt("FROBNICATE"), ""}}},
		{"sorted, each once, values unread", []string{misspelt("ZZ") + "=1", misspelt("CONSISTENSY") + "=x=y", misspelt("ZZ") + "=2", "SNAPIDX=1", "MY_SNAPID_CASSANDRA=1"},
			[]Var{{misspelt("CONSISTENSY"), "SNAPID_CONSISTENCY"}, {misspelt("ZZ"), ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Unknown(tc.environ))
		})
	}
}

func TestKnownSorted(t *testing.T) {
	k := Known()
	assert.True(t, slices.IsSorted(k))
	assert.Len(t, k, len(known))
	k[0] = "changed"
	assert.NotEqual(t, "changed", Known()[0], "a copy")
}
