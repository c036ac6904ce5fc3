package cassandra

import (
	"strings"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/stretchr/testify/require"
)

// How each data centre keeps sequences follows from the replicas it holds:
// LOCAL_SERIAL with SequenceLocalReplicas or more (it leases while cut
// off), SERIAL with fewer or under SimpleStrategy; check-names' report
// says so per data centre, and needs attention when a data centre kept at
// LOCAL_SERIAL has too few nodes to lease with one of them down.
func TestAssessSequences(t *testing.T) {
	for _, tc := range []struct {
		name      string
		repl      map[string]string
		nodes     map[string]int
		paxos     map[string]string
		status    string
		detailHas string
	}{
		{"three in each", nts("dc1", "3", "dc2", "3"), map[string]int{"dc1": 3, "dc2": 3},
			map[string]string{"dc1": "LOCAL_SERIAL", "dc2": "LOCAL_SERIAL"}, ReplicationOK, ""},
		{"two and one", nts("dc1", "2", "dc2", "1"), map[string]int{"dc1": 2, "dc2": 1},
			map[string]string{"dc1": "SERIAL", "dc2": "SERIAL"}, ReplicationOK, ""},
		{"three and one", nts("dc1", "3", "dc2", "1"), map[string]int{"dc1": 3, "dc2": 1},
			map[string]string{"dc1": "LOCAL_SERIAL", "dc2": "SERIAL"}, ReplicationOK, ""},
		{"simple on two", simple("3"), map[string]int{"dc1": 2, "dc2": 1},
			map[string]string{"dc1": "SERIAL", "dc2": "SERIAL"}, ReplicationOK, ""},
		{"three asked, two nodes", nts("dc1", "3", "dc2", "3"), map[string]int{"dc1": 2, "dc2": 3},
			map[string]string{"dc1": "LOCAL_SERIAL", "dc2": "LOCAL_SERIAL"}, ReplicationAttention, "sequences in data centre dc1 need 2 of its 3 replicas, and it has 2 nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := assessReplication("ks", tc.repl, tc.nodes, gocql.Quorum, "dc1")
			got := map[string]string{}
			for _, s := range rep.Sequences {
				got[s.DC] = s.Paxos
				require.Equal(t, s.Paxos == "LOCAL_SERIAL", s.LeasesCutOff, "%s: %+v", s.DC, s)
				require.NotEmpty(t, s.Detail)
			}
			require.Equal(t, tc.paxos, got)
			require.Equal(t, tc.status, rep.Status, rep.Detail)
			require.True(t, strings.Contains(rep.Detail, tc.detailHas), rep.Detail)
		})
	}
}

// paxosFor reads the replication as Cassandra stores it (the class's
// full name) and refuses nothing: a factor it cannot read keeps the data
// centre at SERIAL.
func TestPaxosFor(t *testing.T) {
	for _, tc := range []struct {
		repl     map[string]string
		dc       string
		global   bool
		replicas int
	}{
		{nts("dc1", "3"), "dc1", false, 3},
		{nts("dc1", "5", "dc2", "2"), "dc2", true, 2},
		{nts("dc1", "3"), "dc2", true, 0},
		{nts("dc1", "3/1"), "dc1", true, 0},
		{simple("5"), "dc1", true, 0},
		{map[string]string{"class": "NetworkTopologyStrategy", "dc1": "4"}, "dc1", false, 4},
	} {
		p, n := paxosFor(tc.repl, tc.dc)
		require.Equal(t, tc.global, p.global, "%v in %s", tc.repl, tc.dc)
		require.Equal(t, tc.replicas, n, "%v in %s", tc.repl, tc.dc)
	}
}
