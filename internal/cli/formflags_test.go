package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNextFormats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"decimal", []string{"next", "-n", "12", "--format", "decimal", "--node-number", "7"},
			[]string{"7.1", "7.2", "7.3", "7.4", "7.5", "7.6", "7.7", "7.8", "7.9", "7.11", "7.12", "7.13"}},
		{"striped", []string{"next", "-n", "3", "--format", "striped", "--node-number", "7", "--stride", "1000"},
			[]string{"1007", "2007", "3007"}},
		{"name", []string{"next", "-n", "2", "--format", "name"}, []string{"vm_tester-1", "vm_tester-2"}}, // snapctl's own counter: the host's and the user's name
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeEnv(t)
			f.host = "vm"
			r := f.run(t, tc.args...)
			require.Equal(t, exitOK, r.code, "stderr: %q", r.stderr)
			assert.Equal(t, tc.want, strings.Fields(r.stdout))
		})
	}
}

func TestNextFormatBounds(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	f.host = "vm"
	r := f.run(t, "init", "--start", "4294967")
	require.Equal(t, exitOK, r.code, "stderr: %q", r.stderr)
	r = f.run(t, "next", "--format", "striped", "--node-number", "7", "--stride", "1000", "--uint32")
	require.Equal(t, exitOK, r.code, "stderr: %q", r.stderr)
	assert.Equal(t, "4294967007\n", r.stdout)
	r = f.run(t, "next", "--format", "striped", "--node-number", "7", "--stride", "1000", "--uint32")
	require.Equal(t, exitFailure, r.code)
	assert.Contains(t, r.stderr, "exhausted")
}

// Bad form flags: a clear error, and nothing made.
func TestNextFormatRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--format", "hex"},
		{"--format", "decimal"},
		{"--format", "decimal", "--node-number", "0"},
		{"--format", "striped", "--node-number", "7"},
		{"--format", "striped", "--node-number", "7", "--stride", "0"},
		{"--format", "striped", "--node-number", "10", "--stride", "10"},
		{"--max-id", "0"},
		{"--uint32", "--max-safe-integer"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			f := newFakeEnv(t)
			f.host = "vm"
			before := testfs.Snapshot(t, f.home)
			r := f.run(t, append([]string{"next"}, args...)...)
			require.NotEqual(t, exitOK, r.code)
			assert.Empty(t, r.stdout)
			assert.NotEmpty(t, r.stderr)
			testfs.RequireUnchanged(t, f.home, before)
			ents, err := os.ReadDir(f.home)
			require.NoError(t, err)
			assert.Empty(t, ents, "a refused next made something")
		})
	}
}

// next at a form's bound takes nothing when the ids asked for do not all
// fit: the counter does not move, the error says so and how many are
// left, and those are still issued.
func TestNextAtTheBoundTakesNothing(t *testing.T) {
	t.Parallel()
	for _, form := range [][]string{
		{"--format", "striped", "--node-number", "7", "--stride", "1000", "--uint32"}, // last number 4294967
		{"--format", "decimal", "--node-number", "7", "--max-id", "4294967"},
	} {
		t.Run(form[1], func(t *testing.T) {
			f := newFakeEnv(t)
			f.host = "vm"
			r := f.run(t, "init", "--start", "4294965")
			require.Equal(t, exitOK, r.code, "stderr: %q", r.stderr)
			show := func() string {
				r := f.run(t, "show")
				require.Equal(t, exitOK, r.code, "stderr: %q", r.stderr)
				return r.stdout
			}
			before := show()
			for range 2 {
				r = f.run(t, append([]string{"next", "-n", "4", "--name", "vm"}, form...)...)
				require.Equal(t, exitFailure, r.code)
				line := requireError(t, r)
				assert.Contains(t, line, "3 are left: nothing was taken")
				assert.Contains(t, line, "nothing was issued and the counter did not move")
				assert.Empty(t, r.stdout)
				assert.Equal(t, before, show(), "a refused next moved the counter")
			}
			r = f.run(t, append([]string{"next", "-n", "3", "--name", "vm"}, form...)...)
			require.Equal(t, exitOK, r.code, "stderr: %q", r.stderr)
			assert.Len(t, strings.Fields(r.stdout), 3)
		})
	}
}

// A form flag of another form than the one asked for is refused, naming
// the flag and the form it needs, and nothing is made (the name form
// would otherwise take a node number and hand out <name>-<n> regardless).
func TestNextFormFlagOfAnotherForm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--node-number", "7"}, []string{"--node-number is for the numeric forms", "--format decimal or --format striped"}},
		{[]string{"--format", "name", "--node-number", "7"}, []string{"--node-number is for the numeric forms"}},
		{[]string{"--stride", "1000"}, []string{"--stride is for the striped form", "--format striped", "the name form"}},
		{[]string{"--format", "decimal", "--node-number", "7", "--stride", "1000"}, []string{"--stride is for the striped form", "the decimal form"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			f := newFakeEnv(t)
			before := testfs.Snapshot(t, f.home)
			line := requireError(t, f.run(t, append([]string{"next", "--name", "vm"}, tc.args...)...))
			for _, w := range tc.want {
				assert.Contains(t, line, w)
			}
			testfs.RequireUnchanged(t, f.home, before)
		})
	}
}
