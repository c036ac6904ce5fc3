// Package testcluster finds the Cassandra node that the tests of
// snapid/cassandra and snapctl run against: the one scripts/cassandra.sh
// starts on 127.0.0.1:9042, or the comma-separated host[:port] list in
// SNAPID_TEST_CASSANDRA, and gives each test a keyspace of its own with a
// direct session to read and plant rows. It is imported by tests only.
//
// A node that is not there fails the test in CI (CI=true: a missing
// Cassandra must never pass silently) and skips it elsewhere, saying how to
// start one.
//
// # Clusters
//
// The registry's behaviour on a real cluster is tested on three nodes in
// two data centres by scripts/cluster-test.sh, the last step of
// scripts/test.sh, also runnable alone as root. It builds the test binary
// of snapid/cassandra, fetches Cassandra if needed, installs nftables if
// nft is missing, and enters a network namespace of its own (unshare
// --net, loopback up): the cluster's node 1 takes 127.0.0.1:9042 without
// touching the host's single test node, and the partition rules live in
// the namespace's nftables, gone with it. There it starts
// scripts/cassandra.sh start --nodes 3 --dcs 2 (dc1 = 127.0.0.1 and .3,
// dc2 = 127.0.0.2), runs the cluster tests and the claim latency
// benchmark, and stops every node at the end, also on failure. It fails
// unless each cluster test printed --- PASS, so none can skip there.
//
// The tests find the cluster through EnvNodes, EnvDCs and EnvDir, and skip
// without them (RequireCluster). A Cluster kills a node (Kill: SIGKILL from
// its pid file), starts it again with its data (Start), cuts the storage
// traffic between two data centres (Partition) or a node's client traffic,
// requests or replies (CutClients), and waits until nodes see each other
// up (WaitAllUp) or see a node down (WaitSeesDown). At the end of every
// test it heals, restarts what was killed and waits for the cluster to be
// whole (Restore), also on failure. Test keyspaces put a replica on every
// node (Replication): a quorum survives any one node, and dc1 alone holds
// a quorum while dc2 alone does not.
//
// The tests, in snapid/cassandra: TestClusterNodeFailures (one node of
// three down, then two), TestClusterPartition (the data centres cut apart,
// restarts during the cut, the audit after healing),
// TestClusterLocalSerialSplitBrain (raw claims at LOCAL_SERIAL win on both
// sides of a cut, at SERIAL on one at most),
// TestClusterCoordinatorKilledMidClaim (the outcome of a claim whose
// coordinator is killed is resolved through another node),
// TestClusterNemesis (concurrent claimers while nodes are killed and
// started over and over), TestSequenceTwoDCPartition (sequence numbers
// drawn on both sides of a cut, none twice, each in a range granted to
// its data centre) and BenchmarkClusterClaim (claim latency).
//
// Imports: gocql. May be imported by the tests of cassandra, prometheus,
// cmd/snapctl and examples; never by non-test code.
package testcluster
