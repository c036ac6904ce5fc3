package snapid_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/snapidtest"
	"github.com/stretchr/testify/require"
)

// The registry gave "vm" node number 1 and "web" (another host) node
// number 2. vm's counter is then opened without the registry, with its
// <counter>.number in place and removed: the form history beside the
// counter records the number the registry gave vm, so either way
// WithNodeNumber(2) for vm is refused (ErrNumberMismatch) and nothing is
// issued (vm handing out 2.4, 2.5, … would repeat web's ids), an Open
// giving no number takes vm's, and another name is refused vm's number.
func TestNumberFileRemovedFormHistoryKeepsRegistryNumber(t *testing.T) {
	reg := snapidtest.NewRegistry()
	dirA, vmCounter := ctPath(t)
	bindA := filepath.Join(dirA, "names")
	_, webCounter := ctPath(t)

	vm := openReg(t, vmCounter, "vm", reg, WithFormat(FormatDecimal), WithBindingDir(bindA))
	_, vmNum, _ := vm.Form()
	for i := 0; i < 3; i++ {
		_, err := vm.UniqueID()
		require.NoError(t, err)
	}
	require.NoError(t, vm.Close())

	web := openReg(t, webCounter, "web", reg, WithFormat(FormatDecimal),
		WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()))
	_, webNum, _ := web.Form()
	require.NotEqual(t, vmNum, webNum)
	require.NoError(t, web.Close())

	counterBytes := func() []byte {
		b, err := os.ReadFile(vmCounter)
		require.NoError(t, err)
		return b
	}
	for _, removed := range []bool{false, true} {
		if removed {
			require.NoError(t, os.Remove(vmCounter+".number"))
		}
		before := counterBytes()
		_, err := Open(vmCounter, "vm", WithBindingDir(bindA), WithSync(false),
			WithFormat(FormatDecimal), WithNodeNumber(webNum))
		require.ErrorIs(t, err, ErrNumberMismatch, "number file removed: %v: web's number taken for vm", removed)
		t.Logf("%v", err)
		require.Equal(t, before, counterBytes(), "a refused Open changed the counter")

		_, err = Open(vmCounter, "db", WithBindingDir(bindA), WithSync(false),
			WithFormat(FormatDecimal), WithNodeNumber(vmNum))
		require.ErrorIs(t, err, ErrNumberMismatch, "number file removed: %v: vm's number taken for another name", removed)
	}

	// Without a number given, the numeric form takes vm's.
	g, err := Open(vmCounter, "vm", WithBindingDir(bindA), WithSync(false), WithFormat(FormatDecimal))
	require.NoError(t, err)
	defer g.Close()
	_, n, _ := g.Form()
	require.Equal(t, vmNum, n)
	id, err := g.UniqueID()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(id, fmt.Sprintf("%d.", vmNum)), "id %s does not carry vm's number %d", id, vmNum)
}
