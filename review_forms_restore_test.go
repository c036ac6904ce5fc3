package snapid_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/stretchr/testify/require"
)

// Review: the form history must remember every striped form a counter
// issued under ("A counter remembers every form ... and never issues an id
// it could have issued under an earlier one"). A primary copy
// <counter>.forms restored from a backup (valid checksum, older content)
// wins over the newer <counter>.forms.copy: read() returns the primary
// whenever it decodes, and "repairs" the copy from it. The later striped
// form is forgotten and a return to the earlier form is not raised above
// it: the same integer id is handed out twice by one counter.
func TestReviewFormsPrimaryRestoredFromBackupRepeatsStripedID(t *testing.T) {
	for _, restore := range []bool{false, true} {
		name := map[bool]string{false: "control", true: "primary restored"}[restore]
		t.Run(name, func(t *testing.T) {
			dir, path := ctPath(t)
			bind := filepath.Join(dir, "names")
			open := func(stride, node uint64) *Generator {
				t.Helper()
				// The host changes its stride: the operator removes the
				// host's .stride binding (the history is what protects
				// the counter, "whatever told the host the stride").
				_ = os.Remove(filepath.Join(bind, ".stride"))
				g, err := Open(path, "vm", WithBindingDir(bind), WithSync(false),
					WithFormat(FormatStriped), WithStride(stride), WithNodeNumber(node))
				require.NoError(t, err)
				return g
			}
			seen := map[uint64]string{}
			take := func(g *Generator, n int, phase string) (dups []uint64) {
				for i := 0; i < n; i++ {
					v, err := g.UniqueUint64()
					require.NoError(t, err)
					if _, ok := seen[v]; ok {
						dups = append(dups, v)
					}
					seen[v] = phase
				}
				return dups
			}

			// Phase A: stride 10, node 1.
			g := open(10, 1)
			require.Empty(t, take(g, 5, "A"))
			require.NoError(t, g.Close())
			backup, err := os.ReadFile(path + ".forms")
			require.NoError(t, err)

			// Phase B: stride 100, node 11 (recorded, counter raised if needed).
			g = open(100, 11)
			require.Empty(t, take(g, 20, "B"))
			require.NoError(t, g.Close())

			if restore {
				// Only the primary copy restored from the backup taken after A.
				require.NoError(t, os.WriteFile(path+".forms", backup, 0o644))
			}

			// Phase C: back to stride 10, node 1.
			g = open(10, 1)
			dups := take(g, 100, "C")
			require.NoError(t, g.Close())
			require.Empty(t, dups, "ids handed out twice by one counter (x*10+1 == y*100+11)")
		})
	}
}
