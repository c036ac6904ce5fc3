package snapid

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// openTestCounter opens a counter file holding v, for adoptForm.
func openTestCounter(t *testing.T, v uint64) (*counterFile, *formsFiles) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c")
	b := EncodeCounter(v)
	require.NoError(t, os.WriteFile(path, b[:], 0o600))
	o, err := buildOptions([]Option{WithSync(false)})
	require.NoError(t, err)
	c, err := openCounter(context.Background(), path, &o)
	require.NoError(t, err)
	t.Cleanup(func() { c.close() })
	return c, newFormsFiles(path, &o)
}

// adopt runs adoptForm for the striped form (stride, node) under the
// counter's lock and returns the counter's value afterwards.
func adopt(t *testing.T, c *counterFile, f *formsFiles, stride, node uint64) uint64 {
	t.Helper()
	fm, err := newIDForm(FormatStriped, node, stride, 0)
	require.NoError(t, err)
	var v uint64
	require.NoError(t, c.withLock(func() (err error) {
		if _, err = adoptForm(c, f, fm); err != nil {
			return err
		}
		v, err = c.load()
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
				h := formHistory{{form: FormatStriped, stride: a.s, node: a.k, current: true}}
				high, ok := h.highestStriped(b.s, b.k, c)
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

// The case and a round trip through three forms: stride 100 node
// 13 issued 30 (3013), then stride 10 node 3 starts above 3013; back to
// stride 100 node 13 starts above every id of stride 10; the history
// records each form, and a same-form Open changes nothing.
func TestFormHistoryAdopt(t *testing.T) {
	c, f := openTestCounter(t, 0)
	require.Equal(t, uint64(0), adopt(t, c, f, 100, 13))
	require.NoError(t, c.withLock(func() error { return c.store(30) })) // issued 113 … 3013
	v := adopt(t, c, f, 10, 3)
	require.Equal(t, uint64(301), v, "the first id of stride 10 node 3 must be 3023 (302×10+3), above 3013")
	require.Greater(t, (v+1)*10+3, uint64(3013))
	require.Equal(t, v, adopt(t, c, f, 10, 3), "the form in use: nothing raised")
	require.NoError(t, c.withLock(func() error { return c.store(500) })) // up to 5003
	v = adopt(t, c, f, 100, 13)
	require.Greater(t, (v+1)*100+13, uint64(5003))
	require.Equal(t, uint64(500), v)
	h, repair, err := f.read()
	require.NoError(t, err)
	require.False(t, repair)
	require.Equal(t, formHistory{
		{form: FormatStriped, stride: 10, node: 3, upto: 500},
		{form: FormatStriped, stride: 100, node: 13, current: true},
	}, h)
}

// One damaged or removed copy of the history is restored from the other;
// both damaged refuse the numeric forms (ErrCorruptForms), and the advice
// does not say to remove them.
func TestFormHistoryCopies(t *testing.T) {
	for _, damage := range []string{"removed", "damaged"} {
		for i := range 2 {
			t.Run(damage+"/"+formsSuffix+map[int]string{0: "", 1: ".copy"}[i], func(t *testing.T) {
				c, f := openTestCounter(t, 0)
				adopt(t, c, f, 100, 13)
				require.NoError(t, c.withLock(func() error { return c.store(30) }))
				if damage == "removed" {
					require.NoError(t, os.Remove(f.paths[i]))
				} else {
					b, err := os.ReadFile(f.paths[i])
					require.NoError(t, err)
					b[strings.Index(string(b), "striped 1")+len("striped 1")] = '7'
					require.NoError(t, os.WriteFile(f.paths[i], b, 0o600))
				}
				require.Equal(t, uint64(301), adopt(t, c, f, 10, 3), "the history did not survive one copy %s", damage)
				for _, p := range f.paths {
					b, err := os.ReadFile(p)
					require.NoError(t, err)
					h, err := decodeForms(b)
					require.NoError(t, err, "copy %s not restored", p)
					require.Len(t, h, 2)
				}
			})
		}
	}
	c, f := openTestCounter(t, 0)
	adopt(t, c, f, 100, 13)
	for _, p := range f.paths {
		require.NoError(t, os.WriteFile(p, []byte("snapid-forms 1\ngarbage\n"), 0o600))
	}
	fm, err := newIDForm(FormatStriped, 3, 10, 0)
	require.NoError(t, err)
	err = c.withLock(func() error { _, err := adoptForm(c, f, fm); return err })
	require.ErrorIs(t, err, ErrCorruptForms)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "restore one from a backup")
}

// A counter with no history (a version that kept none) whose number file
// records a registry's stride 100 and node number 3 starts its history
// from it: opened with stride 10 and node 3, it starts above 4003.
func TestFormHistorySeededFromNumberFile(t *testing.T) {
	c, f := openTestCounter(t, 40) // issued 103 … 4003
	require.NoError(t, os.WriteFile(f.counterPath+numberSuffix, encodeNumberFile(numberRecord{name: "vm1", number: 3, stride: 100}), 0o600))
	v := adopt(t, c, f, 10, 3)
	require.Greater(t, (v+1)*10+3, uint64(4003))
	h, _, err := f.read()
	require.NoError(t, err)
	require.Equal(t, formHistory{
		{registry: "vm1", node: 3, stride: 100},
		{form: FormatStriped, stride: 100, node: 3, upto: 40},
		{form: FormatStriped, stride: 10, node: 3, current: true},
	}, h)
}
