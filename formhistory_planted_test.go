package snapid_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/require"
)

// Root's counter in a sticky directory (accepted, as /tmp). Another user
// puts something at a path of the counter's form history (<counter>.forms
// before root's first numeric Open, or <counter>.forms.copy while root's
// copy is missing): a file of its own, a directory, a FIFO. Root's numeric
// Open is refused as for any state file of another user (ErrUntrustedOwner,
// ErrNotRegular), naming what is there and its owner; never as a damaged
// history to restore from a backup (ErrCorruptForms), and nothing is
// changed: the planted thing stays, and nothing is written beside the
// counter.
func TestFormHistoryPlantedByAnotherUser(t *testing.T) {
	requireRoot(t)
	for _, at := range []string{".forms", ".forms.copy"} {
		for _, tc := range []struct {
			kind, cmd, says string
			want            error
		}{
			{"file", "printf x > %s", "a regular file owned by nobody", ErrUntrustedOwner},
			{"dir", "mkdir %s", "a directory owned by nobody", ErrNotRegular},
			{"fifo", "mkfifo %s", "a FIFO owned by nobody", ErrNotRegular},
		} {
			t.Run(at+"/"+tc.kind, func(t *testing.T) {
				base := testfs.SharedTempDir(t, "snapid-forms-planted-")
				sticky := filepath.Join(base, "tmp")
				require.NoError(t, os.Mkdir(sticky, 0o777))
				require.NoError(t, os.Chmod(sticky, 0o777|os.ModeSticky))
				counter := filepath.Join(sticky, "c.u64")
				bind := filepath.Join(base, "names")
				opts := []Option{WithBindingDir(bind), WithSync(false)}
				if at == ".forms.copy" {
					// Root's history exists; its copy is gone.
					opts = append(opts, WithFormat(FormatDecimal), WithNodeNumber(7))
				}
				g, err := Open(counter, "vm", opts...)
				require.NoError(t, err)
				require.NoError(t, g.Close())
				if at == ".forms.copy" {
					require.NoError(t, os.Remove(counter+at))
				}

				testfs.AsOtherUser(t, fmt.Sprintf(tc.cmd, counter+at))
				before := testfs.Snapshot(t, sticky)
				_, err = Open(counter, "vm", WithBindingDir(bind), WithSync(false),
					WithFormat(FormatDecimal), WithNodeNumber(7))
				require.Error(t, err)
				t.Logf("%v", err)
				require.ErrorIs(t, err, tc.want)
				require.NotErrorIs(t, err, ErrCorruptForms, "another user's file is not a damaged history")
				require.NotContains(t, err.Error(), "restore one from a backup")
				require.Contains(t, err.Error(), counter+at)
				require.Contains(t, err.Error(), tc.says, "the message names what is there and its owner")
				testfs.RequireUnchanged(t, sticky, before)
				var st syscall.Stat_t
				require.NoError(t, syscall.Lstat(counter+at, &st))
				require.NotZero(t, st.Uid, "the planted %s was replaced", tc.kind)
			})
		}
	}
}
