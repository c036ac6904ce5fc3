package snapid_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/stretchr/testify/require"
)

// The form history remembers every striped form a counter issued under,
// whichever copy an operator restores from a backup: stride 10 node 1,
// a backup of the history, stride 100 node 11 (raised past stride 10's
// ids), then one copy put back from the backup (valid, older, recording
// stride 10 node 1 as the form in use), then stride 10 node 1 again. The
// other copy still records stride 100 node 11, and the return to stride
// 10 starts above its ids: without that, 611 (61×10+1 = 6×100+11) and
// its like would be handed out twice by one counter. Each form's
// #stride entry of the records' place is removed first, as an operator changing a host's
// stride does.
func TestFormHistoryCopyRestoredFromBackup(t *testing.T) {
	for _, restore := range []string{"none", ".forms", ".forms.copy"} {
		t.Run(restore, func(t *testing.T) {
			dir, path := ctPath(t)
			bind := filepath.Join(dir, "names")
			open := func(stride, node uint64) *Generator {
				t.Helper()
				require.NoError(t, os.RemoveAll(filepath.Join(bind, "#stride")))
				g, err := Open(path, "vm", WithBindingDir(bind), WithSync(false),
					WithFormat(FormatStriped), WithStride(stride), WithNodeNumber(node))
				require.NoError(t, err)
				return g
			}
			seen := map[uint64]string{}
			take := func(g *Generator, n int, phase string) {
				t.Helper()
				for i := 0; i < n; i++ {
					v, err := g.UniqueUint64()
					require.NoError(t, err)
					if was, ok := seen[v]; ok {
						t.Fatalf("id %d handed out twice by one counter (in phase %s and %s)", v, was, phase)
					}
					seen[v] = phase
				}
				require.NoError(t, g.Close())
			}
			take(open(10, 1), 5, "stride 10 node 1")
			backup := map[string][]byte{}
			for _, suffix := range []string{".forms", ".forms.copy"} {
				b, err := os.ReadFile(path + suffix)
				require.NoError(t, err)
				backup[suffix] = b
			}
			take(open(100, 11), 20, "stride 100 node 11")
			if restore != "none" {
				require.NoError(t, os.WriteFile(path+restore, backup[restore], 0o644))
			}
			take(open(10, 1), 100, "stride 10 node 1 again")
			// The copies agree again, and record both forms.
			a, err := os.ReadFile(path + ".forms")
			require.NoError(t, err)
			b, err := os.ReadFile(path + ".forms.copy")
			require.NoError(t, err)
			require.Equal(t, string(a), string(b), "the copies were not made to agree")
			require.Contains(t, string(a), "striped 100 11 ")
			require.Contains(t, string(a), "striped 10 1 current")
		})
	}
}
