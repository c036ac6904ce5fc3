package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/hoststate"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With a registry that gives node numbers, two hosts' decimal ids carry
// their numbers and never meet as decimals; the number is recorded in the
// host's record of the name, kept across restarts, and read by the host's
// other processes.
func TestRegistryNodeNumbersDecimal(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
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
	name, n, s, ok, err := ReadNodeNumber(a.path)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "web_a", name)
	assert.Equal(t, []uint64{na, 0}, []uint64{n, s})

	ga2 := a.open(t, reg, WithFormat(FormatDecimal)) // joins: reads the record
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
	t.Parallel()
	reg := registrytest.NewRegistry()
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
	gc2 := c.open(t, reg, WithFormat(FormatStriped)) // joins: stride from the record
	defer gc2.Close()
	_, _, sc2 := gc2.Form()
	assert.Equal(t, uint64(100), sc2)
}

// A number the registry does not give (WithNodeNumber), or a host's
// record of the name that records another, is refused: nothing is
// issued.
func TestRegistryNodeNumberMismatch(t *testing.T) {
	reg := registrytest.NewRegistry()
	a := newSeqHost(t, "m_a")
	g := a.open(t, reg, WithFormat(FormatDecimal))
	_, n, _ := g.Form()
	require.NoError(t, g.Close())
	_, err := Open(a.path, a.name, WithRegistry(reg), WithHostInfo(a.info), WithFormat(FormatDecimal), WithNodeNumber(n+1))
	require.ErrorIs(t, err, ErrNumberMismatch)

	setRecordedNumber(t, a.path, a.name, n+7)
	before, err := os.ReadFile(a.path)
	require.NoError(t, err)
	_, err = Open(a.path, a.name, WithRegistry(reg), WithHostInfo(a.info), WithFormat(FormatDecimal))
	require.ErrorIs(t, err, ErrNumberMismatch)
	after, err := os.ReadFile(a.path)
	require.NoError(t, err)
	assert.Equal(t, before, after, "a refused Open changed the counter")
}

// setRecordedNumber sets the node number the host's record of name (for
// the counter at path) holds, as a record replaced or edited would.
func setRecordedNumber(t *testing.T, path, name string, n uint64) {
	t.Helper()
	p, err := hoststate.OpenPlace(ExportTestBindingDir(path), hoststate.PlaceOptions{})
	require.NoError(t, err)
	defer p.Close()
	h, err := p.OpenHandle(name)
	require.NoError(t, err)
	defer h.Close()
	r := h.Record()
	r.Node = n
	require.NoError(t, h.Write(r))
}

// recordedNumber returns the node number the host's record of name holds.
func recordedNumber(t *testing.T, path, name string) uint64 {
	t.Helper()
	p, err := hoststate.OpenPlace(ExportTestBindingDir(path), hoststate.PlaceOptions{})
	require.NoError(t, err)
	defer p.Close()
	r, _, err := p.Read(name)
	require.NoError(t, err)
	return r.Node
}

// A name-form host starts when the registry is slow to give a number
// (or never does): it waits a bounded share of the claim's time.
func TestRegistryNameFormStartsWhenNumbersHang(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
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

// A name-form host the registry gives no node number (here: every
// assign_number fails, as on a keyspace whose numbers' table is still
// being made) starts, and is warned only if it asked for numbers: a host
// that never did logs it at debug level.
func TestRegistryNameFormNoNumberWarnsOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	const msg = "snapid: the registry gave the name no node number; the numeric id forms need one"
	for _, tc := range []struct {
		name  string
		opts  []Option
		level slog.Level
	}{
		{"no number asked for", nil, slog.LevelDebug},
		{"a stride given", []Option{WithStride(100)}, slog.LevelWarn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := registrytest.NewRegistry()
			reg.SetHook(func(ctx context.Context, op, name string) error {
				if op == "assign_number" {
					return fmt.Errorf("%w: assign number: the numbers' table is being made", ErrRegistry)
				}
				return nil
			})
			rec := &recordHandler{}
			a := newSeqHost(t, "w_a")
			g := a.open(t, reg, append([]Option{WithLogger(slog.New(rec))}, tc.opts...)...)
			id, err := g.UniqueID()
			require.NoError(t, err)
			assert.Equal(t, "w_a-1", id)
			require.NoError(t, g.Close())
			var levels []slog.Level
			rec.mu.Lock()
			for _, r := range rec.records {
				if r.Message == msg {
					levels = append(levels, r.Level)
				}
				if tc.level < slog.LevelWarn {
					assert.Less(t, r.Level, slog.LevelWarn, "a host that asked for no number was warned: %s", r.Message)
				}
			}
			rec.mu.Unlock()
			assert.Equal(t, []slog.Level{tc.level}, levels)
		})
	}
}

// noNumbers is a registry that gives no node numbers.
type noNumbers struct{ registry.Registry }

// With a registry that gives no numbers, the numeric forms need
// WithNodeNumber.
func TestRegistryWithoutNumbers(t *testing.T) {
	inner := registrytest.NewRegistry()
	reg := noNumbers{inner}
	a := newSeqHost(t, "x_a")
	// A numeric form the registry cannot complete is refused before
	// anything is made or claimed.
	for _, opts := range [][]Option{
		{WithFormat(FormatDecimal)},
		{WithFormat(FormatStriped), WithStride(10)},
		{WithFormat(FormatStriped), WithNodeNumber(3)},
	} {
		_, err := Open(a.path, a.name, append([]Option{WithRegistry(reg), WithHostInfo(a.info)}, opts...)...)
		require.ErrorIs(t, err, ErrInvalidOption)
		_, ok := inner.Row(a.name)
		require.False(t, ok, "a refused form claimed the name")
		entries, err := os.ReadDir(a.dir)
		require.NoError(t, err)
		require.Empty(t, entries, "a refused form made files")
	}
	g := a.open(t, reg, WithFormat(FormatDecimal), WithNodeNumber(42))
	defer g.Close()
	id, err := g.UniqueID()
	require.NoError(t, err)
	assert.Equal(t, "42.", id[:3])
	assert.Zero(t, recordedNumber(t, a.path, a.name), "a registry's number recorded without registry numbers")
}

// A WithNodeNumber or WithStride that is not the registry's is refused
// before the claim: the registry's row is left as it was.
func TestRegistryNumberRefusedBeforeClaim(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
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
		_, err := Open(a.path, a.name, append([]Option{WithRegistry(reg), WithHostInfo(a.info)}, opts...)...)
		require.Error(t, err)
		after, _ := reg.Row("p_a")
		assert.Equal(t, before, after, "a refused number or stride changed the registry's row")
		g := a.open(t, reg)
		require.NoError(t, g.Close())
		before, _ = reg.Row("p_a")
	}
}

// Bad form options with a registry change nothing there: a stride the
// registry's node number is not below is not recorded for the cluster,
// a node number for a name that has none is refused before the claim, and
// a bound below every striped id is refused before anything.
func TestRegistryBadFormOptionsChangeNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := registrytest.NewRegistry()
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

// A counter whose host records the registry's number 1 for its name,
// opened without the registry (Open without WithRegistry, as `snapctl next
// --no-registry --format decimal --node-number N` does) with another
// number: the Open is refused, and the host never issues under a number
// the registry gave another name.
func TestNumberFileWithoutNumberingRegistry(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
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

	before, err := os.ReadFile(a.path)
	require.NoError(t, err)
	_, err = Open(a.path, a.name, WithFormat(FormatDecimal), WithNodeNumber(nb))
	require.ErrorIs(t, err, ErrNumberMismatch, "host a (registry number %d) issues under host b's registry number %d, as host b (%s)", na, nb, idb)
	after, err := os.ReadFile(a.path)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

// The striped form with the stride coming from the registry (no
// WithStride) and a WithMaxID below every striped id: refused before the
// claim, so the bad bound neither claims the name nor gets it a number in
// the registry, and records none.
func TestNumberBadBoundRefusedBeforeClaim(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.NewRegistry()
	_, err := reg.SetStride(ctx, 1000)
	require.NoError(t, err)
	d := newSeqHost(t, "nm_d")
	_, err = Open(d.path, d.name, WithRegistry(reg), WithHostInfo(d.info), WithFormat(FormatStriped), WithMaxID(5))
	require.ErrorIs(t, err, ErrInvalidOption)
	row, ok := reg.Row("nm_d")
	assert.False(t, ok, "a refused bound (5 < 1000+node) claimed the name: %+v", row)
	assert.NoFileExists(t, filepath.Join(ExportTestBindingDir(d.path), d.name), "a refused bound recorded the name")
}

// An existing name whose registry number is not below the cluster's
// stride, opened striped without WithStride/WithNodeNumber: the form is
// refused before the claim, so the registry's row (its session, its mark)
// is left as it was.
func TestNumberAboveStrideRefusedBeforeClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := registrytest.NewRegistry()
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

// Without a numbering registry, the host's record of the name gives the
// numeric forms the number and stride a registry gave it when none is
// given, and refuses others before anything is made; the host's claim
// of the number refuses it to another name.
func TestNumberFileDefaultsWithoutRegistry(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.NewRegistry()
	_, err := reg.SetStride(ctx, 100)
	require.NoError(t, err)
	a := newSeqHost(t, "nd_a")
	g := a.open(t, reg, WithFormat(FormatStriped))
	_, n, _ := g.Form()
	require.NoError(t, g.Close())
	before, err := ReadCounter(a.path)
	require.NoError(t, err)

	place := ExportTestBindingDir(a.path)
	entries := func() []string {
		es, err := os.ReadDir(place)
		require.NoError(t, err)
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		return names
	}
	was := entries()
	for _, c := range []struct {
		what, path, name string
		opts             []Option
		want             error
	}{
		{"another number", a.path, a.name, []Option{WithFormat(FormatStriped), WithNodeNumber(n + 1), WithStride(100)}, ErrNumberMismatch},
		{"another stride", a.path, a.name, []Option{WithFormat(FormatStriped), WithStride(50)}, ErrStrideMismatch},
		{"the number under another name", filepath.Join(filepath.Dir(a.path), "other"), "nd_other", []Option{WithFormat(FormatDecimal), WithNodeNumber(n)}, ErrNumberBound},
	} {
		_, err := Open(c.path, c.name, c.opts...)
		require.ErrorIs(t, err, c.want, c.what)
		after, rerr := ReadCounter(a.path)
		require.NoError(t, rerr)
		require.Equal(t, before, after, "%s changed the counter", c.what)
		require.Equal(t, was, entries(), "%s made records", c.what)
	}
	g, err = Open(a.path, a.name, WithFormat(FormatStriped))
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

// The registry gave "vm" node number 1 and "web" (another host) node
// number 2. vm's counter is then opened without the registry: its host's
// record of vm keeps the number the registry gave, so WithNodeNumber(2)
// for vm is refused (ErrNumberMismatch) and nothing is issued (vm handing
// out 2.4, 2.5, … would repeat web's ids), an Open giving no number takes
// vm's, and the host's claim refuses vm's number to another name.
func TestNumberWithoutRegistryKeepsTheRegistrysNumber(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	dirA, vmCounter := ctPath(t)
	bindA := filepath.Join(dirA, "names")
	_, webCounter := ctPath(t)

	vm := openReg(t, vmCounter, "vm", reg, WithFormat(FormatDecimal), WithBindingDir(bindA))
	_, vmNum, _ := vm.Form()
	for range 3 {
		_, err := vm.UniqueID()
		require.NoError(t, err)
	}
	require.NoError(t, vm.Close())

	web := openReg(t, webCounter, "web", reg, WithFormat(FormatDecimal), WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}))
	_, webNum, _ := web.Form()
	require.NotEqual(t, vmNum, webNum)
	require.NoError(t, web.Close())

	before, err := os.ReadFile(vmCounter)
	require.NoError(t, err)
	_, err = Open(vmCounter, "vm", WithBindingDir(bindA), WithSync(false), WithFormat(FormatDecimal), WithNodeNumber(webNum))
	require.ErrorIs(t, err, ErrNumberMismatch, "web's number taken for vm")
	after, err := os.ReadFile(vmCounter)
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused Open changed the counter")

	_, err = Open(filepath.Join(dirA, "db.u64"), "db", WithBindingDir(bindA), WithSync(false), WithFormat(FormatDecimal), WithNodeNumber(vmNum))
	require.ErrorIs(t, err, ErrNumberBound, "vm's number taken for another name")

	// Without a number given, the numeric form takes vm's.
	g, err := Open(vmCounter, "vm", WithBindingDir(bindA), WithSync(false), WithFormat(FormatDecimal))
	require.NoError(t, err)
	defer g.Close()
	_, n, _ := g.Form()
	require.Equal(t, vmNum, n)
	id, err := g.UniqueID()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(id, fmt.Sprintf("%d.", vmNum)), "id %s does not carry vm's number %d", id, vmNum)
}
