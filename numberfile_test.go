package snapid_test

import (
	"context"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/snapidtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With a registry that gives node numbers, two hosts' decimal ids carry
// their numbers and never meet as decimals; the number is recorded beside
// the counter, kept across restarts, and read by the host's other
// processes.
func TestRegistryNodeNumbersDecimal(t *testing.T) {
	reg := snapidtest.NewRegistry()
	a, b := newSeqHost(t, "web_a"), newSeqHost(t, "web_b")
	ga := a.open(t, reg, WithFormat(FormatDecimal))
	gb := b.open(t, reg, WithFormat(FormatDecimal))
	_, na, _ := ga.Form()
	_, nb, _ := gb.Form()
	require.NotEqual(t, na, nb)
	seen := map[string]string{}
	for i := range 300 {
		for _, g := range []*Generator{ga, gb} {
			id, err := g.UniqueID()
			require.NoError(t, err)
			r, ok := new(big.Rat).SetString(id)
			require.True(t, ok)
			require.NotContains(t, seen, r.RatString(), "id %s (call %d) equals %s as a decimal", id, i, seen[r.RatString()])
			seen[r.RatString()] = id
		}
	}
	b1, err := os.ReadFile(a.path + ".number")
	require.NoError(t, err)
	assert.Regexp(t, "^snapid-number 2\nname web_a\nnumber "+strconv.FormatUint(na, 10)+"\nstride 0\nclaim [0-9a-f]{16}\n$", string(b1))

	ga2 := a.open(t, reg, WithFormat(FormatDecimal)) // joins: reads the file
	_, n2, _ := ga2.Form()
	assert.Equal(t, na, n2)
	require.NoError(t, ga2.Close())
	require.NoError(t, ga.Close())
	ga = a.open(t, reg, WithFormat(FormatDecimal)) // a new claim: the same number
	_, n3, _ := ga.Form()
	assert.Equal(t, na, n3)
	require.NoError(t, ga.Close())
	require.NoError(t, gb.Close())
}

// The striped form takes the cluster's stride from the registry: the
// first host's WithStride records it when none is; another stride is
// refused (ErrStrideMismatch), none at all is refused too.
func TestRegistryStride(t *testing.T) {
	reg := snapidtest.NewRegistry()
	a, b, c := newSeqHost(t, "s_a"), newSeqHost(t, "s_b"), newSeqHost(t, "s_c")
	_, err := Open(a.path, a.name, WithRegistry(reg), WithHostInfo(a.info), WithFormat(FormatStriped))
	require.ErrorIs(t, err, ErrInvalidOption, "no stride anywhere")
	ga := a.open(t, reg, WithFormat(FormatStriped), WithStride(100))
	defer ga.Close()
	s, err := reg.Stride(context.Background())
	require.NoError(t, err)
	assert.Equal(t, uint64(100), s)
	_, err = Open(b.path, b.name, WithRegistry(reg), WithHostInfo(b.info), WithFormat(FormatStriped), WithStride(10))
	require.ErrorIs(t, err, ErrStrideMismatch)
	gc := c.open(t, reg, WithFormat(FormatStriped))
	defer gc.Close()
	_, nc, sc := gc.Form()
	assert.Equal(t, uint64(100), sc)
	v, err := gc.UniqueUint64()
	require.NoError(t, err)
	assert.Equal(t, 100+nc, v)
	gc2 := c.open(t, reg, WithFormat(FormatStriped)) // joins: stride from the file
	defer gc2.Close()
	_, _, sc2 := gc2.Form()
	assert.Equal(t, uint64(100), sc2)
}

// A number the registry does not give (WithNodeNumber), or a number file
// that records another, is refused: nothing is issued.
func TestRegistryNodeNumberMismatch(t *testing.T) {
	reg := snapidtest.NewRegistry()
	a := newSeqHost(t, "m_a")
	g := a.open(t, reg, WithFormat(FormatDecimal))
	_, n, _ := g.Form()
	require.NoError(t, g.Close())
	_, err := Open(a.path, a.name, WithRegistry(reg), WithHostInfo(a.info), WithFormat(FormatDecimal), WithNodeNumber(n+1))
	require.ErrorIs(t, err, ErrNumberMismatch)

	require.NoError(t, os.WriteFile(a.path+".number", []byte("snapid-number 1\nname m_a\nnumber "+strconv.FormatUint(n+7, 10)+"\nstride 0\n"), 0o600))
	before, err := os.ReadFile(a.path)
	require.NoError(t, err)
	_, err = Open(a.path, a.name, WithRegistry(reg), WithHostInfo(a.info), WithFormat(FormatDecimal))
	require.ErrorIs(t, err, ErrNumberMismatch)
	after, err := os.ReadFile(a.path)
	require.NoError(t, err)
	assert.Equal(t, before, after, "a refused Open changed the counter")

	// A damaged number file: the numeric forms refuse to start, naming
	// the file; the name form, which needs no number, starts.
	require.NoError(t, os.WriteFile(a.path+".number", []byte("garbage"), 0o600))
	_, err = Open(a.path, a.name, WithRegistry(reg), WithHostInfo(a.info), WithFormat(FormatDecimal))
	require.ErrorIs(t, err, ErrCorruptNumber)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), ".number")
	g, err = Open(a.path, a.name, WithRegistry(reg), WithHostInfo(a.info))
	require.NoError(t, err)
	require.NoError(t, g.Close())
}

// A name-form host starts when the registry is slow to give a number
// (or never does): it waits a bounded share of the claim's time.
func TestRegistryNameFormStartsWhenNumbersHang(t *testing.T) {
	reg := snapidtest.NewRegistry()
	reg.SetHook(func(ctx context.Context, op, name string) error {
		if op == "assign_number" {
			<-ctx.Done()
			return fmt.Errorf("%w: assign number: %w", ErrRegistry, ctx.Err())
		}
		return nil
	})
	a := newSeqHost(t, "h_a")
	g, err := Open(a.path, a.name, WithRegistry(reg), WithHostInfo(a.info), WithRegistryTimeout(2*time.Second))
	require.NoError(t, err)
	id, err := g.UniqueID()
	require.NoError(t, err)
	assert.Equal(t, "h_a-1", id)
	require.NoError(t, g.Close())
}

// noNumbers is a registry that gives no node numbers.
type noNumbers struct{ Registry }

// With a registry that gives no numbers, the numeric forms need
// WithNodeNumber.
func TestRegistryWithoutNumbers(t *testing.T) {
	reg := noNumbers{snapidtest.NewRegistry()}
	a := newSeqHost(t, "x_a")
	_, err := Open(a.path, a.name, WithRegistry(reg), WithHostInfo(a.info), WithFormat(FormatDecimal))
	require.ErrorIs(t, err, ErrInvalidOption)
	g := a.open(t, reg, WithFormat(FormatDecimal), WithNodeNumber(42))
	defer g.Close()
	id, err := g.UniqueID()
	require.NoError(t, err)
	assert.Equal(t, "42.", id[:3])
	_, err = os.Stat(filepath.Join(filepath.Dir(a.path), filepath.Base(a.path)+".number"))
	assert.True(t, os.IsNotExist(err), "a number file without registry numbers")
}

// A WithNodeNumber or WithStride that is not the registry's is refused
// before the claim: the registry's row is left as it was.
func TestRegistryNumberRefusedBeforeClaim(t *testing.T) {
	reg := snapidtest.NewRegistry()
	a := newSeqHost(t, "p_a")
	g := a.open(t, reg, WithFormat(FormatStriped), WithStride(50))
	_, n, _ := g.Form()
	require.NoError(t, g.Close())
	before, ok := reg.Row("p_a")
	require.True(t, ok)
	for _, opts := range [][]Option{
		{WithFormat(FormatDecimal), WithNodeNumber(n + 1)},
		{WithFormat(FormatStriped), WithStride(60)},
	} {
		require.NoError(t, os.Remove(a.path+".number")) // the registry's word alone
		_, err := Open(a.path, a.name, append([]Option{WithRegistry(reg), WithHostInfo(a.info)}, opts...)...)
		require.Error(t, err)
		after, _ := reg.Row("p_a")
		assert.Equal(t, before, after, "a refused number or stride changed the registry's row")
		g := a.open(t, reg) // writes the number file back
		require.NoError(t, g.Close())
		before, _ = reg.Row("p_a")
	}
}

// Bad form options with a registry change nothing there: a stride the
// registry's node number is not below is not recorded for the cluster,
// a node number for a name that has none is refused before the claim, and
// a bound below every striped id is refused before anything.
func TestRegistryBadFormOptionsChangeNothing(t *testing.T) {
	ctx := context.Background()
	reg := snapidtest.NewRegistry()
	first := newSeqHost(t, "first") // takes node number 1
	g := first.open(t, reg)
	require.NoError(t, g.Close())

	b := newSeqHost(t, "second") // gets number 2
	_, err := Open(b.path, b.name, WithRegistry(reg), WithHostInfo(b.info), WithFormat(FormatStriped), WithStride(2))
	require.ErrorIs(t, err, ErrInvalidOption, "node 2 is not below stride 2")
	s, err := reg.Stride(ctx)
	require.NoError(t, err)
	assert.Zero(t, s, "a refused Open recorded the cluster's stride")

	c := newSeqHost(t, "third")
	_, err = Open(c.path, c.name, WithRegistry(reg), WithHostInfo(c.info), WithFormat(FormatDecimal), WithNodeNumber(7))
	require.ErrorIs(t, err, ErrNumberMismatch)
	_, ok := reg.Row("third")
	assert.False(t, ok, "a refused node number claimed the name")

	d := newSeqHost(t, "fourth")
	_, err = Open(d.path, d.name, WithRegistry(reg), WithHostInfo(d.info), WithFormat(FormatStriped), WithStride(1000), WithMaxID(5))
	require.ErrorIs(t, err, ErrInvalidOption)
	_, ok = reg.Row("fourth")
	assert.False(t, ok, "a refused bound claimed the name")
}

// A joining process uses the number file only when it was written by the
// claim it joins, for its name: a file copied from another host, one
// edited to another host's number, one left by a released name, and one
// naming another name (even with this claim's line) are refused
// (nothing is issued); the file as the first process wrote it is used.
func TestNumberFileJoinerChecksTheClaim(t *testing.T) {
	reg := snapidtest.NewRegistry()
	b := newSeqHost(t, "join_b")
	gb := b.open(t, reg, WithFormat(FormatDecimal))
	defer gb.Close()
	_, nb, _ := gb.Form()
	fromB, err := os.ReadFile(b.path + ".number")
	require.NoError(t, err)

	// The counter first served "old_name", which was released.
	a := newSeqHost(t, "join_a")
	g, err := Open(a.path, "old_name", WithRegistry(reg), WithSync(false), WithHostInfo(a.info), WithFormat(FormatDecimal))
	require.NoError(t, err)
	_, nOld, _ := g.Form()
	require.NoError(t, g.Close())
	released, err := os.ReadFile(a.path + ".number")
	require.NoError(t, err)
	_, err = Release(context.Background(), a.path, "old_name", WithRegistry(reg))
	require.NoError(t, err)

	ga := a.open(t, reg, WithFormat(FormatDecimal), WithReclaim())
	defer ga.Close()
	_, na, _ := ga.Form()
	require.NotEqual(t, na, nb)
	require.NotEqual(t, na, nOld)
	own, err := os.ReadFile(a.path + ".number")
	require.NoError(t, err)
	edited := []byte(strings.Replace(string(own), "number "+strconv.FormatUint(na, 10)+"\n", "number "+strconv.FormatUint(nb, 10)+"\n", 1))
	require.NotEqual(t, own, edited)
	otherName, err := ExportNumberFileFor(a.path, "old_name", nOld, 0)
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		file []byte
		want error
	}{
		{"copied from another host", fromB, ErrNumberMismatch},
		{"edited to another host's number", edited, ErrNumberMismatch},
		{"left by a released name", released, ErrNumberMismatch},
		{"another name, this claim's line", otherName, ErrNumberMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(a.path+".number", tc.file, 0o600))
			before, err := os.ReadFile(a.path)
			require.NoError(t, err)
			g, err := Open(a.path, a.name, WithRegistry(reg), WithSync(false), WithHostInfo(a.info), WithFormat(FormatDecimal))
			if err == nil {
				_, n, _ := g.Form()
				id, _ := g.UniqueID()
				g.Close()
				t.Fatalf("a joining process used the number file (node number %d, id %s): ids of another node", n, id)
			}
			require.ErrorIs(t, err, tc.want)
			after, err := os.ReadFile(a.path)
			require.NoError(t, err)
			require.Equal(t, before, after, "a refused join changed the counter")
		})
	}
	require.NoError(t, os.WriteFile(a.path+".number", own, 0o600))
	g2 := a.open(t, reg, WithFormat(FormatDecimal))
	_, n2, _ := g2.Form()
	require.Equal(t, na, n2)
	require.NoError(t, g2.Close())
}

// A counter whose <counter>.number records the registry's number 1,
// opened without the registry (Open without WithRegistry, as `snapctl next
// --no-registry --format decimal --node-number N` does) with another
// number: the Open is refused, and the host never issues under a number
// the registry gave another name.
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
		t.Logf("refused: %v", err)
		return
	}
	defer g.Close()
	ida, err := g.UniqueID()
	require.NoError(t, err)
	assert.NotEqual(t, idb, ida, "host a (registry number %d, recorded in %s.number) issued %s under host b's registry number: the same id as host b", na, a.path, ida)
}

// The striped form with the stride coming from the registry (no
// WithStride) and a WithMaxID below every striped id: refused before the
// claim, so the bad bound neither claims the name nor gets it a number in
// the registry, and writes no number file.
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

// An existing name whose registry number is not below the cluster's
// stride, opened striped without WithStride/WithNodeNumber: the form is
// refused before the claim, so the registry's row (its session, its mark)
// is left as it was.
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
