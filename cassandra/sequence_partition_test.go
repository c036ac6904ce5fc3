package cassandra

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// twoDCCluster is the control of a real cluster of two data centres that
// the partition test needs. The multi-node cluster support provides it by
// setting startTwoDCs; without it the test is skipped.
type twoDCCluster interface {
	// DCs returns the two data centres' names and each one's contact
	// points.
	DCs() (a, b string, hostsA, hostsB []string)
	// Keyspace returns a new keyspace's name, dropped at the test's end,
	// and the replication it is to be created with.
	Keyspace(t *testing.T) (name string, replication map[string]string)
	// Partition cuts every connection between the two data centres until
	// heal is called (or the test ends).
	Partition(t *testing.T) (heal func())
}

// startTwoDCs starts (or finds) a cluster of two data centres, or is nil
// where there is none.
var startTwoDCs func(t *testing.T) twoDCCluster

// Two data centres cut apart for a while: hosts on both sides keep issuing
// from their data centres' ranges (at LOCAL_SERIAL), nothing is issued
// twice after healing, and every number issued in a data centre lies in a
// range GLOBAL granted to that data centre.
func TestSequenceTwoDCPartition(t *testing.T) {
	if startTwoDCs == nil {
		t.Skip("needs a cluster of two data centres with partition control (startTwoDCs)")
	}
	cl := startTwoDCs(t)
	dcA, dcB, hostsA, hostsB := cl.DCs()
	ksName, repl := cl.Keyspace(t)
	regFor := func(dc string, hosts []string) *Registry {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		r, err := NewRegistry(ctx, Config{Hosts: hosts, Keyspace: ksName, Replication: repl, LocalDC: dc})
		require.NoError(t, err)
		t.Cleanup(r.Close)
		require.NoError(t, r.SetSequenceSizing(time.Hour, 5_000))
		return r
	}
	regA, regB := regFor(dcA, hostsA), regFor(dcB, hostsB)
	_, err := admin.CreateSequence(t.Context(), regA, "orders", 1, registry.MaxSequence)
	require.NoError(t, err)

	type side struct {
		dc  string
		seq *snapid.Sequence
		got []uint64
	}
	var sides []*side
	for i, r := range []*Registry{regA, regB} {
		dc := []string{dcA, dcB}[i]
		for h := range 2 {
			name := fmt.Sprintf("host_%s_%d", dc, h)
			g, err := snapid.Open(filepath.Join(t.TempDir(), "counter.u64"), name, snapid.Config{
				Registry:   &snapid.RegistryConfig{Registry: r, Host: snapid.HostInfo{Hostname: name, MachineID: name}},
				NoSync:     true,
				BindingDir: hostRecords(t, name),
			})
			require.NoError(t, err)
			t.Cleanup(func() { g.Close() })
			s, err := g.Sequence("orders", snapid.SequenceBlock(10), snapid.SequenceLeaseSize(100))
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			sides = append(sides, &side{dc: dc, seq: s})
		}
	}
	draw := func(n int) {
		for _, sd := range sides {
			for range n {
				v, err := sd.seq.Next()
				require.NoError(t, err, "host in %s", sd.dc)
				sd.got = append(sd.got, v)
			}
		}
	}
	draw(200)
	heal := cl.Partition(t)
	start := time.Now()
	draw(1500) // more than one lease per host: leases from the data centre's range go on
	during := time.Since(start)
	heal()
	draw(200)

	seen := map[uint64]string{}
	for _, sd := range sides {
		for _, v := range sd.got {
			if dc, dup := seen[v]; dup {
				t.Fatalf("number %d issued in %s and again in %s", v, dc, sd.dc)
			}
			seen[v] = sd.dc
		}
	}
	st, err := regA.SequenceStatus(t.Context(), "orders")
	require.NoError(t, err)
	for v, dc := range seen {
		ok := false
		for _, g := range st.Grants {
			if g.DC == dc && g.First <= v && v <= g.Last {
				ok = true
				break
			}
		}
		require.True(t, ok, "number %d issued in %s is in no range GLOBAL granted to %s", v, dc, dc)
	}
	t.Logf("partition of %v: %d numbers per host on each side during it, %d in all, grants %d", during.Round(time.Millisecond), 1500, len(seen), len(st.Grants))
}
