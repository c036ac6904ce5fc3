package engine_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// inodeAt returns the inode of the file at path, or 0.
func inodeAt(path string) uint64 {
	st, err := os.Lstat(path)
	if err != nil {
		return 0
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// The heartbeat file removed or replaced while the host's processes run:
// a process opened afterwards makes a new one, and without more the host
// would split in two (two records, two holders, two refreshes per
// interval, a take-over learned by one half not seen by the other). Each
// running process notices at its next poll that the file at the path is
// not the one it has open, and uses the one at the path: one file, one
// holder, and a take-over stops every process.
func TestHeartbeatFileReplacedRejoined(t *testing.T) {
	t.Parallel()
	const interval = 200 * time.Millisecond
	for _, how := range []string{"removed", "replaced"} {
		t.Run(how, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			dir := t.TempDir()
			path := filepath.Join(dir, "a", "c.u64")
			require.NoError(t, os.Mkdir(filepath.Dir(path), 0o755))
			hb := path + ".heartbeat"
			opts := []Option{WithHeartbeat(interval), WithCloneWindow(0), WithReserveStep(1 << 20)}
			var gs []*Generator
			for range 3 {
				g := openReg(t, path, "web_1", reg, opts...)
				defer g.Close()
				gs = append(gs, g)
			}
			require.True(t, waitFor(10*time.Second, func() bool { return len(holders(gs)) == 1 }), "one holder")
			old := inodeAt(hb)
			require.NotZero(t, old)
			switch how {
			case "removed":
				require.NoError(t, os.Remove(hb))
			case "replaced":
				tmp := filepath.Join(filepath.Dir(path), "tmp")
				require.NoError(t, os.WriteFile(tmp, nil, 0o644))
				require.NoError(t, os.Rename(tmp, hb))
			}
			late := openReg(t, path, "web_1", reg, opts...)
			defer late.Close()
			gs = append(gs, late)
			shared := func() bool {
				ino := inodeAt(hb)
				if ino == 0 || ino == old {
					return false
				}
				for _, g := range gs {
					if g.ExportHeartbeatInode() != ino {
						return false
					}
				}
				return true
			}
			require.True(t, waitFor(10*time.Second, shared), "the host's processes still use %d heartbeat files", func() int {
				m := map[uint64]bool{}
				for _, g := range gs {
					m[g.ExportHeartbeatInode()] = true
				}
				return len(m)
			}())
			require.True(t, waitFor(10*time.Second, func() bool { return len(holders(gs)) == 1 }), "one holder for the host")
			b, err := os.ReadFile(hb)
			require.NoError(t, err)
			require.Len(t, b, 40, "the record was carried into the file at the path")

			// A take-over learned by the holder reaches every process.
			other := filepath.Join(dir, "b", "c.u64")
			require.NoError(t, os.Mkdir(filepath.Dir(other), 0o755))
			taker, err := Open(other, "web_1", WithRegistry(reg), WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()),
				WithTakeover(0), WithSync(false), WithCloneWindow(0))
			require.NoError(t, err)
			defer taker.Close()
			for i, g := range gs {
				require.True(t, waitFor(10*time.Second, func() bool {
					_, err := g.Next()
					return errors.Is(err, ErrNameTaken)
				}), "process %d still issues after the name was taken over", i)
			}
		})
	}
}

// Something that is not a regular file planted at <counter>.heartbeat is
// refused at Open with a message that names the heartbeat file (not the
// counter) and says what to do; planted while a process runs, the process
// keeps the file it has and goes on refreshing.
func TestHeartbeatFilePlantedNamed(t *testing.T) {
	t.Parallel()
	skipShort(t)
	for _, c := range []struct {
		what string
		want error
	}{{"fifo", ErrNotRegular}, {"dir", ErrNotRegular}, {"symlink", ErrSymlink}} {
		t.Run(c.what, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			dir, path := ctPath(t)
			hb := path + ".heartbeat"
			calls := logCalls(reg)
			g := openReg(t, path, "web_1", reg, WithCloneWindow(0), WithHeartbeat(200*time.Millisecond), WithReserveStep(1<<20))
			defer g.Close()
			require.NoError(t, os.Remove(hb))
			switch c.what {
			case "fifo":
				require.NoError(t, syscall.Mkfifo(hb, 0o600))
			case "symlink":
				require.NoError(t, os.WriteFile(filepath.Join(dir, "elsewhere"), nil, 0o600))
				require.NoError(t, os.Symlink(filepath.Join(dir, "elsewhere"), hb))
			case "dir":
				require.NoError(t, os.Mkdir(hb, 0o700))
			}
			_, err := Open(path, "web_1", WithRegistry(reg), WithSync(false), WithCloneWindow(0), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}))
			require.ErrorIs(t, err, c.want)
			t.Log(err)
			assert.Contains(t, err.Error(), "the heartbeat file is")
			assert.Contains(t, err.Error(), "remove it")
			assert.False(t, strings.Contains(err.Error(), "counter path"), "the message calls the heartbeat file the counter path")

			n := calls.count("touch")
			require.True(t, waitFor(10*time.Second, func() bool { return calls.count("touch") > n+1 }), "the running process stopped refreshing")
			_, err = g.Next()
			assert.NoError(t, err)
		})
	}
}

// A refused Open (a second name on a counter) changes nothing, as its
// message says: it does not create <counter>.heartbeat when it is missing
// (a counter last used by an earlier version).
func TestHeartbeatRefusedOpenCreatesNoHeartbeatFile(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	dir, path := ctPath(t)
	g := openReg(t, path, "web_a", reg, WithCloneWindow(0))
	require.NoError(t, g.Close())
	require.NoError(t, os.Remove(path+".heartbeat"))
	before := testfs.Snapshot(t, dir)
	_, err := Open(path, "web_b", WithRegistry(reg), WithSync(false), WithCloneWindow(0), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}))
	require.ErrorIs(t, err, ErrNameMismatch)
	t.Logf("%v", err)
	testfs.RequireUnchanged(t, dir, before)
}

// A heartbeat file that belongs to another user is refused at Open,
// promptly, and nothing changes.
func TestHeartbeatOtherUsersHeartbeatRefused(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	reg := registrytest.NewRegistry()
	dir, path := ctPath(t)
	g := openReg(t, path, "web_1", reg, WithCloneWindow(0))
	require.NoError(t, g.Close())
	require.NoError(t, os.Chown(path+".heartbeat", nobody, nobody))
	before := testfs.Snapshot(t, dir)
	done := make(chan error, 1)
	go func() {
		g, err := Open(path, "web_1", WithRegistry(reg), WithSync(false), WithCloneWindow(0), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}))
		if err == nil {
			g.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err)
		t.Log(err)
	case <-time.After(5 * time.Second):
		t.Fatal("Open hangs")
	}
	testfs.RequireUnchanged(t, dir, before)
}

// Something planted at <counter>.heartbeat: Open refuses promptly.
func TestHeartbeatPlantedRefusedPromptly(t *testing.T) {
	t.Parallel()
	for _, what := range []string{"fifo", "symlink", "dir"} {
		t.Run(what, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			dir, path := ctPath(t)
			g := openReg(t, path, "web_1", reg, WithCloneWindow(0))
			require.NoError(t, g.Close())
			hb := path + ".heartbeat"
			require.NoError(t, os.Remove(hb))
			switch what {
			case "fifo":
				require.NoError(t, syscall.Mkfifo(hb, 0o600))
			case "symlink":
				require.NoError(t, os.WriteFile(dir+"/elsewhere", nil, 0o600))
				require.NoError(t, os.Symlink(dir+"/elsewhere", hb))
			case "dir":
				require.NoError(t, os.Mkdir(hb, 0o700))
			}
			done := make(chan error, 1)
			go func() {
				g, err := Open(path, "web_1", WithRegistry(reg), WithSync(false), WithCloneWindow(0), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}))
				if err == nil {
					g.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				assert.Error(t, err)
				t.Logf("%s: %v", what, err)
			case <-time.After(5 * time.Second):
				t.Fatal("Open hangs")
			}
		})
	}
}
