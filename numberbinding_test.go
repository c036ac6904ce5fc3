package snapid_test

import (
	"os"
	"path/filepath"
	"testing"

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
