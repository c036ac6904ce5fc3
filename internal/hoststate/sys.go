package hoststate

import (
	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// dirFd and chmodAt reach a directory's descriptor through statefile.
func dirFd(d *statefile.Dir) int { return d.Fd() }

func chmodAt(d *statefile.Dir, name string, mode uint32) error {
	return unix.Fchmodat(d.Fd(), name, mode, 0)
}
