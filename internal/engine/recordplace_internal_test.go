package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/snapid/snapid/internal/hoststate"
	"github.com/stretchr/testify/require"
)

// A user's record kept in the user's own place while the host had none
// is moved into the host's place, once root made it, only when no
// program of the name holds it: a program still running on the own
// record would go on unseen by every later Open, Release and close of
// the name, and a Release would record a final number below what it
// hands out.
func TestOwnRecordNotMovedUnderARunningProgram(t *testing.T) {
	base := t.TempDir()
	own := filepath.Join(base, "own")   // the user's own place
	host := filepath.Join(base, "host") // the host's place, made later
	require.NoError(t, os.Mkdir(filepath.Join(base, "ctr"), 0o700))
	counter := filepath.Join(base, "ctr", "c")
	oldTB := testBindingDir
	testBindingDir = func(string) string { return own }
	t.Cleanup(func() { testBindingDir = oldTB })

	a, err := Open(counter, "web") // running; its record is in the own place
	require.NoError(t, err)
	_, err = a.Next()
	require.NoError(t, err)

	require.NoError(t, os.Mkdir(host, 0o1777))
	require.NoError(t, os.Chmod(host, os.ModeSticky|0o777))
	hp, err := hoststate.OpenPlace(host, hoststate.PlaceOptions{Owners: []uint32{0}})
	require.NoError(t, err)
	defer hp.Close()
	o := defaultOptions()
	_, _, err = adoptOwnRecord(hp, own, "web", &o)
	require.ErrorIs(t, err, ErrInUse)
	_, ok, err := hp.Read("web")
	require.NoError(t, err)
	require.False(t, ok, "nothing was moved")
	_, err = os.Lstat(filepath.Join(own, "web"))
	require.NoError(t, err, "the own record stays where its program is")

	require.NoError(t, a.Close())
	r, ok, err := adoptOwnRecord(hp, own, "web", &o)
	require.NoError(t, err)
	require.True(t, ok, "moved once no program holds it")
	require.Equal(t, "web", r.Name)
	_, err = os.Lstat(filepath.Join(own, "web"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
