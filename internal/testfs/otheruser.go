package testfs

import (
	"os"
	"os/exec"
	"testing"
)

// OtherUID is the user the multi-user tests play another local user with.
const OtherUID = 65534

// AsOtherUser runs a shell script as uid OtherUID (setpriv(1); the test
// must run as root) and fails the test if it fails, with its output.
func AsOtherUser(t testing.TB, script string) {
	t.Helper()
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("as uid %d: %s: %v\n%s", OtherUID, script, err, out)
	}
}

// SharedTempDir returns a new directory, mode 0755, that another user can
// reach (t.TempDir's parents are 0700), removed when the test ends.
func SharedTempDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// RequireRoot skips t unless it runs as root, and fails it instead when
// SNAPID_REQUIRE_ROOT is set (the test command sets it: the tests of what
// other users can do need root to run programs as another user, and must
// not pass by being skipped).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("SNAPID_REQUIRE_ROOT") != "" {
		t.Fatalf("this test needs root (it runs programs as another user, uid %d), and SNAPID_REQUIRE_ROOT is set: run the tests as root", OtherUID)
	}
	t.Skip("needs root (to run programs as another user); SNAPID_REQUIRE_ROOT=1 makes this a failure")
}
