package snapid_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withoutProtectedHardlinks sets fs.protected_hardlinks to 0 (the
// kernel's default) until the test ends, so that another user can link a
// file of root's it cannot write; it reports whether it could.
func withoutProtectedHardlinks(t *testing.T) bool {
	t.Helper()
	const p = "/proc/sys/fs/protected_hardlinks"
	old, err := os.ReadFile(p)
	if err != nil {
		return false
	}
	if os.WriteFile(p, []byte("0\n"), 0o644) != nil {
		return false
	}
	t.Cleanup(func() { _ = os.WriteFile(p, old, 0o644) })
	return true
}

// A hard link another user plants beside the counter (or at the counter)
// to a file of root's, in a sticky directory root keeps its counter in,
// would make root write that file in place (the heartbeat's record, the
// mark) or lock it: every state file with more than one name is refused on
// its opened descriptor, whatever fs.protected_hardlinks says, and the
// linked file is left as it was.
func TestStateFileWithTwoNamesRefused(t *testing.T) {
	requireRoot(t)
	asUser := withoutProtectedHardlinks(t)
	counterOf := func(v uint64) []byte { b := EncodeCounter(v); return b[:] }
	for _, tc := range []struct {
		suffix  string
		content []byte // what the planted file holds: a valid file of its kind
	}{
		{"", counterOf(7)},
		{ExportMarkSuffix, make([]byte, 16)},
		{".heartbeat", nil},
		{ExportPresenceSuffix, nil},
		{ExportOwnerSuffix, []byte(strings.Repeat("ab", 16) + "\n")},
	} {
		t.Run("counter"+tc.suffix, func(t *testing.T) {
			base := testfs.SharedTempDir(t, "snapid-links-")
			sticky := filepath.Join(base, "tmp")
			require.NoError(t, os.Mkdir(sticky, 0o755))
			require.NoError(t, os.Chmod(sticky, os.ModeSticky|0o777))
			victim := filepath.Join(base, "precious")
			require.NoError(t, os.WriteFile(victim, tc.content, 0o600)) // root's, 0600
			path := filepath.Join(sticky, "counter.u64")
			if tc.suffix != "" {
				c := EncodeCounter(0)
				require.NoError(t, os.WriteFile(path, c[:], 0o600))
			}
			at := path + tc.suffix
			if asUser {
				out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "ln", victim, at).CombinedOutput()
				require.NoError(t, err, "%s", out)
			} else {
				require.NoError(t, os.Link(victim, at)) // root may link anything
			}
			g, err := Open(path, "vm", WithRegistry(registrytest.NewRegistry()), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}))
			if err == nil {
				_, _ = g.UniqueID()
				g.Close()
			}
			b, rerr := os.ReadFile(victim)
			require.NoError(t, rerr)
			assert.True(t, bytes.Equal(tc.content, b), "the linked file was changed: %q", b)
			require.ErrorIs(t, err, ErrUntrustedOwner)
			require.Contains(t, err.Error(), "2 names")
		})
	}
}
