package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/cli"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// envRunMain makes the test binary run snapctl's main with the
// space-separated arguments it holds (see init).
const envRunMain = "SNAPCTL_TEST_RUN_MAIN"

func init() {
	if args := os.Getenv(envRunMain); args != "" {
		os.Args = append([]string{"snapctl"}, strings.Fields(args)...)
		main()
	}
}

// SIGTERM and SIGINT end a snapctl that waits for a lock another process
// holds on the counter, at once, with 128+signal and no id printed; the
// --timeout bounds the same wait without a signal, naming the holder.
func TestSignalEndsWaitingSnapctl(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, 0} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			counter := filepath.Join(dir, "c.u64")
			require.NoError(t, os.WriteFile(counter, make([]byte, 8), 0o600))
			f, err := os.Open(counter)
			require.NoError(t, err)
			defer f.Close()
			require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX)) // another process's lock, as seen by the child

			timeout := "60s"
			if sig == 0 {
				timeout = "300ms"
			}
			cmd := exec.Command(self, "-test.run", "^$")
			cmd.Env = append(os.Environ(), envRunMain+"=next --counter "+counter+" --name vm --timeout "+timeout)
			var out, errOut strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errOut
			require.NoError(t, cmd.Start())
			time.Sleep(300 * time.Millisecond) // it is waiting for the lock
			start := time.Now()
			if sig != 0 {
				require.NoError(t, cmd.Process.Signal(sig))
			}
			err = cmd.Wait()
			assert.Less(t, time.Since(start), 3*time.Second, "it ended at once")
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "stderr: %s", errOut.String())
			if sig != 0 {
				assert.Equal(t, 128+int(sig), exit.ExitCode(), "stderr: %s", errOut.String())
			} else {
				assert.Equal(t, cli.ExitFailure, exit.ExitCode())
				assert.Contains(t, errOut.String(), "pid ", "the holder is named")
			}
			assert.Empty(t, out.String(), "no id printed")
		})
	}
}
