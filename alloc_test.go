package snapid_test

import (
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
)

// The calls that issue ids allocate no more than the id they return: in
// strict mode one caller's Next allocates nothing and its UniqueID only
// the string; in block mode the same. (Counted with testing.AllocsPerRun,
// which runs the call many times and averages.)
func TestIssuingAllocatesOnlyTheID(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"strict", []Option{WithSync(false)}},
		{"block", []Option{WithBlock(1 << 16)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Open(filepath.Join(t.TempDir(), "counter"), "server_a", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if _, err := g.Next(); err != nil { // warm up
				t.Fatal(err)
			}
			var callErr error
			next := testing.AllocsPerRun(200, func() {
				if _, err := g.Next(); err != nil {
					callErr = err
				}
			})
			id := testing.AllocsPerRun(200, func() {
				if _, err := g.UniqueID(); err != nil {
					callErr = err
				}
			})
			if callErr != nil {
				t.Fatal(callErr)
			}
			if next != 0 {
				t.Errorf("Next allocates %v times per call, want 0", next)
			}
			if id != 1 {
				t.Errorf("UniqueID allocates %v times per call, want 1 (the string)", id)
			}
		})
	}
}
