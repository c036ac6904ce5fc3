package prometheus_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/testcluster"
	snapidprom "github.com/snapid/snapid/prometheus"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unleased counts, from the registry's rows, the numbers of sequence seq
// no host has leased: what GLOBAL has not granted, and what the data
// centres' ranges have not leased out (a lease is at most an eighth of a
// range, so a range's tail may stay).
func unleased(t *testing.T, reg registry.SequenceRegistry, seq string) uint64 {
	t.Helper()
	st, err := reg.SequenceStatus(context.Background(), seq)
	require.NoError(t, err)
	var n uint64
	if st.Next != 0 && st.Next <= st.Max {
		n = st.Max - st.Next + 1
	}
	for _, g := range st.Ranges {
		if g.Next <= g.Last {
			n += g.Last - g.Next + 1
		}
	}
	return n
}

const seqKey = "{sequence=orders}"

// The sequence metrics move as numbers are handed out and leased; space
// left is read from the registry once per interval, kept while the
// registry is away, and falls below the alert's 10 % as the sequence runs
// out; a closed Sequence leaves them out.
func TestCollectorSequence(t *testing.T) {
	g, reg, _ := openWithRegistry(t)
	const max = 20_000
	_, err := admin.CreateSequence(context.Background(), reg, "orders", 1, max)
	require.NoError(t, err)
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	c := snapidprom.NewCollector(g, snapidprom.Opts{Now: clk.now, SequenceSpaceInterval: time.Minute})
	m := scrape(t, c)
	assert.NotContains(t, m, "snapid_sequence_numbers_issued_total"+seqKey, "no sequence open")

	s, err := g.Sequence("orders", snapid.SequenceBlock(10), snapid.SequenceLeaseSize(1000))
	require.NoError(t, err)
	m = scrape(t, c)
	assert.Equal(t, 0.0, m["snapid_sequence_numbers_issued_total"+seqKey])
	assert.Equal(t, 0.0, m["snapid_sequence_leases_total"+seqKey])
	assert.Equal(t, 0.0, m["snapid_sequence_lease_left_numbers"+seqKey])
	assert.Equal(t, float64(max), m["snapid_sequence_space_left_numbers"+seqKey])
	assert.Equal(t, 1.0, m["snapid_sequence_space_left_ratio"+seqKey])
	checked := float64(clk.now().Unix())
	assert.Equal(t, checked, m["snapid_sequence_space_checked_timestamp_seconds"+seqKey])

	_, err = s.NextN(600)
	require.NoError(t, err)
	m = scrape(t, c)
	assert.Equal(t, 600.0, m["snapid_sequence_numbers_issued_total"+seqKey])
	assert.Equal(t, 1.0, m["snapid_sequence_leases_total"+seqKey])
	assert.Equal(t, 400.0, m["snapid_sequence_lease_left_numbers"+seqKey])
	assert.Equal(t, float64(max), m["snapid_sequence_space_left_numbers"+seqKey], "the registry is asked once a minute")
	assert.Equal(t, checked, m["snapid_sequence_space_checked_timestamp_seconds"+seqKey])

	clk.add(time.Minute)
	m = scrape(t, c)
	assert.Equal(t, float64(max-1000), m["snapid_sequence_space_left_numbers"+seqKey])
	assert.Equal(t, 0.95, m["snapid_sequence_space_left_ratio"+seqKey])
	checked = float64(clk.now().Unix())
	assert.Equal(t, checked, m["snapid_sequence_space_checked_timestamp_seconds"+seqKey])

	// The registry away: the last answer stays, with its time; the lease
	// left is the host's file's.
	reg.SetDown(true)
	clk.add(time.Minute)
	_, err = s.NextN(100)
	require.NoError(t, err)
	m = scrape(t, c)
	assert.Equal(t, float64(max-1000), m["snapid_sequence_space_left_numbers"+seqKey])
	assert.Equal(t, checked, m["snapid_sequence_space_checked_timestamp_seconds"+seqKey])
	assert.Equal(t, 300.0, m["snapid_sequence_lease_left_numbers"+seqKey])
	reg.SetDown(false)

	// A second Sequence of the same name in the process: one set of
	// metrics, the counts added up.
	s2, err := g.Sequence("orders")
	require.NoError(t, err)
	_, err = s2.NextN(5)
	require.NoError(t, err)
	m = scrape(t, c)
	assert.Equal(t, 705.0, m["snapid_sequence_numbers_issued_total"+seqKey])
	require.NoError(t, s2.Close())
	m = scrape(t, c)
	assert.Equal(t, 705.0, m["snapid_sequence_numbers_issued_total"+seqKey], "a counter never goes down when one of them closes")

	// Running out: the ratio follows what the host leased, down past the
	// alert's 10 %, to 0.
	var ratios []float64
	for n := uint64(1000); ; {
		if _, err = s.NextN(n); errors.Is(err, snapid.ErrSequenceShort) {
			n = 100 // a range's tail, fewer than 1000 together
			continue
		}
		if err != nil {
			break
		}
		clk.add(time.Minute)
		m = scrape(t, c)
		left := unleased(t, reg, "orders")
		assert.Equal(t, float64(left), m["snapid_sequence_space_left_numbers"+seqKey])
		assert.InDelta(t, float64(left)/max, m["snapid_sequence_space_left_ratio"+seqKey], 1e-12)
		ratios = append(ratios, m["snapid_sequence_space_left_ratio"+seqKey])
	}
	require.ErrorIs(t, err, snapid.ErrExhausted)
	require.NotEmpty(t, ratios)
	assert.Less(t, ratios[len(ratios)-1], 0.1, "the SnapidSequenceSpaceLow alert fires: %v", ratios)
	assert.Equal(t, 0.0, ratios[len(ratios)-1])
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)

	issued := m["snapid_sequence_numbers_issued_total"+seqKey]
	require.NoError(t, s.Close())
	m = scrape(t, c)
	assert.Equal(t, issued, m["snapid_sequence_numbers_issued_total"+seqKey], "the counts stay")
	assert.NotContains(t, m, "snapid_sequence_lease_left_numbers"+seqKey, "the lease of a closed Sequence is left out")
	assert.NotContains(t, m, "snapid_sequence_space_left_ratio"+seqKey, "so is its space")
}

// A registry that does not answer holds a scrape at most the registry
// timeout in all, however many sequences are due; the answer that comes
// later is exported by the next scrape.
func TestCollectorSequenceSlowRegistry(t *testing.T) {
	g, reg, _ := openWithRegistry(t)
	names := []string{"a", "b", "c", "d", "e"}
	for _, n := range names {
		_, err := admin.CreateSequence(context.Background(), reg, n, 1, 1000)
		require.NoError(t, err)
		s, err := g.Sequence(n)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
	}
	release := make(chan struct{})
	reg.SetHook(func(ctx context.Context, op, _ string) error {
		if op == "sequence_status" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	c := snapidprom.NewCollector(g, snapidprom.Opts{RegistryTimeout: 200 * time.Millisecond})
	done := make(chan map[string]float64, 1)
	go func() { done <- scrape(t, c) }()
	var m map[string]float64
	select {
	case m = <-done:
	case <-time.After(5 * time.Second): // five sequences at 200 ms each, in turn, would still be under this
		close(release)
		t.Fatal("the scrape waited for the registry")
	}
	for _, n := range names {
		assert.NotContains(t, m, "snapid_sequence_space_left_ratio{sequence="+n+"}", "no answer yet")
		assert.Contains(t, m, "snapid_sequence_lease_left_numbers{sequence="+n+"}", "the lease file is read regardless")
	}
	close(release)
	require.Eventually(t, func() bool {
		m := scrape(t, c)
		for _, n := range names {
			if m["snapid_sequence_space_left_ratio{sequence="+n+"}"] != 1 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "the late answers are exported")
}

// On the real Cassandra: space left and the lease follow what the host
// leased from its data centre's ranges.
func TestCollectorSequenceCassandra(t *testing.T) {
	k := testcluster.NewKeyspace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg, err := cassandra.NewRegistry(ctx, cassandra.Config{Hosts: k.Hosts, Keyspace: k.Name})
	require.NoError(t, err)
	defer reg.Close()
	require.NoError(t, reg.SetSequenceSizing(time.Hour, 3000))
	const max = 1<<31 - 1 // a signed 32-bit column
	_, err = admin.CreateSequence(ctx, reg, "orders", 1<<31-10_000, max)
	require.NoError(t, err)
	g, err := snapid.OpenContext(ctx, filepath.Join(t.TempDir(), "counter.u64"), "web_1", snapid.Config{
		Registry:   &snapid.RegistryConfig{Registry: reg, OutageHorizon: -1},
		NoSync:     true,
		BindingDir: t.TempDir(),
	})
	require.NoError(t, err)
	defer g.Close()
	s, err := g.Sequence("orders", snapid.SequenceLeaseSize(1000))
	require.NoError(t, err)
	defer s.Close()
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	c := snapidprom.NewCollector(g, snapidprom.Opts{Now: clk.now})
	m := scrape(t, c)
	assert.Equal(t, 10_000.0, m["snapid_sequence_space_left_numbers"+seqKey])
	assert.Equal(t, 1.0, m["snapid_sequence_space_left_ratio"+seqKey])
	for i := range 4 {
		_, err := s.NextN(1000)
		require.NoError(t, err)
		// A lease or grant in the background may land between the
		// scrape's read and the test's: compare them once both read the
		// same, a minute of the collector's clock apart each time.
		var left uint64
		require.Eventually(t, func() bool {
			clk.add(time.Minute)
			before := unleased(t, reg, "orders")
			m = scrape(t, c)
			left = unleased(t, reg, "orders")
			return before == left && m["snapid_sequence_space_left_numbers"+seqKey] == float64(left)
		}, 30*time.Second, 10*time.Millisecond, "after %d leases", i+1)
		assert.Equal(t, float64(left), m["snapid_sequence_space_left_numbers"+seqKey], "after %d leases", i+1)
		assert.InDelta(t, float64(left)/10_000, m["snapid_sequence_space_left_ratio"+seqKey], 1e-12)
		l, err := s.Lease()
		require.NoError(t, err)
		assert.Equal(t, float64(l.LeftNumbers), m["snapid_sequence_lease_left_numbers"+seqKey])
	}
	assert.Less(t, m["snapid_sequence_space_left_numbers"+seqKey], 10_000.0-4000+1)
	assert.Equal(t, 4000.0, m["snapid_sequence_numbers_issued_total"+seqKey])
}
