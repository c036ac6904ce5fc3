package testcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dataDir is node i's data directory: sstables, commit log, hints, saved
// caches (scripts/cassandra.sh's DATA_DIR).
func (c *Cluster) dataDir(i int) string {
	return filepath.Join(c.dir, fmt.Sprintf("node%d", i), "data")
}

// SnapshotNode kills node i, copies everything it keeps on disk aside, and
// starts it again: a snapshot of the whole node, as a virtual machine's or
// a file system's would be. The returned restore kills node i, puts the
// copy back in place of its data and starts it: the node restored from
// that older snapshot. Both wait until every node sees every other up.
func (c *Cluster) SnapshotNode(tb testing.TB, i int) (restore func()) {
	tb.Helper()
	snap := filepath.Join(tb.TempDir(), fmt.Sprintf("node%d-data", i))
	c.Kill(tb, i)
	if out, err := exec.Command("cp", "-a", c.dataDir(i), snap).CombinedOutput(); err != nil {
		tb.Fatalf("copy node %d's data: %v\n%s", i, err, out)
	}
	c.startAndWait(tb, i)
	return func() {
		tb.Helper()
		c.Kill(tb, i)
		if err := os.RemoveAll(c.dataDir(i)); err != nil {
			tb.Fatalf("remove node %d's data: %v", i, err)
		}
		if out, err := exec.Command("cp", "-a", snap, c.dataDir(i)).CombinedOutput(); err != nil {
			tb.Fatalf("put node %d's snapshot back: %v\n%s", i, err, out)
		}
		c.startAndWait(tb, i)
	}
}

// LoseTable kills node i, removes the files of table ks.table from its
// data directory and its whole commit log (which would otherwise replay
// the table's latest writes): a disk holding them lost, or a table lost
// with the commit log's last seconds. It starts the node again and waits
// until every node sees every other up.
func (c *Cluster) LoseTable(tb testing.TB, i int, ks, table string) {
	tb.Helper()
	c.Kill(tb, i)
	dirs, err := filepath.Glob(filepath.Join(c.dataDir(i), "data", ks, table+"-*"))
	if err != nil || len(dirs) == 0 {
		tb.Fatalf("node %d has no files of table %s.%s (%v)", i, ks, table, err)
	}
	for _, d := range append(dirs, filepath.Join(c.dataDir(i), "commitlog")) {
		if !strings.HasPrefix(d, c.dir) {
			tb.Fatalf("%s is outside the cluster's directory", d)
		}
		if err := os.RemoveAll(d); err != nil {
			tb.Fatalf("remove %s: %v", d, err)
		}
	}
	c.startAndWait(tb, i)
}

func (c *Cluster) startAndWait(tb testing.TB, i int) {
	tb.Helper()
	if !c.Start(tb, i) {
		tb.FailNow()
	}
	c.WaitAllUp(tb)
}
