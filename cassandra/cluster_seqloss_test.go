package cassandra

import (
	"fmt"
	"testing"
	"time"

	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// A data centre's hosts lease a sequence while one of its nodes loses the
// sequences table (a lost disk, or the commit log's last seconds), and
// later while that node comes back from an older snapshot of itself. New
// hosts and the hosts that leased before go on leasing, and no number is
// leased twice: each data centre holds fewer than SequenceLocalReplicas
// replicas (dc1 two, dc2 one), so its partition is kept at SERIAL among
// all three and the other replicas still have every commit. A host whose contact points are all in the other data
// centre leases in its own.
func TestClusterSequenceReplicaLoss(t *testing.T) {
	e := newClusterEnv(t)
	leased := map[string]string{}
	for _, dc := range e.c.DataCentres() {
		t.Run(dc, func(t *testing.T) {
			nodes := e.c.NodesIn(dc)
			node := nodes[len(nodes)-1] // not the seed, node 1
			reg := e.registry(t, func(c *Config) { c.LocalDC = dc })
			require.NoError(t, reg.SetSequenceSizing(time.Hour, 40))
			seq := "loss_" + dc
			_, err := reg.CreateSequence(t.Context(), seq, 1, registry.MaxSequence)
			require.NoError(t, err)
			hosts := map[string]registry.Holder{}
			prev := map[string]registry.SequenceLease{}
			lease := func(name string) {
				t.Helper()
				h, ok := hosts[name]
				if !ok {
					h = reg.claimForTest(t, name+"_"+dc) // names are the cluster's, whatever the data centre
					hosts[name] = h
				}
				p := prev[name]
				l, err := reg.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: seq, Name: h.Name, Owner: h.Owner, Session: h.Session,
					PrevFirst: p.First, PrevLast: p.Last, Size: 5, Min: 1})
				require.NoError(t, err, "lease for %s", name)
				for n := l.First; n <= l.Last; n++ {
					key := fmt.Sprintf("%s/%d", seq, n)
					require.Empty(t, leased[key], "%s: %d leased to %s and again to %s", seq, n, leased[key], name)
					leased[key] = name
				}
				prev[name] = l
			}
			round := func(names ...string) {
				for range 3 {
					for _, n := range names {
						lease(n)
					}
				}
				reg.seqs.wg.Wait()
			}
			round("host_a", "host_b")
			restore := e.c.SnapshotNode(t, node)
			round("host_a", "host_b")
			e.c.LoseTable(t, node, e.ks.Name, seqTable)
			round("host_a", "host_b", "host_c")
			restore()
			round("host_a", "host_b", "host_c", "host_d")
			// A host whose contact points are all in another data centre
			// leases in its own.
			var elsewhere []string
			for i := 1; i <= e.c.N(); i++ {
				if e.c.DC(i) != dc {
					elsewhere = append(elsewhere, e.c.Addr(i))
				}
			}
			far := e.registry(t, func(c *Config) { c.LocalDC, c.Hosts = dc, elsewhere })
			h := far.claimForTest(t, "host_far_"+dc)
			l, err := far.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: seq, Name: h.Name, Owner: h.Owner, Session: h.Session, Size: 5, Min: 1})
			require.NoError(t, err, "a host of %s whose contact points are %v", dc, elsewhere)
			for n := l.First; n <= l.Last; n++ {
				key := fmt.Sprintf("%s/%d", seq, n)
				require.Empty(t, leased[key], "%s: %d leased to %s and again", seq, n, leased[key])
				leased[key] = h.Name
			}
			far.seqs.wg.Wait()
			t.Logf("%s (%s, node %d lost the table, then came back from an older snapshot): %d numbers leased, none twice",
				dc, reg.dcPaxos(), node, len(leased))
		})
	}
}
