package snapid_test

import (
	"context"
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

// R1: a counter whose <counter>.number records the registry's number 1 is
// opened without the registry (Open without WithRegistry, as `snapctl next
// --no-registry --format decimal --node-number N` does) with another
// number: nothing compares WithNodeNumber with the number file, and the
// host issues under a number the registry gave another name.
func TestNumberFileWithoutNumberingRegistry(t *testing.T) {
	reg := snapidtest.NewRegistry()
	a, b := newSeqHost(t, "nm_a"), newSeqHost(t, "nm_b")
	ga := a.open(t, reg, WithFormat(FormatDecimal))
	_, na, _ := ga.Form()
	require.NoError(t, ga.Close())
	gb := b.open(t, reg, WithFormat(FormatDecimal))
	defer gb.Close()
	_, nb, _ := gb.Form()
	require.NotEqual(t, na, nb)
	idb, err := gb.UniqueID()
	require.NoError(t, err)

	name, recorded, _, ok, err := ReadNodeNumber(a.path)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, a.name, name)
	require.Equal(t, na, recorded)

	g, err := Open(a.path, a.name, WithFormat(FormatDecimal), WithNodeNumber(nb), WithBindingDir(t.TempDir()))
	if err != nil {
		t.Logf("refused (the fix): %v", err)
		return
	}
	defer g.Close()
	ida, err := g.UniqueID()
	require.NoError(t, err)
	assert.NotEqual(t, idb, ida, "host a (registry number %d, recorded in %s.number) issued %s under host b's registry number: the same id as host b", na, a.path, ida)
}

// R2: the striped form with the stride coming from the registry (no
// WithStride) and a WithMaxID below every striped id: refused only after
// the claim, so the bad bound claimed the name (and gave it a number) in
// the registry.
func TestNumberBadBoundRefusedBeforeClaim(t *testing.T) {
	ctx := context.Background()
	reg := snapidtest.NewRegistry()
	_, err := reg.SetStride(ctx, 1000)
	require.NoError(t, err)
	d := newSeqHost(t, "nm_d")
	_, err = Open(d.path, d.name, WithRegistry(reg), WithHostInfo(d.info), WithFormat(FormatStriped), WithMaxID(5))
	require.ErrorIs(t, err, ErrInvalidOption)
	row, ok := reg.Row("nm_d")
	assert.False(t, ok, "a refused bound (5 < 1000+node) claimed the name: %+v", row)
	_, serr := os.Stat(d.path + ".number")
	assert.True(t, os.IsNotExist(serr), "a refused bound wrote the number file")
}

// R3: an existing name whose registry number is not below the cluster's
// stride, opened striped without WithStride/WithNodeNumber: precheckNumber
// returns early, so the claim replaces the row's session (and extends its
// mark) before the form is refused.
func TestNumberAboveStrideRefusedBeforeClaim(t *testing.T) {
	ctx := context.Background()
	reg := snapidtest.NewRegistry()
	x, y := newSeqHost(t, "nm_x"), newSeqHost(t, "nm_y")
	g := x.open(t, reg) // number 1
	require.NoError(t, g.Close())
	g = y.open(t, reg) // number 2
	require.NoError(t, g.Close())
	_, err := reg.SetStride(ctx, 2)
	require.NoError(t, err)
	before, ok := reg.Row("nm_y")
	require.True(t, ok)
	require.Equal(t, uint64(2), before.Number)
	_, err = Open(y.path, y.name, WithRegistry(reg), WithHostInfo(y.info), WithFormat(FormatStriped))
	require.ErrorIs(t, err, ErrInvalidOption)
	after, _ := reg.Row("nm_y")
	assert.Equal(t, before, after, "a form refused for its node number (2, stride 2) changed the registry's row")
}

// R4: without a registry, root's first striped Open reads only the
// host-wide .stride, not the users' ones: a user's node using stride 5
// and root's using stride 10 on one host issue the same integer.
func TestStrideRootChecksUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run another user")
	}
	root, home := hostWithNobody(t, "snapid-stride-")

	// The user's node "vm", number 1, stride 5, has issued 6, 11 and 16
	// (counter 3), as its own Open would have recorded it.
	userCounter := filepath.Join(home, "c.u64")
	names := filepath.Join(home, ".local", "state", "snapid", "names")
	testfs.AsOtherUser(t, "mkdir -p "+names+" && chmod 700 "+filepath.Join(home, ".local", "state", "snapid")+" "+names+
		" && printf '\\0\\0\\0\\0\\0\\0\\0\\3' > "+userCounter+
		" && printf 'snapid-binding 1\\n\"%s\"\\n' "+userCounter+" > "+filepath.Join(names, "vm")+
		" && printf 'snapid-number 1\\nvm\\n' > "+filepath.Join(names, "1")+
		" && printf 'snapid-stride 1\\n5\\n' > "+filepath.Join(names, ".stride"))

	rootCounter := filepath.Join(root, "rootc", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(rootCounter), 0o700))
	g, err := Open(rootCounter, "db", WithFormat(FormatStriped), WithNodeNumber(6), WithStride(10))
	if err != nil {
		require.ErrorIs(t, err, ErrStrideMismatch)
		return
	}
	defer g.Close()
	v, err := g.UniqueUint64()
	require.NoError(t, err)
	userIDs := map[uint64]bool{1*5 + 1: true, 2*5 + 1: true, 3*5 + 1: true}
	assert.False(t, userIDs[v], "root's first striped id %d (node 6, stride 10) is one the user's node 1 (stride 5) issued", v)
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

// R5: root's and a user's first Opens of one node number (42) under two
// names: each re-checks the other's number binding after recording its
// own, but judges it by whether the other's counter exists, which a first
// Open creates only after bindNumber. Root, held between its bindNumber
// and its counter's creation, and the user, opening meanwhile, both
// succeed, and both issue 42.1.
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

// R6: a registry that gives no node numbers (any Registry that is not a
// NumberRegistry) with WithNodeNumber: the number is configured, but
// Open with a registry makes no bindings, so two names on one host under
// one number are both accepted and issue the same decimal ids.
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

// Without a numbering registry, a counter's number file gives the numeric
// forms their number and stride when none is given, and refuses others,
// and another name's number, before anything is made.
func TestNumberFileDefaultsWithoutRegistry(t *testing.T) {
	ctx := context.Background()
	reg := snapidtest.NewRegistry()
	_, err := reg.SetStride(ctx, 100)
	require.NoError(t, err)
	a := newSeqHost(t, "nd_a")
	g := a.open(t, reg, WithFormat(FormatStriped))
	_, n, _ := g.Form()
	require.NoError(t, g.Close())
	before, err := ReadCounter(a.path)
	require.NoError(t, err)

	bind := t.TempDir()
	for _, c := range []struct {
		what string
		name string
		opts []Option
		want error
	}{
		{"another number", a.name, []Option{WithFormat(FormatStriped), WithNodeNumber(n + 1), WithStride(100)}, ErrNumberMismatch},
		{"another stride", a.name, []Option{WithFormat(FormatStriped), WithStride(50)}, ErrStrideMismatch},
		{"the number under another name", "nd_other", []Option{WithFormat(FormatDecimal), WithNodeNumber(n)}, ErrNumberMismatch},
	} {
		_, err := Open(a.path, c.name, append(c.opts, WithBindingDir(bind))...)
		require.ErrorIs(t, err, c.want, c.what)
		after, rerr := ReadCounter(a.path)
		require.NoError(t, rerr)
		require.Equal(t, before, after, "%s changed the counter", c.what)
		entries, _ := os.ReadDir(bind)
		require.Empty(t, entries, "%s made bindings", c.what)
	}
	g, err = Open(a.path, a.name, WithFormat(FormatStriped), WithBindingDir(bind))
	require.NoError(t, err, "the recorded number and stride")
	defer g.Close()
	form, node, stride := g.Form()
	require.Equal(t, FormatStriped, form)
	require.Equal(t, n, node)
	require.Equal(t, uint64(100), stride)
	v, err := g.UniqueUint64()
	require.NoError(t, err)
	require.Equal(t, n, v%100)
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
