package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A bad SNAPID_BINDING_DIR (relative, or the filesystem root) is refused
// naming the variable, not the library option snapctl passes it as, and
// nothing is created.
func TestCLIBindingDirVariableNamed(t *testing.T) {
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
		line := requireOneErrorLine(t, f.run(t, "next"))
		assert.Contains(t, line, "SNAPID_BINDING_DIR", bad)
		assert.NotContains(t, line, "WithBindingDir", bad)
		_, err := os.Lstat(counter)
		require.ErrorIs(t, err, os.ErrNotExist, bad)
	}
}
