package snapid_test

import (
	"testing"

	"github.com/snapid/snapid/internal/testfs"
)

// Set-up shared by the tests that put another user (nobody) on the host
// beside root.

// nobody is the uid (and gid) of the other user.
const nobody = 65534

// requireRoot skips (or, under the test command, fails) a test that needs
// root.
func requireRoot(t *testing.T) { t.Helper(); testfs.RequireRoot(t) }
