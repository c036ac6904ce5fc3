package cli

import (
	"fmt"
	"testing"

	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/assert"
)

// A host list that cannot be parsed (a port out of range, a bracket left
// open) is bad input like a blank one: every command that reads it refuses
// it with exit status 2 before anything is made, status too (not as an
// item needing attention, as if the registry had been unreachable).
func TestMalformedRegistryHostsRefused(t *testing.T) {
	t.Parallel()
	commands := [][]string{{"next"}, {"register"}, {"release"}, {"status"}, {"names"}, {"check-names"},
		{"seq", "next", "s1"}, {"seq", "create", "s1"}, {"seq", "show", "s1"}}
	for _, hosts := range []string{"db1:0", "db1:99999", "db1:x", "[::1"} {
		for _, cmd := range commands {
			t.Run(fmt.Sprintf("%q %s", hosts, cmd), func(t *testing.T) {
				t.Parallel()
				f := newFakeEnv(t)
				f.vars["SNAPID_NAME"] = "web_1"
				f.vars["SNAPID_CASSANDRA"] = hosts
				home, bind := testfs.Snapshot(t, f.home), testfs.Snapshot(t, f.vars["SNAPID_BINDING_DIR"])
				res := f.run(t, append(append([]string{}, cmd...), "--timeout", "2s")...)
				assert.Equal(t, 2, res.code, "stdout %s\nstderr %s", res.stdout, res.stderr)
				assert.Equal(t, home, testfs.Snapshot(t, f.home), "nothing made")
				assert.Equal(t, bind, testfs.Snapshot(t, f.vars["SNAPID_BINDING_DIR"]), "nothing bound")
			})
		}
	}
}
