package snapid

import "github.com/snapid/snapid/internal/statefile"

// ExportWithFileFS replaces the file-system seam with one that also does
// file I/O (the mark and heartbeat files' reads and writes go through it).
func ExportWithFileFS(x interface {
	statefile.FS
	fileIO
}) Option {
	return withFS(x)
}
