package engine_test

import (
	"context"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The decimal form never hands out two ids equal as exact decimals: every
// id read as a decimal number (big.Rat, as a spreadsheet or a JSON parser
// with arbitrary precision reads it) is distinct, and none ends in 0.
func TestFormatDecimalIDsDistinctAsDecimals(t *testing.T) {
	t.Parallel()
	skipShort(t)
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"strict", nil}, {"block", []Option{WithBlock(7)}}} {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			seen := map[string]string{} // exact decimal → id
			for i, node := range []uint64{1, 12, 123} {
				opts := append([]Option{WithFormat(FormatDecimal), WithNodeNumber(node)}, mode.opts...)
				g, err := Open(filepath.Join(dir, "c"+strconv.Itoa(i)), "n"+strconv.Itoa(i), opts...)
				require.NoError(t, err)
				for range 1500 {
					id, err := g.UniqueID()
					require.NoError(t, err)
					r, ok := new(big.Rat).SetString(id)
					require.True(t, ok, "%q is not a decimal number", id)
					key := r.RatString()
					if other, dup := seen[key]; dup {
						t.Fatalf("ids %q and %q are equal as decimals", other, id)
					}
					seen[key] = id
					p, err := ParseID(id)
					require.NoError(t, err)
					require.Equal(t, FormatDecimal, p.Form)
					require.Equal(t, node, p.Node)
					require.NotZero(t, p.Number%10, "%q ends in 0", id)
				}
				require.NoError(t, g.Close())
			}
		})
	}
}

func TestFormatDecimalSkipsTens(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c")
	g, err := Open(path, "n", WithFormat(FormatDecimal), WithNodeNumber(5))
	require.NoError(t, err)
	defer g.Close()
	var got []string
	for range 11 {
		id, err := g.UniqueID()
		require.NoError(t, err)
		got = append(got, id)
	}
	assert.Equal(t, []string{"5.1", "5.2", "5.3", "5.4", "5.5", "5.6", "5.7", "5.8", "5.9", "5.11", "5.12"}, got)
	n, err := g.Next()
	require.NoError(t, err)
	assert.Equal(t, uint64(13), n)

	before, err := os.ReadFile(path)
	require.NoError(t, err)
	_, err = g.NextN(5)
	require.ErrorIs(t, err, ErrInvalidOption, "a range would hold numbers ending in 0")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before, after, "a refused NextN changed the counter")

	id, err := g.NextID()
	require.NoError(t, err)
	assert.Equal(t, ID{Form: FormatDecimal, Node: 5, Number: 14}, id)
	f, node, stride := g.Form()
	assert.Equal(t, FormatDecimal, f)
	assert.Equal(t, uint64(5), node)
	assert.Zero(t, stride)
}

func TestFormatStriped(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c")
	g, err := Open(path, "n", WithFormat(FormatStriped), WithNodeNumber(7), WithStride(1000))
	require.NoError(t, err)
	defer g.Close()
	id, err := g.UniqueID()
	require.NoError(t, err)
	assert.Equal(t, "1007", id)
	v, err := g.UniqueUint64()
	require.NoError(t, err)
	assert.Equal(t, uint64(2007), v)
	b, err := g.AppendUniqueID([]byte("x="))
	require.NoError(t, err)
	assert.Equal(t, "x=3007", string(b))
	p, err := g.NextID()
	require.NoError(t, err)
	assert.Equal(t, ID{Form: FormatStriped, Node: 7, Number: 4, Value: 4007, Stride: 1000}, p)
	parsed, err := ParseID(p.String())
	require.NoError(t, err)
	un, err := parsed.Unstripe(1000)
	require.NoError(t, err)
	assert.Equal(t, p, un)
	first, err := g.NextN(3)
	require.NoError(t, err)
	assert.Equal(t, uint64(5), first, "NextN hands out counter numbers")

	n, err := Open(filepath.Join(t.TempDir(), "c"), "m")
	require.NoError(t, err)
	defer n.Close()
	_, err = n.UniqueUint64()
	require.ErrorIs(t, err, ErrInvalidOption, "the name form is not an integer")
}

// Each bound is reached as ErrExhausted at exactly the last id that fits,
// never by overflowing, in strict and block mode.
func TestFormatStripedBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		stride, node uint64
		max          uint64
		last         uint64 // the last id: the largest number×stride+node <= max
	}{
		{"32-bit", 1000, 7, MaxUint32, 4294967007},
		{"JavaScript", 1024, 1023, MaxSafeInteger, MaxSafeInteger},
		{"int64 default", 1 << 31, 1<<31 - 1, 0, math.MaxInt64},
		{"int64 small stride", 10, 3, 0, math.MaxInt64 - 4},
		{"2^64-1", 2, 1, math.MaxUint64, math.MaxUint64},
		// The bound mod the stride below the node number: the last number
		// that fits is one below bound/stride (computing the limit as
		// bound/stride would hand out an id past the bound, or wrap at
		// 2^64-1).
		{"32-bit, node above the bound's remainder", 1000, 999, MaxUint32, 4294966999},
		{"JavaScript, node above the bound's remainder", 1000, 992, MaxSafeInteger, 9007199254739992},
		{"2^64-1, node above the bound's remainder", 1000, 999, math.MaxUint64, 18446744073709550999},
	} {
		for _, block := range []uint64{0, 5} {
			t.Run(tc.name+"/block"+strconv.FormatUint(block, 10), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "c")
				lastNumber := (tc.last - tc.node) / tc.stride
				_, err := Init(path, lastNumber-1)
				require.NoError(t, err)
				opts := []Option{WithFormat(FormatStriped), WithNodeNumber(tc.node), WithStride(tc.stride)}
				if tc.max != 0 {
					opts = append(opts, WithMaxID(tc.max))
				}
				if block > 0 {
					opts = append(opts, WithBlock(block))
				}
				g, err := Open(path, "n", opts...)
				require.NoError(t, err)
				defer g.Close()
				var got []uint64
				for range 2 {
					v, err := g.UniqueUint64()
					require.NoError(t, err)
					got = append(got, v)
				}
				assert.Equal(t, []uint64{tc.last - tc.stride, tc.last}, got)
				for range 3 {
					_, err = g.UniqueUint64()
					require.ErrorIs(t, err, ErrExhausted)
					_, err = g.UniqueID()
					require.ErrorIs(t, err, ErrExhausted)
				}
			})
		}
	}
}

func TestFormatNameWithMaxID(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c")
	_, err := Init(path, 99)
	require.NoError(t, err)
	g, err := Open(path, "n", WithMaxID(100))
	require.NoError(t, err)
	defer g.Close()
	_, err = g.NextN(3)
	require.ErrorIs(t, err, ErrExhausted, "a range past the bound")
	require.Contains(t, err.Error(), "2 are left: nothing was taken")
	v, err := ReadCounter(path)
	require.NoError(t, err)
	require.Equal(t, uint64(98), v, "a range refused at the bound moved the counter")
	first, err := g.NextN(2)
	require.NoError(t, err, "the numbers that fit are still handed out")
	require.Equal(t, uint64(99), first)
	_, err = g.UniqueID()
	require.ErrorIs(t, err, ErrExhausted)
}

// Bad form options are refused before anything is created.
func TestFormatOptionsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"stride 0", []Option{WithFormat(FormatStriped), WithNodeNumber(1), WithStride(0)}},
		{"stride 1", []Option{WithFormat(FormatStriped), WithNodeNumber(1), WithStride(1)}},
		{"stride above the largest", []Option{WithFormat(FormatStriped), WithNodeNumber(1), WithStride(MaxNodeNumber + 2)}},
		{"node 0", []Option{WithFormat(FormatDecimal), WithNodeNumber(0)}},
		{"node above the largest", []Option{WithFormat(FormatDecimal), WithNodeNumber(MaxNodeNumber + 1)}},
		{"node not below the stride", []Option{WithFormat(FormatStriped), WithNodeNumber(10), WithStride(10)}},
		{"no node number", []Option{WithFormat(FormatDecimal)}},
		{"no stride", []Option{WithFormat(FormatStriped), WithNodeNumber(1)}},
		{"max 0", []Option{WithMaxID(0)}},
		{"max below the first striped id", []Option{WithFormat(FormatStriped), WithNodeNumber(3), WithStride(10), WithMaxID(12)}},
		{"unknown form", []Option{WithFormat(Format(9))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := Open(filepath.Join(dir, "c"), "n", tc.opts...)
			require.ErrorIs(t, err, ErrInvalidOption)
			ents, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Empty(t, ents, "a refused Open created something")
		})
	}
	for _, s := range []string{"", "Name", "int", "decimal "} {
		_, err := ParseFormat(s)
		assert.ErrorIs(t, err, ErrInvalidOption, "%q", s)
	}
	for _, f := range []Format{FormatName, FormatDecimal, FormatStriped} {
		got, err := ParseFormat(f.String())
		require.NoError(t, err)
		assert.Equal(t, f, got)
	}
}

// The append form and the integer form allocate nothing per id.
func TestFormatAppendAllocatesNothing(t *testing.T) {
	number := uint64(10)
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"name", nil},
		{"decimal", []Option{WithFormat(FormatDecimal), WithNodeNumber(9)}},
		{"striped", []Option{WithFormat(FormatStriped), WithNodeNumber(9), WithStride(100)}},
	} {
		for _, block := range []bool{false, true} {
			// Each Generator a number of its own (one number, one name).
			opts := append([]Option{WithSync(false)}, tc.opts...)
			if tc.name != "name" {
				number++
				opts = append(opts, WithNodeNumber(number))
			}
			if block {
				opts = append(opts, WithBlock(1000))
			}
			g, err := Open(filepath.Join(t.TempDir(), "c"), tc.name+strconv.FormatBool(block), opts...)
			require.NoError(t, err)
			buf := make([]byte, 0, 64)
			allocs := testing.AllocsPerRun(200, func() {
				var err error
				if buf, err = g.AppendUniqueID(buf[:0]); err != nil {
					t.Error(err)
				}
			})
			assert.Zero(t, allocs, "%s block=%v: AppendUniqueID allocates", tc.name, block)
			if tc.name == "striped" {
				allocs = testing.AllocsPerRun(200, func() {
					if _, err := g.UniqueUint64(); err != nil {
						t.Error(err)
					}
				})
				assert.Zero(t, allocs, "block=%v: UniqueUint64 allocates", block)
			}
			require.NoError(t, g.Close())
		}
	}
}

// NextIDsContext hands out n ids of any form with one counter update, all
// of them or none: decimal -n 200 is one update (not one per id), taking
// the numbers ending in 0 along; at the form's bound it takes nothing and
// says how many are left, and what is left is still handed out.
func TestNextIDsOneUpdateAllOrNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []Option
		want func(n uint64) string
	}{
		{"name", nil, func(n uint64) string { return "n-" + strconv.FormatUint(n, 10) }},
		{"decimal", []Option{WithFormat(FormatDecimal), WithNodeNumber(7)}, func(n uint64) string { return "7." + strconv.FormatUint(n, 10) }},
		{"striped", []Option{WithFormat(FormatStriped), WithNodeNumber(7), WithStride(10)}, func(n uint64) string { return strconv.FormatUint(n*10+7, 10) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c")
			g, err := Open(path, "n", append([]Option{WithBindingDir(t.TempDir())}, tc.opts...)...)
			require.NoError(t, err)
			defer g.Close()
			var got []string
			require.NoError(t, g.NextIDsContext(context.Background(), 200, func(id ID) { got = append(got, id.String()) }))
			require.Len(t, got, 200)
			var want []string
			for n := uint64(1); len(want) < 200; n++ {
				if tc.name != "decimal" || n%10 != 0 {
					want = append(want, tc.want(n))
				}
			}
			require.Equal(t, want, got)
			st := g.Stats()
			require.Equal(t, uint64(1), st.CounterUpdates, "200 ids in one counter update")
			v, err := ReadCounter(path)
			require.NoError(t, err)
			require.Equal(t, map[bool]uint64{true: 222, false: 200}[tc.name == "decimal"], v)
			require.Equal(t, v, st.NumbersReserved)
		})
	}
	t.Run("at the bound", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "c")
		_, err := Init(path, 95) // last issued 94
		require.NoError(t, err)
		g, err := Open(path, "n", WithBindingDir(t.TempDir()), WithFormat(FormatDecimal), WithNodeNumber(7), WithMaxID(102))
		require.NoError(t, err)
		defer g.Close()
		called := 0
		err = g.NextIDsContext(context.Background(), 8, func(ID) { called++ })
		require.ErrorIs(t, err, ErrExhausted)
		require.Contains(t, err.Error(), "7 are left: nothing was taken") // 95…99, 101, 102
		require.Zero(t, called)
		v, err := ReadCounter(path)
		require.NoError(t, err)
		require.Equal(t, uint64(94), v, "a request refused at the bound moved the counter")
		var got []string
		require.NoError(t, g.NextIDs(7, func(id ID) { got = append(got, id.String()) }))
		require.Equal(t, []string{"7.95", "7.96", "7.97", "7.98", "7.99", "7.101", "7.102"}, got)
		_, err = g.UniqueID()
		require.ErrorIs(t, err, ErrExhausted)
	})
}

// The decimal form skips numbers ending in 0, so a request of k ids takes
// more than k numbers: the registry is asked for room for all of them
// first, and no number is handed out above the registry's mark, up to the
// last one an outage leaves.
func TestDecimalIDsStayWithinTheRegistryMark(t *testing.T) {
	t.Parallel()
	for k := uint64(1); k <= 19; k++ {
		reg := registrytest.NewRegistry()
		_, path := ctPath(t)
		g := openReg(t, path, "web_1", reg, WithFormat(FormatDecimal), WithReserveStep(10), WithOutageHorizon(0), WithRegistryTimeout(time.Second))
		reg.SetDown(true)
		var last uint64
		for range 100 {
			if g.NextIDsContext(context.Background(), k, func(id ID) { last = id.Number }) != nil {
				break
			}
		}
		row, ok := reg.Row("web_1")
		require.True(t, ok)
		if k == 1 {
			require.NotZero(t, last, "one id at a time is handed out up to the mark")
		}
		require.LessOrEqual(t, last, row.Reserved, "requests of %d ids: number %d handed out above the registry's mark %d", k, last, row.Reserved)
		reg.SetDown(false)
		require.NoError(t, g.Close())
	}
}
