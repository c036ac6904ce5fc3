package engine_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/require"
)

// Root's counter in a sticky directory (accepted, as /tmp). Another user
// puts something at the path of a file earlier versions kept beside the
// counter (<counter>.forms, .forms.copy, .number, .released): a file of
// its own, a directory, a FIFO. Root's Open neither reads it (it says
// nothing about root's counter: another user can only put something
// where nothing was) nor removes it, and warns, naming it.
func TestMigrateLeavesAnotherUsersFile(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	for _, at := range []string{".forms", ".forms.copy", ".number", ".released"} {
		for _, tc := range []struct{ kind, cmd string }{
			{"file", "printf x > %s"},
			{"dir", "mkdir %s"},
			{"fifo", "mkfifo %s"},
		} {
			t.Run(at+"/"+tc.kind, func(t *testing.T) {
				base := testfs.SharedTempDir(t, "snapid-old-planted-")
				sticky := filepath.Join(base, "tmp")
				require.NoError(t, os.Mkdir(sticky, 0o777))
				require.NoError(t, os.Chmod(sticky, 0o777|os.ModeSticky))
				counter := filepath.Join(sticky, "c.u64")
				bind := filepath.Join(base, "names")
				testfs.AsOtherUser(t, fmt.Sprintf(tc.cmd, counter+at))
				var logs bytes.Buffer
				g, err := Open(counter, "vm", WithBindingDir(bind), WithSync(false), WithFormat(FormatDecimal), WithNodeNumber(7),
					WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
				require.NoError(t, err)
				id, err := g.UniqueID()
				require.NoError(t, err)
				require.Equal(t, "7.1", id)
				require.NoError(t, g.Close())
				require.Contains(t, logs.String(), counter+at, "the warning names what is there")
				var st syscall.Stat_t
				require.NoError(t, syscall.Lstat(counter+at, &st))
				require.NotZero(t, st.Uid, "the planted %s was replaced or removed", tc.kind)
			})
		}
	}
}
