package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/statefile"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordingIO is the real file system and I/O, recording which files it
// wrote.
type recordingIO struct {
	statefile.OS
	mu      sync.Mutex
	written map[string]int
}

func (r *recordingIO) ReadAt(f *os.File, b []byte, off int64) (int, error) { return f.ReadAt(b, off) }
func (r *recordingIO) Sync(f *os.File) error                               { return f.Sync() }
func (r *recordingIO) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	r.mu.Lock()
	r.written[filepath.Base(f.Name())]++
	r.mu.Unlock()
	return f.WriteAt(b, off)
}

// The mark and heartbeat files are written through the file-system seam
// when it does file I/O (as the simulator's disk does), so that a fault or
// a power cut injected there reaches them; the counter's own I/O seam
// stays the counter's.
func TestMarkAndHeartbeatGoThroughTheIOSeam(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "counter")
	io := &recordingIO{written: map[string]int{}}
	g, err := OpenContext(context.Background(), path, "seam_node", WithRegistry(registrytest.NewRegistry()),
		WithBindingDir(t.TempDir()), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}), ExportWithFileFS(io))
	require.NoError(t, err)
	_, err = g.UniqueID()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	io.mu.Lock()
	defer io.mu.Unlock()
	var names []string
	for n := range io.written {
		names = append(names, n)
	}
	joined := strings.Join(names, " ")
	assert.Contains(t, io.written, "counter.mark", "files written through the seam: %s", joined)
	assert.Contains(t, io.written, "counter.heartbeat", "files written through the seam: %s", joined)
	assert.NotContains(t, io.written, "counter", "the counter's writes go through its own I/O seam: %s", joined)
}
