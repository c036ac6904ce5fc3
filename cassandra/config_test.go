package cassandra

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/snapid/snapid/internal/docdefaults"
)

// TestDocsDefaults compares the registry adapter's rows of
// docs/reference/defaults.md (the one table every doc quoting a default
// links to) with the adapter's defaults.
func TestDocsDefaults(t *testing.T) {
	docdefaults.Check(t, filepath.Join("..", docdefaults.Path), "cassandra.", map[string]string{
		"cassandra.keyspace":         DefaultKeyspace,
		"cassandra.timeout":          docdefaults.Duration(DefaultTimeout),
		"cassandra.port":             fmt.Sprint(DefaultPort),
		"cassandra.read-retry-waits": docdefaults.Short(readRetryBase) + " to " + docdefaults.Short(readRetryCap),
	})
}
