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
	err := CheckCreatable(filepath.Join(dir, longest+"n"))
	require.ErrorIs(t, err, syscall.ENAMETOOLONG)
	require.Error(t, CreateAtomically(OS{}, filepath.Join(dir, longest+"n"), nil, 0o600), "one byte longer cannot be made")
}
