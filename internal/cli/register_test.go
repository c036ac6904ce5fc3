package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A release the registry did not take says what it left (never "nothing
// was issued", which a release does not do): whether the registry or this
// host changed, and to run it again; run again, it finishes.
func TestReleaseFailedSaysWhatIsLeft(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fail    func(reg *registrytest.Registry) // makes the registry fail, until undone
		undo    func(reg *registrytest.Registry)
		force   bool
		want    []string
		refused bool // this host's programs refuse the name after the failure
	}{
		{"registry down", func(reg *registrytest.Registry) { reg.SetDown(true) }, func(reg *registrytest.Registry) { reg.SetDown(false) }, false,
			[]string{`"web_1" was not released: nothing was changed, in the registry or on this host`, "run 'snapctl release' again"}, false},
		{"the release itself failed", func(reg *registrytest.Registry) {
			reg.SetHook(func(_ context.Context, op, _ string) error {
				if op == "release" {
					return fmt.Errorf("%w: timed out", registry.ErrRegistry)
				}
				return nil
			})
		}, func(reg *registrytest.Registry) { reg.SetHook(nil) }, false,
			[]string{`"web_1" was not released in the registry, unless the failure came as the release was sent`, "'snapctl names' shows which",
				"this host already records it as released, so its programs refuse it", "run 'snapctl release' again", "'snapctl register' to keep the name here"}, true},
		{"--force, registry down", func(reg *registrytest.Registry) { reg.SetDown(true) }, func(reg *registrytest.Registry) { reg.SetDown(false) }, true,
			[]string{`"web_1" was not released, unless the failure came as the release was sent`, "nothing was changed on this host", "--force --start"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeEnv(t)
			reg := registrytest.NewRegistry()
			f.inproc = &InProcess{Registry: reg}
			path := filepath.Join(t.TempDir(), "counter.u64")
			f.vars["SNAPID_NAME"], f.vars["SNAPID_COUNTER"] = "web_1", path
			r := f.run(t, "register")
			require.Equal(t, exitOK, r.code, r.stderr)
			args := []string{"release"}
			if tc.force {
				args = []string{"release", "--force", "--start", "10"}
				delete(f.vars, "SNAPID_COUNTER")
			}
			tc.fail(reg)
			line := requireError(t, f.run(t, args...))
			assert.NotContains(t, line, "nothing was issued")
			for _, w := range tc.want {
				assert.Contains(t, line, w)
			}
			row, _ := reg.Row("web_1")
			assert.Equal(t, registry.StateActive, row.State, "the registry still holds the name")
			f.vars["SNAPID_COUNTER"] = path
			r = f.run(t, "next", "--no-registry")
			if tc.refused {
				assert.Contains(t, requireError(t, r), "released on this host")
			} else {
				require.Equal(t, exitOK, r.code, "the host's programs go on using the name: %s", r.stderr)
			}
			delete(f.vars, "SNAPID_COUNTER")
			if !tc.force {
				f.vars["SNAPID_COUNTER"] = path
			}
			tc.undo(reg)
			r = f.run(t, args...)
			require.Equal(t, exitOK, r.code, "run again, the release finishes: %s", r.stderr)
			row, _ = reg.Row("web_1")
			assert.Equal(t, registry.StateReleased, row.State)
		})
	}
	// Cassandra unreachable: the same.
	f := newFakeEnv(t)
	f.vars["SNAPID_NAME"], f.vars["SNAPID_COUNTER"] = "web_1", filepath.Join(t.TempDir(), "counter.u64")
	r := f.run(t, "next")
	require.Equal(t, exitOK, r.code, r.stderr)
	line := requireError(t, f.run(t, "release", "--cassandra", "127.0.0.1:1"))
	assert.Contains(t, line, "check that Cassandra is reachable")
	assert.Contains(t, line, `"web_1" was not released: nothing was changed, in the registry or on this host`)
	assert.NotContains(t, line, "nothing was issued")
}
