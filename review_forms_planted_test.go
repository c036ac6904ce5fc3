package snapid_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/require"
)

// Review: root's counter in a sticky directory (accepted, as /tmp). Before
// root's first numeric-form Open, another user plants <counter>.forms (a
// file of its own, or a directory). Root's Open is refused, which the
// threat model allows, but with ErrCorruptForms and a message that says
// the history is damaged, that "its copy ... cannot be used either" (there
// is no copy), and to restore it from a backup or raise the counter
// before removing both: nothing names the other user or says the file is
// not root's (formhistory.go, formsFiles.read: the fall-through when only
// the primary exists and is bad).
func TestReviewPlantedFormsFileMisleadingError(t *testing.T) {
	requireRoot(t)
	for _, kind := range []string{"file", "dir"} {
		t.Run(kind, func(t *testing.T) {
			base := testfs.SharedTempDir(t, "snapid-review-forms-")
			sticky := filepath.Join(base, "tmp")
			require.NoError(t, os.Mkdir(sticky, 0o777))
			require.NoError(t, os.Chmod(sticky, 0o777|os.ModeSticky))
			counter := filepath.Join(sticky, "c.u64")
			bind := filepath.Join(base, "names")
			g, err := Open(counter, "vm", WithBindingDir(bind), WithSync(false))
			require.NoError(t, err)
			require.NoError(t, g.Close())

			cmd := "printf x > " + counter + ".forms"
			if kind == "dir" {
				cmd = "mkdir " + counter + ".forms"
			}
			testfs.AsOtherUser(t, cmd)
			_, err = Open(counter, "vm", WithBindingDir(bind), WithSync(false),
				WithFormat(FormatDecimal), WithNodeNumber(7))
			require.Error(t, err)
			t.Logf("%v", err)
			require.NotContains(t, err.Error(), "cannot be used either",
				"the copy does not exist; the message says both copies are damaged")
			require.Contains(t, err.Error(), "nobody", "the message should name the user who owns the planted file")
		})
	}
}
