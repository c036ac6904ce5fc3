package snapid

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/snapid/snapid/internal/statefile"
)

// The file <counter>.released records that this host released its name
// (Release), so that its processes refuse the name until it is claimed
// again on purpose (WithReclaim): it holds "snapid-released 1", then the
// name, each on a line. It is created before the registry is asked to
// release, so that a release whose outcome is unknown leaves the host
// refusing too, and removed after a claim with WithReclaim succeeded.
const releasedHeader = "snapid-released 1"

// released returns the name this host released, or "" if none.
func (h *hostState) released() (string, error) {
	b, _, err := statefile.ReadSmallOwned(h.releasedPath, false)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", &FileError{Op: "read", Path: h.releasedPath, Err: classifyOpenError(err)}
	}
	header, name, ok := strings.Cut(strings.TrimSuffix(string(b), "\n"), "\n")
	if !ok || header != releasedHeader || ValidateName(name) != nil {
		// Unreadable, but it says the name was released: refuse, as for
		// a readable one, naming the file.
		return "(unreadable)", nil
	}
	return name, nil
}

// markReleased records that name is being released; the caller holds the
// gate and this host has no process using the counter.
func (h *hostState) markReleased(name string) error {
	err := statefile.CreateAtomically(h.fs, h.releasedPath, []byte(releasedHeader+"\n"+name+"\n"), h.mode)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return &FileError{Op: "create", Path: h.releasedPath, Err: err}
	}
	return nil
}

// clearReleased removes the record once the name is claimed again, and
// syncs the directory so that the removal lasts.
func (h *hostState) clearReleased() error {
	if err := h.fs.Remove(h.releasedPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return &FileError{Op: "remove", Path: h.releasedPath, Err: err}
	}
	dir, _ := statefile.SplitPath(h.releasedPath)
	if err := h.fs.SyncDir(dir); err != nil {
		return &FileError{Op: "remove", Path: h.releasedPath, Err: fmt.Errorf("sync directory: %w", err)}
	}
	return nil
}
