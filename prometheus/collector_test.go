package prometheus_test

import (
	"bytes"
	"context"
	"math"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/snapid/snapid"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/testcluster"
	snapidprom "github.com/snapid/snapid/prometheus"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// scrape gathers the collector through a registry and returns each
// sample's value by "name{label=value,…}" (labels sorted, name omitted);
// histograms give name_count and name_sum.
func scrape(t *testing.T, c prom.Collector) map[string]float64 {
	t.Helper()
	reg := prom.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName() + labels(m)
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[mf.GetName()+"_count"+labels(m)] = float64(m.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum"+labels(m)] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

func labels(m *dto.Metric) string {
	var ls []string
	for _, l := range m.GetLabel() {
		if l.GetName() == "call" || l.GetName() == "outcome" || l.GetName() == "sequence" {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
	}
	if len(ls) == 0 {
		return ""
	}
	sort.Strings(ls)
	return "{" + strings.Join(ls, ",") + "}"
}

func next(t *testing.T, g *snapid.Generator, n int) {
	t.Helper()
	for range n {
		_, err := g.Next()
		require.NoError(t, err)
	}
}

// The metrics pass the client library's lint (names, units, help).
func TestCollectorLint(t *testing.T) {
	g, _, _ := openWithRegistry(t)
	c := snapidprom.NewCollector(g, snapidprom.Opts{})
	next(t, g, 3)
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)
	// Every metric once a second scrape gives a rate (the heartbeat's
	// too: the claim counts as the first), and the calls by kind and
	// outcome.
	assert.Equal(t, 13+len(registryCallSeries), testutil.CollectAndCount(c))
}

var registryCallSeries = func() []string {
	var out []string
	for _, call := range []string{"claim", "extend", "touch", "release", "get", "list"} {
		for _, o := range []string{"applied", "condition_failed", "resolved", "error"} {
			out = append(out, call+"/"+o)
		}
	}
	return out
}()

func openWithRegistry(t *testing.T) (*snapid.Generator, *registrytest.Registry, string) {
	t.Helper()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g, err := snapid.Open(path, "web_1", snapid.Config{
		Registry:   &snapid.RegistryConfig{Registry: reg, ReserveStep: 100, OutageHorizon: -1, Heartbeat: time.Hour, CloneWindow: -1},
		NoSync:     true,
		BindingDir: t.TempDir(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	return g, reg, path
}

// Without a registry: ids, updates and the counter move as ids are
// issued; no reservation metric is there.
func TestCollectorStandalone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "counter.u64")
	g, err := snapid.Open(path, "web_1", snapid.Config{NoSync: true, BindingDir: t.TempDir()})
	require.NoError(t, err)
	defer g.Close()
	c := snapidprom.NewCollector(g, snapidprom.Opts{ConstLabels: prom.Labels{"app": "cms"}})
	for _, tc := range []struct{ draw, want int }{{0, 0}, {1, 1}, {4, 5}} {
		next(t, g, tc.draw)
		m := scrape(t, c)
		assert.Equal(t, float64(tc.want), m["snapid_ids_issued_total"], "after %d", tc.want)
		assert.Equal(t, float64(tc.want), m["snapid_file_updates_total"])
		assert.Equal(t, float64(tc.want), m["snapid_file_update_duration_seconds_count"])
		assert.Equal(t, float64(tc.want), m["snapid_file_update_size_numbers_sum"])
		assert.Equal(t, float64(tc.want), m["snapid_counter_last_issued"])
		assert.NotContains(t, m, "snapid_reservation_mark")
		assert.NotContains(t, m, "snapid_session_held")
	}
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP snapid_ids_issued_total Ids handed to callers by this Generator.
# TYPE snapid_ids_issued_total counter
snapid_ids_issued_total{app="cms",form="name",name="web_1"} 5
`), "snapid_ids_issued_total"))
	require.NoError(t, g.Close())
	m := scrape(t, c)
	assert.Equal(t, 5.0, m["snapid_ids_issued_total"], "counts stay after Close")
	assert.NotContains(t, m, "snapid_counter_last_issued", "the file is not read after Close")
}

// With a registry: the mark, what is left (in numbers and seconds at the
// recent rate), the registry calls, the last extension; the registry going
// away and coming back; the session superseded.
func TestCollectorRegistry(t *testing.T) {
	g, reg, _ := openWithRegistry(t)
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	c := snapidprom.NewCollector(g, snapidprom.Opts{Now: clk.now, RateWindow: time.Minute})

	m := scrape(t, c)
	mark := m["snapid_reservation_mark"]
	require.Positive(t, mark)
	assert.Equal(t, mark, m["snapid_reservation_left_numbers"])
	assert.NotContains(t, m, "snapid_reservation_left_seconds", "no rate from one scrape")
	assert.Equal(t, 1.0, m["snapid_registry_calls_total{call=claim,outcome=applied}"])
	assert.Equal(t, 1.0, m["snapid_registry_calls_total{call=extend,outcome=applied}"])
	assert.Equal(t, 1.0, m["snapid_session_held"])
	assert.Positive(t, m["snapid_registry_last_extension_timestamp_seconds"])
	assert.Positive(t, m["snapid_registry_last_contact_timestamp_seconds"])

	// 20 ids in 10 s: a rate of 2/s.
	clk.add(10 * time.Second)
	next(t, g, 20)
	m = scrape(t, c)
	assert.Equal(t, mark-20, m["snapid_reservation_left_numbers"])
	assert.InDelta(t, (mark-20)/2, m["snapid_reservation_left_seconds"], 1e-9)
	// Idle: nothing issued over the window.
	clk.add(2 * time.Minute)
	scrape(t, c)
	clk.add(time.Second)
	m = scrape(t, c)
	assert.True(t, math.IsInf(m["snapid_reservation_left_seconds"], 1), "idle: %v", m["snapid_reservation_left_seconds"])

	// Past half the step, the mark is extended.
	before := m["snapid_registry_last_extension_timestamp_seconds"]
	next(t, g, int(mark/2))
	require.Eventually(t, func() bool { return scrape(t, c)["snapid_reservation_mark"] > mark }, 10*time.Second, time.Millisecond)
	m = scrape(t, c)
	assert.Equal(t, 2.0, m["snapid_registry_calls_total{call=extend,outcome=applied}"])
	assert.GreaterOrEqual(t, m["snapid_registry_last_extension_timestamp_seconds"], before)

	// The registry goes away: issuance runs to the mark, then extensions fail.
	reg.SetDown(true)
	contact := m["snapid_registry_last_contact_timestamp_seconds"]
	mark = m["snapid_reservation_mark"]
	var err error
	for err == nil {
		_, err = g.Next()
	}
	require.ErrorIs(t, err, snapid.ErrReservationExhausted)
	m = scrape(t, c)
	assert.Positive(t, m["snapid_registry_calls_total{call=extend,outcome=error}"])
	assert.Equal(t, 0.0, m["snapid_reservation_left_numbers"])
	assert.Equal(t, mark, m["snapid_counter_last_issued"])
	assert.Equal(t, contact, m["snapid_registry_last_contact_timestamp_seconds"], "no contact while down")
	// And comes back.
	reg.SetDown(false)
	next(t, g, 1)
	m = scrape(t, c)
	assert.Greater(t, m["snapid_reservation_mark"], mark)
	assert.Greater(t, m["snapid_registry_last_contact_timestamp_seconds"], contact)
	assert.Equal(t, 1.0, m["snapid_session_held"])

	// Another owner takes the name over: the session is no longer held.
	_, err = reg.Claim(context.Background(), registry.Claim{Name: "web_1", Owner: "another-owner-0123456789abcdef", Force: true})
	require.NoError(t, err)
	for err == nil {
		_, err = g.Next()
	}
	require.ErrorIs(t, err, snapid.ErrNameTaken)
	m = scrape(t, c)
	assert.Equal(t, 0.0, m["snapid_session_held"])
	assert.Positive(t, m["snapid_registry_calls_total{call=extend,outcome=condition_failed}"])
}

// A program that imports only snapid links neither Prometheus nor the
// Cassandra driver.
func TestRootPackageLinksNoPrometheus(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/snapid/snapid").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/gofrs/flock", "the listing is of snapid's dependencies")
	for _, d := range deps {
		assert.False(t, strings.HasPrefix(d, "github.com/prometheus/") || strings.HasPrefix(d, "github.com/gocql/"), "snapid imports %s", d)
	}
}

// With the registry on the real Cassandra, the values move as ids are
// issued and the mark is extended.
func TestCollectorCassandra(t *testing.T) {
	k := testcluster.NewKeyspace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg, err := cassandra.NewRegistry(ctx, cassandra.Config{Hosts: k.Hosts, Keyspace: k.Name})
	require.NoError(t, err)
	defer reg.Close()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g, err := snapid.OpenContext(ctx, path, "web_1", snapid.Config{
		Registry:   &snapid.RegistryConfig{Registry: reg, ReserveStep: 20, OutageHorizon: -1},
		NoSync:     true,
		BindingDir: t.TempDir(),
	})
	require.NoError(t, err)
	defer g.Close()
	c := snapidprom.NewCollector(g, snapidprom.Opts{})
	m := scrape(t, c)
	mark := m["snapid_reservation_mark"]
	require.Positive(t, mark)
	assert.Equal(t, 1.0, m["snapid_registry_calls_total{call=claim,outcome=applied}"])
	assert.Equal(t, 1.0, m["snapid_session_held"])

	next(t, g, int(mark))
	require.Eventually(t, func() bool { return scrape(t, c)["snapid_reservation_mark"] > mark }, 30*time.Second, 5*time.Millisecond,
		"the background extension through the real registry")
	m = scrape(t, c)
	assert.Equal(t, mark, m["snapid_ids_issued_total"])
	assert.Equal(t, mark, m["snapid_counter_last_issued"])
	assert.Greater(t, m["snapid_reservation_mark"], mark, "extended through the real registry")
	assert.GreaterOrEqual(t, m["snapid_registry_calls_total{call=extend,outcome=applied}"], 2.0)
	assert.Equal(t, 0.0, m["snapid_registry_calls_total{call=extend,outcome=error}"])
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// newCollectorWithRate returns a collector of g already scraped once, so
// that its next scrape has every metric.
func newCollectorWithRate(t *testing.T, g *snapid.Generator) prom.Collector {
	t.Helper()
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	c := snapidprom.NewCollector(g, snapidprom.Opts{Now: clk.now})
	scrape(t, c)
	clk.add(time.Second)
	return c
}

// Every metric carries the id form.
func TestCollectorFormLabel(t *testing.T) {
	for _, f := range []snapid.Format{snapid.FormatName, snapid.FormatDecimal} {
		cfg := snapid.Config{BindingDir: t.TempDir()}
		if f == snapid.FormatDecimal {
			cfg.Form = snapid.Decimal{NodeNumber: 9}
		}
		g, err := snapid.Open(filepath.Join(t.TempDir(), "counter.u64"), "web_1", cfg)
		require.NoError(t, err)
		reg := prom.NewPedanticRegistry()
		require.NoError(t, reg.Register(snapidprom.NewCollector(g, snapidprom.Opts{})))
		mfs, err := reg.Gather()
		require.NoError(t, err)
		require.NotEmpty(t, mfs)
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				got := ""
				for _, l := range m.GetLabel() {
					if l.GetName() == "form" {
						got = l.GetValue()
					}
				}
				require.Equal(t, f.String(), got, "%s", mf.GetName())
			}
		}
		require.NoError(t, g.Close())
	}
}
