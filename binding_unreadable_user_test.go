package snapid_test

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/statefile"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/require"
)

const envNoDACRoot = "SNAPID_TEST_NODAC_ROOT"

// Root reads every user's bindings before it binds a name host-wide; a
// user's bindings directory root cannot open (EACCES: root without
// CAP_DAC_READ_SEARCH/CAP_DAC_OVERRIDE, a hardened service or a container,
// or homes on NFS with root_squash) is never "no bindings". Here a user
// issued vm-1..3 with its own counter in a 0700 home; root, without those
// capabilities, opens "vm" with another counter: it is refused, with an
// error naming the user and the directory, and issues nothing.
func TestBindingRootRefusesUnreadableUserBindings(t *testing.T) {
	if os.Getenv(envNoDACRoot) != "" {
		noDACRootChild(t)
		return
	}
	requireRoot(t)
	root, home := hostWithNobody(t, "snapid-nodac-")
	zero := EncodeCounter(3) // the user issued vm-1..3
	require.NoError(t, os.WriteFile(filepath.Join(root, "zero"), zero[:], 0o644))
	userCounter := filepath.Join(home, "c.u64")
	names := filepath.Join(home, ".local", "state", "snapid", "names")
	testfs.AsOtherUser(t, "mkdir -p "+names+" && chmod 700 "+filepath.Join(home, ".local", "state", "snapid")+" "+names+
		" && cp "+filepath.Join(root, "zero")+" "+userCounter+
		" && printf 'snapid-binding 1\\n\"%s\"\\n' "+userCounter+" > "+filepath.Join(names, "vm")+
		" && chmod 700 "+home)

	rootCounter := filepath.Join(root, "rootc", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(rootCounter), 0o700))

	// Control: root with its capabilities is refused.
	_, err := Open(rootCounter, "vm")
	require.ErrorIs(t, err, ErrNameBound)

	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search",
		self, "-test.run", "^TestBindingRootRefusesUnreadableUserBindings$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envNoDACRoot+"="+strings.Join([]string{root, home, rootCounter}, ":"))
	out, err := cmd.CombinedOutput()
	t.Logf("root without CAP_DAC_*: %v\n%s", err, out)
	require.NotContains(t, string(out), "NODAC issued vm-1",
		"root, unable to read the user's bindings, took the name: it issues vm-1..3 again (the user issued them)")
	require.Contains(t, string(out), "NODAC refused as expected", "root without CAP_DAC_* must refuse the name, naming the user and the directory")
}

func noDACRootChild(t *testing.T) {
	parts := strings.Split(os.Getenv(envNoDACRoot), ":")
	root, home, rootCounter := parts[0], parts[1], parts[2]
	passwd := filepath.Join(root, "passwd")
	t.Cleanup(statefile.SetUserDatabase(passwd, ""))
	ExportBindingDefaults(t, filepath.Join(root, "hostwide", "names"))
	if _, err := os.ReadDir(home); err == nil {
		t.Fatalf("the child can read %s: capabilities not dropped", home)
	}
	g, err := Open(rootCounter, "vm")
	if err != nil {
		t.Logf("refused: %v", err)
		names := filepath.Join(home, ".local", "state", "snapid", "names")
		if errors.Is(err, fs.ErrPermission) && strings.Contains(err.Error(), "the user nobody") && strings.Contains(err.Error(), names) {
			t.Logf("NODAC refused as expected")
		}
		_, serr := os.Stat(rootCounter)
		require.ErrorIs(t, serr, fs.ErrNotExist, "the refused Open made the counter")
		return
	}
	defer g.Close()
	for i := 0; i < 4; i++ {
		id, err := g.UniqueID()
		require.NoError(t, err)
		t.Logf("NODAC issued %s", id)
	}
}
