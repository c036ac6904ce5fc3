package admin

import (
	"path/filepath"
	"testing"

	"github.com/snapid/snapid/internal/docdefaults"
)

// TestDocsDefaults compares the audit's rows of docs/reference/defaults.md
// with the defaults the audit uses.
func TestDocsDefaults(t *testing.T) {
	docdefaults.Check(t, filepath.Join("..", docdefaults.Path), "admin.", map[string]string{
		"admin.stale":      docdefaults.Duration(DefaultStale),
		"admin.clock-skew": docdefaults.Duration(DefaultClockSkew),
	})
}
