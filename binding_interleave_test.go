package snapid_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/stretchr/testify/require"
)

// Environment of the child of TestBindingRootUserInterleaving.
const (
	envInterleaveShared = "SNAPID_TEST_INTERLEAVE_SHARED" // the host-wide directory
	envInterleaveWork   = "SNAPID_TEST_INTERLEAVE_WORK"   // the child's directory (counters, signals)
	envInterleaveCheck  = "SNAPID_TEST_INTERLEAVE_CHECK"  // set: the child stops after its first host-wide check, not at its link
)

// pauseAtCounterLink is a file-system seam that stops an Open at the link
// of its new counter (a path ending in .u64): it creates <sync>/<who>-at-link,
// then waits for <sync>/<who>-go (at most a minute: a test that lost its
// way ends instead of hanging) before it links.
type pauseAtCounterLink struct {
	ExportOSFS
	sync, who string
}

func (p pauseAtCounterLink) Link(oldname, newname string) error {
	if strings.HasSuffix(newname, ".u64") {
		_ = os.WriteFile(filepath.Join(p.sync, p.who+"-at-link"), nil, 0o644)
		waitForFile(filepath.Join(p.sync, p.who+"-go"), time.Minute)
	}
	return p.ExportOSFS.Link(oldname, newname)
}

// waitForFile waits until path exists or bound has passed, and reports
// whether it exists.
func waitForFile(path string, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for {
		if _, err := os.Lstat(path); err == nil {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Root's and another user's first Opens of one name, each with a counter
// of its own, forced into the interleavings where each side's check of
// the other's binding runs while the other's counter does not exist yet
// (each records its binding before it makes its counter). Root's counters
// are in a 0755 directory, as in /var/lib/snapid, so the user sees that
// root's counter is absent. In either order exactly one side issues ids:
//
//   - the user first: the user's Open has linked its binding and stops
//     before the link of its counter; root's Open must not take the
//     user's binding for stale (it waits for the user's bindings lock and
//     finds the user's counter);
//   - root first: root's Open has linked its binding and stops before the
//     link of its counter; the user's Open must not take root's binding
//     for stale.
func TestBindingRootUserInterleaving(t *testing.T) {
	if shared := os.Getenv(envInterleaveShared); shared != "" {
		interleaveChild(t, shared)
		return
	}
	requireRoot(t)
	for _, userFirst := range []bool{true, false} {
		name := "root first"
		if userFirst {
			name = "user first"
		}
		t.Run(name, func(t *testing.T) {
			root, shared, home, work, bin := raceWithNobody(t, "snapid-interleave-")
			rootDir := filepath.Join(root, "rootc")
			require.NoError(t, os.Mkdir(rootDir, 0o755))
			sync := work // both sides can write it
			child := exec.Command(bin, "-test.run", "^TestBindingRootUserInterleaving$", "-test.v", "-test.count=1")
			child.Env = append(os.Environ(), envInterleaveShared+"="+shared, envInterleaveWork+"="+work,
				"HOME="+home, "XDG_STATE_HOME=", "TMPDIR="+filepath.Join(work, "tmp"), "SNAPID_BINDING_DIR=")
			child.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
			out := &childOutput{}
			child.Stdout, child.Stderr = out, out

			type result struct {
				id  string
				err error
			}
			rootDone := make(chan result, 1)
			openRoot := func() {
				go func() {
					g, err := Open(filepath.Join(rootDir, "vm.u64"), "vm", ExportWithFS(pauseAtCounterLink{sync: sync, who: "root"}))
					if err != nil {
						rootDone <- result{err: err}
						return
					}
					id, err := g.UniqueID()
					g.Close()
					rootDone <- result{id: id, err: err}
				}()
			}
			var rootRes result
			if userFirst {
				require.NoError(t, child.Start())
				require.True(t, waitForFile(filepath.Join(sync, "user-at-link"), time.Minute), "the user's Open never reached its counter's link:\n%s", out.String())
				openRoot()
				// Root either gets to its own counter's link (the
				// defect: it took the user's binding for stale) or waits
				// for the user's lock; a few seconds tell them apart on
				// a busy machine (if root is slower, the test only
				// checks less).
				var early *result
				deadline := time.Now().Add(5 * time.Second)
				for early == nil && time.Now().Before(deadline) {
					if _, err := os.Lstat(filepath.Join(sync, "root-at-link")); err == nil {
						break
					}
					select {
					case r := <-rootDone:
						early = &r
					case <-time.After(10 * time.Millisecond):
					}
				}
				require.NoError(t, os.WriteFile(filepath.Join(sync, "user-go"), nil, 0o644))
				require.NoError(t, child.Wait(), "the child, as uid %d:\n%s", nobody, out.String())
				require.NoError(t, os.WriteFile(filepath.Join(sync, "root-go"), nil, 0o644))
				if early != nil {
					rootRes = *early
				} else {
					rootRes = <-rootDone
				}
			} else {
				require.NoError(t, os.WriteFile(filepath.Join(sync, "user-go"), nil, 0o644))
				openRoot()
				var early *result
				select {
				case r := <-rootDone:
					early = &r
				case <-waitChan(filepath.Join(sync, "root-at-link"), time.Minute):
				}
				require.Nil(t, early, "root's Open ended before its counter's link")
				require.NoError(t, child.Run(), "the child, as uid %d:\n%s", nobody, out.String())
				require.NoError(t, os.WriteFile(filepath.Join(sync, "root-go"), nil, 0o644))
				rootRes = <-rootDone
			}
			userOpened := strings.Contains(out.String(), "INTERLEAVE opened")
			require.True(t, userOpened || strings.Contains(out.String(), "INTERLEAVE refused"), "the child said nothing:\n%s", out.String())
			rootOpened := rootRes.err == nil
			t.Logf("root: %q %v; user: %s", rootRes.id, rootRes.err, strings.TrimSpace(out.String()))
			require.False(t, rootOpened && userOpened, "root and uid %d both issued ids under vm (root %s):\n%s", nobody, rootRes.id, out.String())
			if userFirst {
				require.True(t, userOpened, "the user came first:\n%s", out.String())
				require.ErrorIs(t, rootRes.err, ErrNameBound)
				require.Contains(t, rootRes.err.Error(), "nobody")
			} else {
				require.NoError(t, rootRes.err, "root came first")
				require.Contains(t, out.String(), `root bound "vm"`)
			}
		})
	}
}

// childOutput collects a child's output while the test reads it.
type childOutput struct {
	mu sync.Mutex
	b  strings.Builder
}

func (c *childOutput) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.Write(p)
}

func (c *childOutput) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// waitChan is closed once path exists (or after bound).
func waitChan(path string, bound time.Duration) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		waitForFile(path, bound)
		close(c)
	}()
	return c
}

// interleaveChild is the user's side of TestBindingRootUserInterleaving:
// it opens vm with its counter in its work directory, stopping at its
// counter's link, and says whether it issued an id.
func interleaveChild(t *testing.T, shared string) {
	require.NotEqual(t, 0, os.Geteuid(), "the child runs as another user")
	work := os.Getenv(envInterleaveWork)
	ExportBindingDefaults(t, shared)
	if os.Getenv(envInterleaveCheck) != "" {
		ExportAfterHostWideCheck(t, func() {
			_ = os.WriteFile(filepath.Join(work, "user-checked"), nil, 0o644)
			waitForFile(filepath.Join(work, "user-go"), time.Minute)
		})
	}
	g, err := Open(filepath.Join(work, "vm.u64"), "vm", ExportWithFS(pauseAtCounterLink{sync: work, who: "user"}))
	if err != nil {
		require.ErrorIs(t, err, ErrNameBound)
		fmt.Printf("INTERLEAVE refused: vm is bound host-wide: %v\n", err)
		return
	}
	id, err := g.UniqueID()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	fmt.Printf("INTERLEAVE opened %s\n", id)
}

// A user's own binding of a name whose counter an earlier Open of the user
// never made (it was killed) is stale to root. The user's next Open checks
// the host-wide bindings, then stops before it takes its lock; root's Open
// of the name, meanwhile, takes the user's binding for stale and issues.
// The user's Open, finding its binding its own, makes its counter: it must
// check root's bindings again and refuse, not issue beside root.
func TestBindingUserOwnStaleBindingRechecked(t *testing.T) {
	requireRoot(t)
	root, shared, home, work, bin := raceWithNobody(t, "snapid-interleave-own-")
	rootDir := filepath.Join(root, "rootc")
	require.NoError(t, os.Mkdir(rootDir, 0o755))
	userBinds(t, home, "vm", filepath.Join(work, "vm.u64"))
	child := exec.Command(bin, "-test.run", "^TestBindingRootUserInterleaving$", "-test.v", "-test.count=1")
	child.Env = append(os.Environ(), envInterleaveShared+"="+shared, envInterleaveWork+"="+work, envInterleaveCheck+"=1",
		"HOME="+home, "XDG_STATE_HOME=", "TMPDIR="+filepath.Join(work, "tmp"), "SNAPID_BINDING_DIR=")
	child.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out := &childOutput{}
	child.Stdout, child.Stderr = out, out
	// (The child's counter link waits for the same user-go.)
	require.NoError(t, child.Start())
	require.True(t, waitForFile(filepath.Join(work, "user-checked"), time.Minute), "the user's Open never got past its first check:\n%s", out.String())
	g, err := Open(filepath.Join(rootDir, "vm.u64"), "vm")
	rootOpened := err == nil
	if rootOpened {
		_, err = g.UniqueID()
		require.NoError(t, err)
		require.NoError(t, g.Close())
	}
	require.NoError(t, os.WriteFile(filepath.Join(work, "user-go"), nil, 0o644))
	require.NoError(t, child.Wait(), "the child, as uid %d:\n%s", nobody, out.String())
	userOpened := strings.Contains(out.String(), "INTERLEAVE opened")
	t.Logf("root opened: %v (%v); user: %s", rootOpened, err, strings.TrimSpace(out.String()))
	require.False(t, rootOpened && userOpened, "root and uid %d both issued ids under vm:\n%s", nobody, out.String())
	require.True(t, rootOpened, "the user's binding was stale when root opened: %v", err)
	require.Contains(t, out.String(), "INTERLEAVE refused")
}
