package testfs

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// HoldFlock has another process hold a shared flock on path for up to 20
// seconds (until the test ends): as uid 65534 when the test runs as root
// (so path must be readable to that user), else as this user. It returns
// once /proc/locks shows the lock held. It needs flock(1), and setpriv(1)
// as root; the test fails without them.
func HoldFlock(t testing.TB, path string) {
	t.Helper()
	HoldFlockCancel(t, path)
}

// HoldFlockCancel is HoldFlock, and returns a function that ends the
// holder (and so its lock) and waits for it.
func HoldFlockCancel(t testing.TB, path string) (release func()) {
	t.Helper()
	args := []string{"flock", "--shared", "--close", path, "sleep", "20"}
	if os.Geteuid() == 0 {
		args = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, args...)
	}
	holder := exec.Command(args[0], args[1:]...)
	if err := holder.Start(); err != nil {
		t.Fatalf("starting a holder of %s: %v", path, err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = holder.Process.Kill(); _ = holder.Wait() }) }
	t.Cleanup(release)
	pid := strconv.Itoa(holder.Process.Pid)
	for range 200 {
		b, _ := os.ReadFile("/proc/locks")
		for _, f := range strings.Fields(string(b)) {
			if f == pid {
				return release
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the holder of %s never took its lock", path)
	return release
}
