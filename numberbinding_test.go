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
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/snapidtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Without a registry one node number goes with one node name on the host:
// a second name under a number in use is refused before anything is made;
// the number is free again once the first name's counter is gone; the
// name form binds a number it is given too, so that switching forms later
// cannot meet another name's ids.
func TestNumberBinding(t *testing.T) {
	dir := t.TempDir()
	bindings := filepath.Join(dir, "names")
	opts := func(n uint64, f Format) []Option {
		return []Option{WithBindingDir(bindings), WithFormat(f), WithNodeNumber(n)}
	}
	a := filepath.Join(dir, "a")
	g, err := Open(a, "web_a", opts(7, FormatDecimal)...)
	require.NoError(t, err)
	id, err := g.UniqueID()
	require.NoError(t, err)
	assert.Equal(t, "7.1", id)
	require.NoError(t, g.Close())
	b, err := os.ReadFile(filepath.Join(bindings, "7"))
	require.NoError(t, err)
	assert.Equal(t, "snapid-number 1\nweb_a\n", string(b))

	for _, f := range []Format{FormatDecimal, FormatName} {
		bpath := filepath.Join(dir, "b"+f.String())
		_, err = Open(bpath, "web_b", opts(7, f)...)
		require.ErrorIs(t, err, ErrNumberBound, "%s: a second name under number 7", f)
		assert.Contains(t, err.Error(), `"web_a"`)
		_, serr := os.Stat(bpath)
		assert.True(t, os.IsNotExist(serr), "the refused Open made the counter")
		_, serr = os.Stat(filepath.Join(bindings, "web_b"))
		assert.True(t, os.IsNotExist(serr), "the refused Open bound the name")
	}

	g, err = Open(a, "web_a", opts(7, FormatDecimal)...)
	require.NoError(t, err, "the same name and number again")
	require.NoError(t, g.Close())

	// Another number for the second name is fine.
	g, err = Open(filepath.Join(dir, "b"), "web_b", opts(8, FormatName)...)
	require.NoError(t, err)
	require.NoError(t, g.Close())

	// The first name's counter retired: its number is free.
	require.NoError(t, os.Remove(a))
	g, err = Open(filepath.Join(dir, "c"), "web_c", opts(7, FormatDecimal)...)
	require.NoError(t, err, "number 7's name is no longer in use")
	require.NoError(t, g.Close())
	b, err = os.ReadFile(filepath.Join(bindings, "7"))
	require.NoError(t, err)
	assert.Equal(t, "snapid-number 1\nweb_c\n", string(b))
}

// A failed Open takes its number binding back (a stale one is put back);
// a damaged number binding is refused and left as it is.
func TestNumberBindingRefusals(t *testing.T) {
	dir := t.TempDir()
	bindings := filepath.Join(dir, "names")
	opts := []Option{WithBindingDir(bindings), WithFormat(FormatDecimal), WithNodeNumber(3)}

	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte("short"), 0o600)) // a corrupt counter
	_, err := Open(bad, "web_a", opts...)
	require.ErrorIs(t, err, ErrCorrupt)
	_, serr := os.Stat(filepath.Join(bindings, "3"))
	assert.True(t, os.IsNotExist(serr), "a failed Open left its number binding")

	// The counter's creation fails after the bindings were recorded.
	cdir := filepath.Join(dir, "cdir")
	require.NoError(t, os.Mkdir(cdir, 0o700))
	fsys := &bindSyncFS{bind: cdir, fail: true}
	_, err = Open(filepath.Join(cdir, "c"), "web_a", append(opts, ExportWithFS(fsys))...)
	require.Error(t, err)
	require.True(t, fsys.failed, "the injected failure was not reached")
	_, serr = os.Stat(filepath.Join(bindings, "3"))
	assert.True(t, os.IsNotExist(serr), "a failed Open left its number binding")

	require.NoError(t, os.MkdirAll(bindings, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(bindings, "3"), []byte("garbage\n"), 0o644))
	_, err = Open(filepath.Join(dir, "c"), "web_a", opts...)
	require.ErrorIs(t, err, ErrCorruptBinding)
	b, err := os.ReadFile(filepath.Join(bindings, "3"))
	require.NoError(t, err)
	assert.Equal(t, "garbage\n", string(b), "a damaged binding was changed")
}

// Root binding a node number host-wide reads the users' bindings: a
// number a user of the host uses under another name is refused, naming
// the user.
func TestNumberBindingRootAfterUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run another user")
	}
	root, home := hostWithNobody(t, "snapid-numroot-")

	// Root bound 42 first, for a counter that then went out of sight
	// (an unmounted file system) while the user bound 42 to its own name.
	rootCounter := filepath.Join(root, "rootc", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(rootCounter), 0o700))
	g, err := Open(rootCounter, "db", WithFormat(FormatDecimal), WithNodeNumber(42))
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.NoError(t, os.Rename(filepath.Dir(rootCounter), filepath.Dir(rootCounter)+".off"))

	userCounter := filepath.Join(home, "c.u64")
	names := filepath.Join(home, ".local", "state", "snapid", "names")
	testfs.AsOtherUser(t, "mkdir -p "+names+" && chmod 700 "+filepath.Join(home, ".local", "state", "snapid")+" "+names+
		" && printf '\\0\\0\\0\\0\\0\\0\\0\\3' > "+userCounter+
		" && printf 'snapid-binding 1\\n\"%s\"\\n' "+userCounter+" > "+filepath.Join(names, "vm")+
		" && printf 'snapid-number 1\\nvm\\n' > "+filepath.Join(names, "42"))

	require.NoError(t, os.Rename(filepath.Dir(rootCounter)+".off", filepath.Dir(rootCounter))) // back in sight
	_, err = Open(rootCounter, "db", WithFormat(FormatDecimal), WithNodeNumber(42))
	require.ErrorIs(t, err, ErrNumberBound, "root issued under a number a user of the host uses (root's own binding of it was older)")
	require.Contains(t, err.Error(), "nobody")

	require.NoError(t, os.Remove(userCounter))
	g, err = Open(rootCounter, "db", WithFormat(FormatDecimal), WithNodeNumber(42))
	require.NoError(t, err, "the user's name is no longer in use: the number is free")
	require.NoError(t, g.Close())
}

// Without a registry the host's striped ids keep one stride: ids of two
// strides meet (1×10+1 = 2×5+1), so another stride is refused, for the
// same counter and for another name, before anything is made.
func TestStrideBoundWithoutRegistry(t *testing.T) {
	dir := t.TempDir()
	bindings := filepath.Join(dir, "names")
	striped := func(node, stride uint64) []Option {
		return []Option{WithBindingDir(bindings), WithFormat(FormatStriped), WithNodeNumber(node), WithStride(stride)}
	}
	a := filepath.Join(dir, "a")
	g, err := Open(a, "web_a", striped(1, 10)...)
	require.NoError(t, err)
	v, err := g.UniqueUint64()
	require.NoError(t, err)
	assert.Equal(t, uint64(11), v)
	require.NoError(t, g.Close())

	_, err = Open(a, "web_a", striped(1, 5)...)
	require.ErrorIs(t, err, ErrStrideMismatch, "the same counter with another stride")
	b := filepath.Join(dir, "b")
	_, err = Open(b, "web_b", striped(3, 4)...)
	require.ErrorIs(t, err, ErrStrideMismatch, "another name with another stride")
	_, serr := os.Stat(b)
	assert.True(t, os.IsNotExist(serr), "a refused Open made the counter")
	g, err = Open(b, "web_b", striped(3, 10)...)
	require.NoError(t, err)
	require.NoError(t, g.Close())
}

// A node number a registry gave a name is bound on the host, with that
// name and its counter, by the first numeric-form Open: an Open without a
// registry cannot take it for another name (ErrNumberBound; both would
// issue 1.1), not even once that counter is gone (the registry never
// gives the number to another name), and a registry's number the host
// already uses with another name is refused for the numeric forms (the
// name form, which does not carry it, starts).
func TestNumberBindingOfRegistryNumber(t *testing.T) {
	t.Run("registry first", func(t *testing.T) {
		bind := t.TempDir()
		reg := snapidtest.NewRegistry()
		path := filepath.Join(t.TempDir(), "c")
		g, err := Open(path, "vm1", WithRegistry(reg), WithBindingDir(bind), WithFormat(FormatDecimal))
		require.NoError(t, err)
		id, err := g.UniqueID()
		require.NoError(t, err)
		require.Equal(t, "1.1", id)
		require.NoError(t, g.Close())

		other := filepath.Join(t.TempDir(), "c")
		_, err = Open(other, "vm2", WithBindingDir(bind), WithFormat(FormatDecimal), WithNodeNumber(1))
		require.ErrorIs(t, err, ErrNumberBound)
		require.Contains(t, err.Error(), `"vm1"`)
		_, err = os.Stat(other)
		require.ErrorIs(t, err, os.ErrNotExist, "a refused Open made the counter")

		// The registry's counter gone: the number is still vm1's (the
		// registry never gives it to another name).
		require.NoError(t, os.Remove(path))
		_, err = Open(other, "vm2", WithBindingDir(bind), WithFormat(FormatDecimal), WithNodeNumber(1))
		require.ErrorIs(t, err, ErrNumberBound)
	})
	t.Run("configured first", func(t *testing.T) {
		bind := t.TempDir()
		g, err := Open(filepath.Join(t.TempDir(), "c"), "vm9", WithBindingDir(bind), WithFormat(FormatDecimal), WithNodeNumber(1))
		require.NoError(t, err)
		defer g.Close()
		reg := snapidtest.NewRegistry()
		path := filepath.Join(t.TempDir(), "c")
		_, err = Open(path, "vm1", WithRegistry(reg), WithBindingDir(bind), WithFormat(FormatDecimal))
		require.ErrorIs(t, err, ErrNumberBound)
		require.Contains(t, err.Error(), `"vm9"`)
		g2, err := Open(path, "vm1", WithRegistry(reg), WithBindingDir(bind))
		require.NoError(t, err, "the name form needs no number")
		id, err := g2.UniqueID()
		require.NoError(t, err)
		require.Equal(t, "vm1-1", id)
		require.NoError(t, g2.Close())
	})
}

// holdCounterFS holds the creation (link) of one counter file until
// released: root's Open is then past bindNumber (and its re-check of the
// users' number bindings) but its counter does not exist yet.
type holdCounterFS struct {
	ExportOSFS
	counter string
	waiting chan struct{}
	release chan struct{}
}

func (f *holdCounterFS) Link(oldname, newname string) error {
	if newname == f.counter {
		close(f.waiting)
		<-f.release
	}
	return f.ExportOSFS.Link(oldname, newname)
}

const envNumberRaceChild = "SNAPID_NUMBER_RACE_CHILD"

// Root's and a user's first Opens of one node number (42) under two
// names, root held between its bindNumber and its counter's creation and
// the user opening meanwhile: each re-checks the other's number binding
// after recording its own, so they do not both succeed and issue 42.1.
func TestNumberRootUserRace(t *testing.T) {
	if work := os.Getenv(envNumberRaceChild); work != "" {
		require.NotEqual(t, 0, os.Geteuid())
		ExportBindingDefaults(t, os.Getenv("SNAPID_NUMBER_RACE_SHARED"))
		g, err := Open(filepath.Join(work, "vm.u64"), "vm", WithFormat(FormatDecimal), WithNodeNumber(42))
		if err != nil {
			fmt.Printf("CHILD refused: %v\n", err)
			return
		}
		id, err := g.UniqueID()
		require.NoError(t, err)
		require.NoError(t, g.Close())
		fmt.Printf("CHILD id %s\n", id)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run another user")
	}
	root, shared, home, work, bin := raceWithNobody(t, "snapid-numrace-")
	mine := filepath.Join(root, "mine")
	require.NoError(t, os.Mkdir(mine, 0o755)) // root's counters' directory, readable by others (as /var/lib/app usually is)
	rootCounter := filepath.Join(mine, "db.u64")

	hold := &holdCounterFS{counter: rootCounter, waiting: make(chan struct{}), release: make(chan struct{})}
	type result struct {
		g   *Generator
		err error
	}
	res := make(chan result, 1)
	go func() {
		g, err := Open(rootCounter, "db", WithFormat(FormatDecimal), WithNodeNumber(42), ExportWithFS(hold))
		res <- result{g, err}
	}()
	<-hold.waiting

	cmd := exec.Command(bin, "-test.run", "^TestNumberRootUserRace$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envNumberRaceChild+"="+work, "SNAPID_NUMBER_RACE_SHARED="+shared,
		"HOME="+home, "XDG_STATE_HOME=", "TMPDIR="+filepath.Join(work, "tmp"), "SNAPID_BINDING_DIR=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	close(hold.release)
	r := <-res
	t.Logf("child: %s", strings.TrimSpace(string(out)))
	if r.err != nil {
		t.Logf("root refused: %v", r.err)
		return
	}
	defer r.g.Close()
	rootID, err := r.g.UniqueID()
	require.NoError(t, err)
	assert.NotContains(t, string(out), "CHILD id "+rootID, "root and uid %d both issued %s under node number 42", nobody, rootID)
}

// A registry that gives no node numbers (any Registry that is not a
// NumberRegistry) with WithNodeNumber: the configured number is bound on
// the host, so two names on one host under one number are not both
// accepted to issue the same decimal ids.
func TestNumberConfiguredWithPlainRegistry(t *testing.T) {
	reg := noNumbers{snapidtest.NewRegistry()}
	a, b := newSeqHost(t, "pl_a"), newSeqHost(t, "pl_b")
	bind := t.TempDir()
	ga, err := Open(a.path, a.name, WithRegistry(reg), WithHostInfo(a.info), WithBindingDir(bind), WithFormat(FormatDecimal), WithNodeNumber(42))
	require.NoError(t, err)
	defer ga.Close()
	gb, err := Open(b.path, b.name, WithRegistry(reg), WithHostInfo(b.info), WithBindingDir(bind), WithFormat(FormatDecimal), WithNodeNumber(42))
	if err != nil {
		require.ErrorIs(t, err, ErrNumberBound)
		return
	}
	defer gb.Close()
	ida, err := ga.UniqueID()
	require.NoError(t, err)
	idb, err := gb.UniqueID()
	require.NoError(t, err)
	assert.NotEqual(t, ida, idb, "two names on one host (one binding directory) under node number 42 both issued %s", ida)
}

// fileHoldFS holds the creation (link) of one counter file until a file
// appears, telling that it waits by creating another: it holds a child
// process, which a channel cannot reach.
type fileHoldFS struct {
	ExportOSFS
	counter, waiting, release string
}

func (f *fileHoldFS) Link(oldname, newname string) error {
	if newname == f.counter {
		if err := os.WriteFile(f.waiting, nil, 0o644); err != nil {
			return err
		}
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(f.release); err == nil {
				break
			}
		}
	}
	return f.ExportOSFS.Link(oldname, newname)
}

const envNumberRaceUserFirst = "SNAPID_NUMBER_RACE_USER_FIRST"

// The other order of TestNumberRootUserRace: the user's first Open of
// node number 42 is held after it bound the number but before its counter
// exists, and root opens 42 under another name meanwhile. Root judges the
// user's binding stale (no counter) and goes on; the user, checking root's
// binding again once its counter exists, must refuse.
func TestNumberRootUserRaceUserFirst(t *testing.T) {
	if work := os.Getenv(envNumberRaceUserFirst); work != "" {
		require.NotEqual(t, 0, os.Geteuid())
		ExportBindingDefaults(t, os.Getenv("SNAPID_NUMBER_RACE_SHARED"))
		counter := filepath.Join(work, "vm.u64")
		hold := &fileHoldFS{counter: counter, waiting: filepath.Join(work, "waiting"), release: filepath.Join(work, "release")}
		g, err := Open(counter, "vm", WithFormat(FormatDecimal), WithNodeNumber(42), ExportWithFS(hold))
		if err != nil {
			fmt.Printf("CHILD refused: %v\n", err)
			return
		}
		id, err := g.UniqueID()
		require.NoError(t, err)
		require.NoError(t, g.Close())
		fmt.Printf("CHILD id %s\n", id)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run another user")
	}
	root, shared, home, work, bin := raceWithNobody(t, "snapid-numrace2-")

	cmd := exec.Command(bin, "-test.run", "^TestNumberRootUserRaceUserFirst$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envNumberRaceUserFirst+"="+work, "SNAPID_NUMBER_RACE_SHARED="+shared,
		"HOME="+home, "XDG_STATE_HOME=", "TMPDIR="+filepath.Join(work, "tmp"), "SNAPID_BINDING_DIR=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	var out lockedBuffer // written by the command's copying goroutine
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(work, "waiting")); err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "the child never reached its counter's creation: %s", out.String())
	}

	mine := filepath.Join(root, "mine")
	require.NoError(t, os.Mkdir(mine, 0o755))
	g, rootErr := Open(filepath.Join(mine, "db.u64"), "db", WithFormat(FormatDecimal), WithNodeNumber(42))
	var rootID string
	if rootErr == nil {
		var err error
		rootID, err = g.UniqueID()
		require.NoError(t, err)
		defer g.Close()
	}
	require.NoError(t, os.WriteFile(filepath.Join(work, "release"), nil, 0o644))
	require.NoError(t, cmd.Wait(), "%s", out.String())
	t.Logf("root: id %q, error %v; child: %s", rootID, rootErr, strings.TrimSpace(out.String()))
	if rootErr == nil {
		assert.NotContains(t, out.String(), "CHILD id ", "root and uid %d both issued under node number 42 (root %s)", nobody, rootID)
	}
	assert.True(t, rootErr != nil || strings.Contains(out.String(), "CHILD refused"), "neither Open was refused")
}

// lockedBuffer is a strings.Builder safe for one writer and readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
