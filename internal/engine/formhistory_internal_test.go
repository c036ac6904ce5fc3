package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapid/snapid/internal/hoststate"
	"github.com/snapid/snapid/internal/idform"
	"github.com/stretchr/testify/require"
)

// openTestCounter opens a counter file holding v, for adoptForm.
func openTestCounter(t *testing.T, v uint64) *counterFile {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c")
	b := EncodeCounter(v)
	require.NoError(t, os.WriteFile(path, b[:], 0o600))
	o, err := buildOptions([]Option{WithSync(false)})
	require.NoError(t, err)
	c, err := openCounter(context.Background(), path, &o)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// adopt runs adoptForm for the striped form (stride, node) on the record
// r under the counter's lock and returns the counter's value afterwards.
func adopt(t *testing.T, c *counterFile, r *hoststate.Record, stride, node uint64) uint64 {
	t.Helper()
	fm, err := idform.New(FormatStriped, node, stride, 0)
	require.NoError(t, err)
	var v uint64
	require.NoError(t, c.WithLock(func() (err error) {
		if _, _, err = adoptForm(c, r, fm); err != nil {
			return err
		}
		v, err = c.Load()
		return err
	}))
	return v
}

// Every change of stride or node number on a counter (every pair of
// striped forms with strides 2 to 12, every node number, counters 0 to
// 25) raises the counter so that no id of the new form is at or below an
// id the counter issued under the old one, and by no more than that
// needs: the id of the last number skipped is at or below the old
// form's highest id.
func TestFormHistoryRaiseTable(t *testing.T) {
	t.Parallel()
	type form struct{ s, k uint64 }
	var forms []form
	for s := uint64(2); s <= 12; s++ {
		for k := uint64(1); k < s; k++ {
			forms = append(forms, form{s, k})
		}
	}
	for _, c := range []uint64{0, 1, 2, 7, 25} {
		for _, a := range forms {
			for _, b := range forms {
				if a == b {
					continue
				}
				oldHigh := c*a.s + a.k
				h := []hoststate.Form{{Kind: formStriped, Stride: a.s, Node: a.k, Current: true}}
				high, ok := highestStriped(h, b.s, b.k, c)
				if !ok || high != oldHigh {
					t.Fatalf("counter %d, %v then %v: highest old id %d (ok %v), want %d", c, a, b, high, ok, oldHigh)
				}
				n := max(c, raiseFor(high, b.s, b.k))
				if first := (n+1)*b.s + b.k; c > 0 && first <= oldHigh {
					t.Fatalf("counter %d, stride %d node %d then stride %d node %d: raised to %d, first new id %d is not above the old form's last %d",
						c, a.s, a.k, b.s, b.k, n, first, oldHigh)
				}
				if n > c && n*b.s+b.k > oldHigh {
					t.Fatalf("counter %d, %v then %v: raised to %d, one more than needed (%d is above %d already)", c, a, b, n, n*b.s+b.k, oldHigh)
				}
				old := map[uint64]bool{}
				for i := uint64(1); i <= c; i++ {
					old[i*a.s+a.k] = true
				}
				for i := n + 1; i <= n+40; i++ {
					if old[i*b.s+b.k] {
						t.Fatalf("counter %d, %v then %v: new number %d gives id %d, issued before", c, a, b, i, i*b.s+b.k)
					}
				}
			}
		}
	}
}

// A round trip through three forms: stride 100 node 13 issued 30 (3013),
// then stride 10 node 3 starts above 3013; back to stride 100 node 13
// starts above every id of stride 10; the record keeps each form, the one
// left with the counter's value then, and a same-form Open changes
// nothing.
func TestFormHistoryAdopt(t *testing.T) {
	t.Parallel()
	c := openTestCounter(t, 0)
	var r hoststate.Record
	require.Equal(t, uint64(0), adopt(t, c, &r, 100, 13))
	require.NoError(t, c.WithLock(func() error { return c.Store(30) })) // issued 113 … 3013
	v := adopt(t, c, &r, 10, 3)
	require.Equal(t, uint64(301), v, "the first id of stride 10 node 3 must be 3023 (302×10+3), above 3013")
	require.Greater(t, (v+1)*10+3, uint64(3013))
	before := append([]hoststate.Form(nil), r.Forms...)
	require.Equal(t, v, adopt(t, c, &r, 10, 3), "the form in use: nothing raised")
	require.Equal(t, before, r.Forms, "the form in use: nothing recorded")
	require.NoError(t, c.WithLock(func() error { return c.Store(500) })) // up to 5003
	v = adopt(t, c, &r, 100, 13)
	require.Greater(t, (v+1)*100+13, uint64(5003))
	require.Equal(t, uint64(500), v)
	require.Equal(t, []hoststate.Form{
		{Kind: formStriped, Stride: 10, Node: 3, Upto: 500},
		{Kind: formStriped, Stride: 100, Node: 13, Current: true},
	}, r.Forms)
}

// A decimal or name form is recorded once, and leaves the striped form
// in use as it is.
func TestFormHistoryDecimalRecorded(t *testing.T) {
	t.Parallel()
	c := openTestCounter(t, 7)
	r := hoststate.Record{Forms: []hoststate.Form{{Kind: formStriped, Stride: 10, Node: 3, Current: true}}}
	fm, err := idform.New(FormatDecimal, 4, 0, 0)
	require.NoError(t, err)
	for range 2 {
		require.NoError(t, c.WithLock(func() error { _, _, err := adoptForm(c, &r, fm); return err }))
	}
	require.Equal(t, []hoststate.Form{
		{Kind: formStriped, Stride: 10, Node: 3, Current: true},
		{Kind: formDecimal, Node: 4},
	}, r.Forms)
}

// The history is the counter's: a new name for a counter whose name was
// released (and the counter taken for another on purpose) starts from
// the forms the released name's record holds, so a new striped form
// starts above their ids, and one whose raise passes its bound is
// refused before a record of the new name is made.
func TestFormHistoryIsTheCounters(t *testing.T) {
	_, path := ctPath(t)
	g, err := Open(path, "vm1", WithSync(false), WithFormat(FormatStriped), WithNodeNumber(13), WithStride(100))
	require.NoError(t, err)
	for range 30 { // up to 3013
		_, err := g.UniqueUint64()
		require.NoError(t, err)
	}
	require.NoError(t, g.Close())
	o, err := buildOptions(nil)
	require.NoError(t, err)
	c, err := openExisting(path, &o)
	require.NoError(t, err)
	_, err = markRecordReleased(context.Background(), c, "vm1", 30, &o)
	require.NoError(t, err)
	c.Close()
	place := testBindingDir(path)
	require.NoError(t, os.Remove(filepath.Join(place, "#stride")))

	opts := []Option{WithSync(false), WithReclaim(), WithFormat(FormatStriped), WithNodeNumber(3), WithStride(10)}
	_, err = Open(path, "web", append(opts, WithMaxID(3000))...)
	require.ErrorIs(t, err, ErrExhausted)
	require.NoFileExists(t, filepath.Join(place, "web"))
	g, err = Open(path, "web", opts...)
	require.NoError(t, err)
	defer g.Close()
	v, err := g.UniqueUint64()
	require.NoError(t, err)
	require.Equal(t, uint64(302*10+3), v, "above 3013")
}
