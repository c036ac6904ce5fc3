package cassandra

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
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

// Two data centres cut apart for a while: hosts of a data centre that
// keeps its ranges at LOCAL_SERIAL, or at SERIAL with a quorum of all
// replicas, keep issuing; hosts of one kept at SERIAL without that quorum
// stop once their leases are used (see dcPaxos), nothing
// is issued twice after healing, and every number issued in a data centre
// lies in a range GLOBAL granted to that data centre.
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
		cut bool // stopped issuing during the cut
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
	// A data centre holding SequenceLocalReplicas replicas leases from its
	// own ranges at LOCAL_SERIAL: more than one lease per host goes on
	// through the cut. One holding fewer keeps its partition at SERIAL: if
	// it holds a quorum of all replicas it goes on too; if not, its hosts
	// issue what their leases hold, then fail until the cut heals.
	total := 0
	for k, v := range repl {
		if n, err := strconv.Atoi(v); err == nil && k != "class" {
			total += n
		}
	}
	for _, sd := range sides {
		p, n := paxosFor(repl, sd.dc)
		stops := p.global && 2*n <= total
		for range 1500 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			v, err := sd.seq.NextContext(ctx)
			cancel()
			if stops && err != nil {
				// The registry's refusal, or the minute ending while
				// the process's own refill waits for it.
				require.True(t, errors.Is(err, snapid.ErrRegistry) || errors.Is(err, context.DeadlineExceeded), "host in %s: %v", sd.dc, err)
				sd.cut = true
				break
			}
			require.NoError(t, err, "host in %s (kept at %s, %d of %d replicas)", sd.dc, p, n, total)
			sd.got = append(sd.got, v)
		}
		require.Equal(t, stops, sd.cut, "host in %s (kept at %s, %d of %d replicas) stopped during the cut", sd.dc, p, n, total)
	}
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
	t.Logf("partition of %v: %d numbers in all, grants %d", during.Round(time.Millisecond), len(seen), len(st.Grants))
}
