package statefile

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckCreatable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	longest := strings.Repeat("n", nameMax-tempNameExtra)
	require.NoError(t, CheckCreatable(filepath.Join(dir, longest)))
	require.NoError(t, CreateAtomically(OS{}, filepath.Join(dir, longest), nil, 0o600), "the longest name CheckCreatable takes is made")
	// One byte longer is refused: its temporary name could pass 255 bytes
	// (whether it does depends on the random digits os.CreateTemp picks).
	err := CheckCreatable(filepath.Join(dir, longest+"n"))
	require.ErrorIs(t, err, syscall.ENAMETOOLONG)
	// A name whose temporary name passes 255 bytes whatever the digits
	// cannot be made.
	require.Error(t, CreateAtomically(OS{}, filepath.Join(dir, strings.Repeat("n", nameMax-len(".")-len(".tmp-"))), nil, 0o600))
}
