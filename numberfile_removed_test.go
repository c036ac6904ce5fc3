package snapid_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/snapidtest"
	"github.com/stretchr/testify/require"
)

// Review: the registry gave "vm" node number 1 and "web" (another host)
// node number 2. On vm's host the registry is down and the operator opens
// vm's counter without it, giving a node number. With <counter>.number in
// place, a number other than the registry's is refused (ErrNumberMismatch,
// useRecordedNumber). With <counter>.number removed (a seam the docs say
// the form history survives), useRecordedNumber returns nil on "no file"
// and nothing else checks: neither the host's number binding (which
// records "node number 1 goes with vm and this counter") nor the form
// history (which records "decimal 1"). vm's counter then hands out web's
// decimal ids.
func TestReviewNumberFileRemovedLetsStandaloneTakeAnotherNamesNumber(t *testing.T) {
	reg := snapidtest.NewRegistry()
	dirA, vmCounter := ctPath(t)
	bindA := filepath.Join(dirA, "names")
	_, webCounter := ctPath(t)

	vm := openReg(t, vmCounter, "vm", reg, WithFormat(FormatDecimal), WithBindingDir(bindA))
	_, vmNum, _ := vm.Form()
	vmIDs := map[string]bool{}
	for i := 0; i < 3; i++ {
		id, err := vm.UniqueID()
		require.NoError(t, err)
		vmIDs[id] = true
	}
	require.NoError(t, vm.Close())

	web := openReg(t, webCounter, "web", reg, WithFormat(FormatDecimal), WithBindingDir(""),
		WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}))
	_, webNum, _ := web.Form()
	require.NotEqual(t, vmNum, webNum)
	webIDs := map[string]bool{}
	for i := 0; i < 50; i++ {
		id, err := web.UniqueID()
		require.NoError(t, err)
		webIDs[id] = true
	}
	require.NoError(t, web.Close())

	for _, removed := range []bool{false, true} {
		if removed {
			require.NoError(t, os.Remove(vmCounter+".number"))
		}
		g, err := Open(vmCounter, "vm", WithBindingDir(bindA), WithSync(false),
			WithFormat(FormatDecimal), WithNodeNumber(webNum))
		if !removed {
			require.ErrorIs(t, err, ErrNumberMismatch, "control: the number file refuses web's number")
			continue
		}
		if err != nil {
			t.Logf("refused: %v", err)
			return
		}
		var dups []string
		for i := 0; i < 20; i++ {
			id, err := g.UniqueID()
			require.NoError(t, err)
			if webIDs[id] {
				dups = append(dups, id)
			}
		}
		require.NoError(t, g.Close())
		require.Empty(t, dups, "vm (registry number %d) handed out web's decimal ids (number %d) once its .number file was removed", vmNum, webNum)
	}
}
