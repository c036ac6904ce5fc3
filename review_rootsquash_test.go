package snapid_test

import (
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

const envReviewNoDAC = "SNAPID_REVIEW_NODAC_ROOT"

// Review: root reads every user's bindings before it binds a name
// host-wide; a user's bindings directory root cannot open is skipped as
// "no bindings" (binding.go, eachUserDirOf: `continue // no bindings, or
// none that can be trusted` for any OpenDir error, EACCES included). The
// threat model says a directory that cannot be read is never "no
// bindings" (the user's side refuses every name when root's directory
// cannot be read). Root cannot read a 0700 home when it runs without
// CAP_DAC_READ_SEARCH/CAP_DAC_OVERRIDE (a hardened service, a container)
// or when homes are on NFS with root_squash. Here a user issued vm-1..3
// with its own counter; root, without those capabilities, opens "vm" with
// another counter and is not refused: it issues vm-1..3 again.
func TestReviewRootSkipsUnreadableUserBindings(t *testing.T) {
	if os.Getenv(envReviewNoDAC) != "" {
		reviewNoDACChild(t)
		return
	}
	requireRoot(t)
	root, home := hostWithNobody(t, "snapid-review-nodac-")
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
		self, "-test.run", "^TestReviewRootSkipsUnreadableUserBindings$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envReviewNoDAC+"="+strings.Join([]string{root, home, rootCounter}, ":"))
	out, err := cmd.CombinedOutput()
	t.Logf("root without CAP_DAC_*: %v\n%s", err, out)
	require.NotContains(t, string(out), "REVIEW issued vm-1",
		"root, unable to read the user's bindings, took the name: it issues vm-1..3 again (the user issued them)")
}

func reviewNoDACChild(t *testing.T) {
	parts := strings.Split(os.Getenv(envReviewNoDAC), ":")
	root, home, rootCounter := parts[0], parts[1], parts[2]
	passwd := filepath.Join(root, "passwd")
	_ = home
	t.Cleanup(statefile.SetUserDatabase(passwd, ""))
	ExportBindingDefaults(t, filepath.Join(root, "hostwide", "names"))
	if _, err := os.ReadDir(home); err == nil {
		t.Fatalf("the child can read %s: capabilities not dropped", home)
	}
	g, err := Open(rootCounter, "vm")
	if err != nil {
		t.Logf("REVIEW refused: %v", err)
		return
	}
	defer g.Close()
	for i := 0; i < 4; i++ {
		id, err := g.UniqueID()
		require.NoError(t, err)
		t.Logf("REVIEW issued %s", id)
	}
}
