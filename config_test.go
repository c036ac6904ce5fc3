package snapid_test

import (
	"context"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// A Config that cannot be used is refused with ErrInvalidOption naming the
// field, before anything is made: no counter, no place of records.
func TestConfigRefusedNamesTheFieldAndMakesNothing(t *testing.T) {
	reg := registrytest.NewRegistry()
	for _, tc := range []struct {
		field string
		cfg   func(bindings string) snapid.Config
	}{
		{"Config.Block.Size", func(b string) snapid.Config {
			return snapid.Config{BindingDir: b, Block: &snapid.Block{CPUShards: true}}
		}},
		{"Config.Block.Size", func(b string) snapid.Config {
			return snapid.Config{BindingDir: b, Block: &snapid.Block{Size: math.MaxUint64}}
		}},
		{"Config.BindingDir", func(string) snapid.Config { return snapid.Config{BindingDir: "records"} }},
		{"Config.BindingDir", func(b string) snapid.Config {
			return snapid.Config{BindingDir: filepath.Join(filepath.Dir(b), "counter.u64")}
		}},
		{"Config.BindingDir", func(b string) snapid.Config {
			return snapid.Config{BindingDir: filepath.Join(filepath.Dir(b), "counter.u64.mark"), Registry: &snapid.RegistryConfig{Registry: reg}}
		}},
		{"Config.BindingDir", func(string) snapid.Config { return snapid.Config{BindingDir: "/"} }},
		{"Config.FileMode", func(b string) snapid.Config { return snapid.Config{BindingDir: b, FileMode: 0o400} }},
		{"Config.FileMode", func(b string) snapid.Config { return snapid.Config{BindingDir: b, FileMode: fs.ModeDir | 0o700} }},
		{"Config.Registry.Registry", func(b string) snapid.Config {
			return snapid.Config{BindingDir: b, Registry: &snapid.RegistryConfig{ReserveStep: 10}}
		}},
		{"Config.Registry.ReserveStep", func(b string) snapid.Config {
			return snapid.Config{BindingDir: b, Registry: &snapid.RegistryConfig{Registry: reg, ReserveStep: 1}}
		}},
		{"Config.Registry.ReserveStep", func(b string) snapid.Config {
			return snapid.Config{BindingDir: b, Registry: &snapid.RegistryConfig{Registry: reg, ReserveStep: 1<<32 + 1}}
		}},
		{"Config.Registry.Heartbeat", func(b string) snapid.Config {
			return snapid.Config{BindingDir: b, Registry: &snapid.RegistryConfig{Registry: reg, Heartbeat: -time.Second}}
		}},
		{"Config.Registry.Heartbeat", func(b string) snapid.Config {
			return snapid.Config{BindingDir: b, Registry: &snapid.RegistryConfig{Registry: reg, Heartbeat: time.Nanosecond}}
		}},
		{"Config.Registry.Timeout", func(b string) snapid.Config {
			return snapid.Config{BindingDir: b, Registry: &snapid.RegistryConfig{Registry: reg, Timeout: time.Microsecond}}
		}},
		{"Config.Registry.Timeout", func(b string) snapid.Config {
			return snapid.Config{BindingDir: b, Registry: &snapid.RegistryConfig{Registry: reg, Timeout: -time.Second}}
		}},
		{"Config.Registry.Takeover.Floor", func(b string) snapid.Config {
			return snapid.Config{BindingDir: b, Registry: &snapid.RegistryConfig{Registry: reg, Takeover: &snapid.Takeover{Floor: math.MaxUint64}}}
		}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			dir := t.TempDir()
			bindings := filepath.Join(dir, "records")
			g, err := snapid.Open(filepath.Join(dir, "counter.u64"), "web_1", tc.cfg(bindings))
			require.ErrorIs(t, err, snapid.ErrInvalidOption)
			require.ErrorContains(t, err, tc.field)
			require.Nil(t, g)
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, entries, "a refused Config makes nothing")
		})
	}
	holders, err := reg.List(context.Background())
	require.NoError(t, err)
	require.Empty(t, holders, "a refused Config claims nothing")
}

// The zero Config is the name form, strictly increasing host-wide.
func TestConfigZeroValueIsTheNameForm(t *testing.T) {
	dir := t.TempDir()
	g, err := snapid.Open(filepath.Join(dir, "counter.u64"), "web_1", snapid.Config{BindingDir: filepath.Join(dir, "records")})
	require.NoError(t, err)
	defer g.Close()
	f, node, stride := g.Form()
	require.Equal(t, snapid.FormatName, f)
	require.Zero(t, node)
	require.Zero(t, stride)
	for want := range []string{"web_1-1", "web_1-2"} {
		id, err := g.UniqueID()
		require.NoError(t, err)
		require.Equal(t, []string{"web_1-1", "web_1-2"}[want], id)
	}
}

// A numeric Form carries its node number, stride and bound to the
// Generator: past MaxID every call is ErrExhausted.
func TestConfigNumericForms(t *testing.T) {
	dir := t.TempDir()
	g, err := snapid.Open(filepath.Join(dir, "counter.u64"), "web_1", snapid.Config{
		BindingDir: filepath.Join(dir, "records"),
		Form:       snapid.Striped{NodeNumber: 3, Stride: 10, MaxID: 23},
	})
	require.NoError(t, err)
	f, node, stride := g.Form()
	require.Equal(t, []any{snapid.FormatStriped, uint64(3), uint64(10)}, []any{f, node, stride})
	for _, want := range []uint64{13, 23} {
		v, err := g.UniqueUint64()
		require.NoError(t, err)
		require.Equal(t, want, v)
	}
	_, err = g.UniqueUint64()
	require.ErrorIs(t, err, snapid.ErrExhausted)
	require.NoError(t, g.Close())

	d, err := snapid.Open(filepath.Join(dir, "decimal.u64"), "web_2", snapid.Config{
		BindingDir: filepath.Join(dir, "records"),
		Form:       snapid.Decimal{NodeNumber: 4},
	})
	require.NoError(t, err)
	defer d.Close()
	id, err := d.UniqueID()
	require.NoError(t, err)
	require.Equal(t, "4.1", id)
}

// A numeric form without a registry needs its node number.
func TestConfigNumericFormNeedsANodeNumber(t *testing.T) {
	dir := t.TempDir()
	_, err := snapid.Open(filepath.Join(dir, "counter.u64"), "web_1", snapid.Config{
		BindingDir: filepath.Join(dir, "records"),
		Form:       snapid.Decimal{},
	})
	require.ErrorIs(t, err, snapid.ErrInvalidOption)
	require.NoFileExists(t, filepath.Join(dir, "counter.u64"))
}

// A registry's zero values are the defaults, and a negative clone window
// or outage horizon turns the check or the sizing off: a heartbeat of an
// hour is refused under the default window (5 minutes, shorter than twice
// the heartbeat) and accepted with the window off; with the sizing off
// every step is ReserveStep (a mark at most a step above the counter).
func TestConfigRegistryZeroIsDefaultNegativeIsOff(t *testing.T) {
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	path := filepath.Join(dir, "counter.u64")
	cfg := snapid.Config{
		BindingDir: filepath.Join(dir, "records"),
		Registry:   &snapid.RegistryConfig{Registry: reg, Heartbeat: time.Hour},
	}
	_, err := snapid.Open(path, "web_1", cfg)
	require.ErrorIs(t, err, snapid.ErrInvalidOption)
	require.ErrorContains(t, err, "clone window")

	cfg.Registry.CloneWindow = -1
	cfg.Registry.OutageHorizon = -1
	cfg.Registry.ReserveStep = 7
	g, err := snapid.Open(path, "web_1", cfg)
	require.NoError(t, err)
	defer g.Close()
	for range 200 {
		_, err := g.Next()
		require.NoError(t, err)
	}
	h, err := reg.Get(context.Background(), "web_1")
	require.NoError(t, err)
	require.LessOrEqual(t, h.Reserved, uint64(200+7), "steps of ReserveStep, not sized by the rate")
}

// A take-over starts the counter above its floor.
func TestConfigTakeoverStartsAboveTheFloor(t *testing.T) {
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	g, err := snapid.Open(filepath.Join(dir, "counter.u64"), "web_1", snapid.Config{
		BindingDir: filepath.Join(dir, "records"),
		Registry:   &snapid.RegistryConfig{Registry: reg, Takeover: &snapid.Takeover{Floor: 500}},
		Logger:     slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	defer g.Close()
	n, err := g.Next()
	require.NoError(t, err)
	require.Equal(t, uint64(501), n)
}

// A Host given in part is completed with this machine's: the registry's
// row says where the claim came from.
func TestConfigHostCompletedWithThisMachine(t *testing.T) {
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	g, err := snapid.Open(filepath.Join(dir, "counter.u64"), "web_1", snapid.Config{
		BindingDir: filepath.Join(dir, "records"),
		Registry:   &snapid.RegistryConfig{Registry: reg, Host: snapid.HostInfo{Address: "192.0.2.7"}},
	})
	require.NoError(t, err)
	defer g.Close()
	h, err := reg.Get(context.Background(), "web_1")
	require.NoError(t, err)
	host, err := os.Hostname()
	require.NoError(t, err)
	require.Equal(t, "192.0.2.7", h.Address)
	require.Equal(t, host, h.Hostname)
	require.NotEmpty(t, h.MachineID)
}

// A nil pointer for a Form is refused, not dereferenced.
func TestConfigNilFormPointerRefused(t *testing.T) {
	dir := t.TempDir()
	_, err := snapid.Open(filepath.Join(dir, "counter.u64"), "web_1", snapid.Config{Form: (*snapid.Striped)(nil)})
	require.ErrorIs(t, err, snapid.ErrInvalidOption)
	require.ErrorContains(t, err, "Config.Form")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}
