package cassandra

import (
	"testing"

	"github.com/snapid/snapid/internal/testcluster"
)

// The sequence partition test (sequence_partition_test.go) runs on the
// cluster of scripts/cluster-test.sh: dc1 holds two replicas of each
// partition and a quorum of all three, dc2 one. Cut apart, dc1 goes on
// leasing (its partition is kept at LOCAL_SERIAL, and it can take new
// ranges from GLOBAL at SERIAL); dc2, whose partition is kept at SERIAL,
// stops once its hosts' leases are used.
func init() {
	startTwoDCs = func(t *testing.T) twoDCCluster {
		c := testcluster.RequireCluster(t)
		if len(c.DataCentres()) < 2 {
			t.Fatalf("the cluster has data centres %v; this test needs two", c.DataCentres())
		}
		return clusterTwoDCs{c}
	}
}

type clusterTwoDCs struct{ c *testcluster.Cluster }

func (x clusterTwoDCs) DCs() (a, b string, hostsA, hostsB []string) {
	dcs := x.c.DataCentres()
	a, b = dcs[0], dcs[1]
	for _, i := range x.c.NodesIn(a) {
		hostsA = append(hostsA, x.c.Addr(i))
	}
	for _, i := range x.c.NodesIn(b) {
		hostsB = append(hostsB, x.c.Addr(i))
	}
	return a, b, hostsA, hostsB
}

func (x clusterTwoDCs) Keyspace(t *testing.T) (string, map[string]string) {
	return x.c.NewKeyspace(t).Name, x.c.Replication()
}

func (x clusterTwoDCs) Partition(t *testing.T) (heal func()) {
	a, b, _, _ := x.DCs()
	x.c.Partition(t, a, b)
	// Healed when every node sees every other up again: until then a read
	// at SERIAL can still miss its quorum.
	return func() { x.c.Heal(t); x.c.WaitAllUp(t) }
}
