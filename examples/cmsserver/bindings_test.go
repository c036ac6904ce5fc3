package main

import (
	"os"
	"testing"

	"github.com/snapid/snapid/internal/testfs"
)

// TestMain keeps the name bindings of this package's test counters (see
// /var/lib/snapid/records) in a directory of this run, not the host's.
func TestMain(m *testing.M) {
	os.Exit(testfs.RunWithOwnBindings(m))
}
