package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A bad SNAPID_BINDING_DIR (relative, or the filesystem root) is refused
// naming the variable, not the library option snapctl passes it as, and
// nothing is created.
func TestCLIBindingDirVariableNamed(t *testing.T) {
	t.Parallel()
	// With the defect back, root would write /vmz and /.lock: removed.
	_, lockErr := os.Lstat("/.lock")
	t.Cleanup(func() {
		os.Remove("/vmz")
		if os.IsNotExist(lockErr) {
			os.Remove("/.lock")
		}
	})
	for _, bad := range []string{"rel/dir", "/"} {
		f := newFakeEnv(t)
		counter := filepath.Join(t.TempDir(), "counter.u64")
		f.vars["SNAPID_BINDING_DIR"] = bad
		f.vars["SNAPID_COUNTER"] = counter
		f.vars["SNAPID_NAME"] = "vmz"
		line := requireError(t, f.run(t, "next"))
		assert.Contains(t, line, "SNAPID_BINDING_DIR", bad)
		assert.NotContains(t, line, "WithBindingDir", bad)
		_, err := os.Lstat(counter)
		require.ErrorIs(t, err, os.ErrNotExist, bad)
	}
}

// XDG_STATE_HOME pointing into a directory another user owns: that user
// links "snapid" to a directory of root's. snapctl must refuse rather than
// write root's counter where the other user points it (or, repointed, a
// second counter that repeats ids).
func TestCLIStateDirOfAnotherUserRefused(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run another user")
	}
	base := testfs.SharedTempDir(t, "snapctl-statedir-")
	st := filepath.Join(base, "state")
	require.NoError(t, os.Mkdir(st, 0o755))
	require.NoError(t, os.Chown(st, 65534, 65534))
	victim := filepath.Join(base, "victim")
	require.NoError(t, os.Mkdir(victim, 0o700))

	for _, tc := range []struct{ name, plant string }{
		{"link to root's directory", "ln -s " + victim + " " + st + "/snapid"},
		{"directory of its own", "rm -f " + st + "/snapid; mkdir " + st + "/snapid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testfs.AsOtherUser(t, tc.plant)
			f := newFakeEnv(t)
			f.vars["XDG_STATE_HOME"] = st
			f.vars["SNAPID_NAME"] = "vmz"
			line := requireError(t, f.run(t, "next"))
			assert.Contains(t, line, "nobody")
			ents, err := os.ReadDir(victim)
			require.NoError(t, err)
			assert.Empty(t, ents, "root wrote where another user pointed it")
			ents, err = os.ReadDir(st)
			require.NoError(t, err)
			assert.Len(t, ents, 1, "nothing but what the other user made")
		})
	}
}
