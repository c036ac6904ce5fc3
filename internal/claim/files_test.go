package claim

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/internal/statefile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RemoveMade removes only the files beside the counter that this
// OpenFiles made, and a process that opened them and waits for the gate
// meanwhile is refused when it gets it (ErrReplaced, naming the
// counter), instead of holding a gate and a mark no other process sees.
func TestRemoveMadeLeavesWhatWasThere(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		before []string // suffixes there before
		kept   []string // suffixes left after RemoveMade
	}{
		{"nothing there before", nil, nil},
		{"the presence file there before", []string{PresenceSuffix}, []string{PresenceSuffix}},
		{"all there before", []string{OwnerSuffix, MarkSuffix, PresenceSuffix}, []string{MarkSuffix, OwnerSuffix, PresenceSuffix}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "counter.u64")
			for _, suffix := range tc.before {
				content := ""
				if suffix == OwnerSuffix {
					content = owner + "\n"
				}
				require.NoError(t, os.WriteFile(path+suffix, []byte(content), 0o600))
			}
			o := FileOptions{FS: statefile.OS{}, Mode: 0o600}
			first, err := OpenFiles(path, o)
			require.NoError(t, err)
			waiting, err := OpenFiles(path, o)
			require.NoError(t, err)
			defer waiting.Close()

			require.NoError(t, first.LockGate(context.Background()))
			// The other process waits for the gate, on the owner file it
			// opened, while the first removes what it made.
			done := make(chan error, 1)
			go func() { done <- waiting.LockGate(context.Background()) }()
			require.Eventually(t, func() bool { return openCount(t, path+OwnerSuffix) == 2 }, 10*time.Second, time.Millisecond)
			first.RemoveMade(slog.New(slog.DiscardHandler))
			var want []string
			for _, suffix := range tc.kept {
				want = append(want, "counter.u64"+suffix)
			}
			ents, err := os.ReadDir(dir)
			require.NoError(t, err)
			var got []string
			for _, e := range ents {
				got = append(got, e.Name())
			}
			slices.Sort(got)
			assert.Equal(t, want, got)
			require.NoError(t, first.Close())

			err = <-done
			if slices.Contains(tc.kept, OwnerSuffix) && slices.Contains(tc.kept, MarkSuffix) {
				require.NoError(t, err, "the files it opened are still there")
				require.NoError(t, waiting.Gate().Unlock())
				return
			}
			require.ErrorIs(t, err, errs.ErrReplaced)
			assert.Contains(t, err.Error(), path)
			assert.False(t, waiting.Gate().Locked(), "a refused gate is let go")
		})
	}
}

// openCount is how many descriptors of this process are open on path.
func openCount(t *testing.T, path string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && (target == path || target == path+" (deleted)") {
			n++
		}
	}
	return n
}

// A damaged file beside the counter is refused with an error naming the
// counter, and the file as detail; the FileError's Path is the file.
func TestOpenFilesErrorsNameTheCounter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		suffix string
		plant  func(path string) error
		want   string
	}{
		{OwnerSuffix, func(p string) error { return os.WriteFile(p, []byte("abc"), 0o600) }, ": counter.u64.owner: corrupt owner token file"},
		{MarkSuffix, func(p string) error { return os.Mkdir(p, 0o700) }, ": counter.u64.mark: not a regular file"},
		{PresenceSuffix, func(p string) error { return os.Mkdir(p, 0o700) }, ": counter.u64.presence: not a regular file"},
	} {
		t.Run(tc.suffix, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "counter.u64")
			require.NoError(t, tc.plant(path+tc.suffix))
			_, err := OpenFiles(path, FileOptions{FS: statefile.OS{}, Mode: 0o600})
			require.Error(t, err)
			assert.Contains(t, err.Error(), path+tc.want)
			var fe *errs.FileError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, path+tc.suffix, fe.Path)
		})
	}
}
