package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A Repair to a value above every number issued, while a process without
// a registry runs with sync off, lowers the record's mark under it: the
// process writes the record again before it goes past that mark, so that
// after a power cut (its unsynced counter writes lost) the next Open
// raises the counter above every number handed out. The same run without
// the Repair is the control.
func TestRecordRepairUnderARunningProcessWithSyncOff(t *testing.T) {
	t.Parallel()
	for _, repair := range []bool{false, true} {
		t.Run(map[bool]string{false: "no repair", true: "repair"}[repair], func(t *testing.T) { repairThenPowerCut(t, repair) })
	}
}

func repairThenPowerCut(t *testing.T, repair bool) {
	dir := t.TempDir()
	path := filepath.Join(dir, "counter.u64")
	x := &ctFaultIO{}
	g, err := Open(path, "web_1", WithSync(false), withIO(x))
	require.NoError(t, err)
	seen := map[uint64]bool{}
	for range 100 {
		n, err := g.Next()
		require.NoError(t, err)
		seen[n] = true
	}
	// The operator repairs the counter to its own value (next = 101): no
	// number is lowered below what was issued.
	durable := uint64(0)
	if repair {
		_, err = Repair(path, 101)
		require.NoError(t, err)
		durable = 100 // Rewrite synced 100
	}
	durable = max(durable, x.durable.Load())
	_, s0 := x.counts()
	for range 500 {
		n, err := g.Next()
		require.NoError(t, err)
		require.False(t, seen[n])
		seen[n] = true
	}
	_, s1 := x.counts()
	durable = max(durable, x.durable.Load())
	t.Logf("syncs by the running process after the repair: %d; durable counter: %d", s1-s0, durable)
	// Power cut: the process dies (no clean close), the counter file holds
	// what was last synced; the record (always synced) stays as written.
	g.file.Close()
	g.host.h.Close()
	g.host.p.Close()
	b := EncodeCounter(durable)
	require.NoError(t, os.WriteFile(path, b[:], 0o600))
	g2, err := Open(path, "web_1")
	require.NoError(t, err)
	defer g2.Close()
	dups := 0
	for range 100 {
		n, err := g2.Next()
		require.NoError(t, err)
		if seen[n] {
			dups++
		}
	}
	if dups > 0 {
		t.Errorf("after the power cut, %d of 100 numbers were handed out again", dups)
	}
}
