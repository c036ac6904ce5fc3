package admin

import (
	"io/fs"
	"log/slog"

	"github.com/snapid/snapid/internal/engine"
)

// An Option configures the calls of this package that act on a counter
// file and the files beside it.
type Option = engine.Option

// WithBindingDir names the place of the host's records of node names (by
// default $SNAPID_BINDING_DIR if set, else /var/lib/snapid/records): an
// absolute path. Give the one the host's programs use.
func WithBindingDir(dir string) Option { return engine.WithBindingDir(dir) }

// WithFileMode sets the permission bits of a counter file Init or Repair
// creates, and of the files beside it (default 0600). It has no effect on
// an existing file. The owner must be able to read and write (0600 at
// least).
func WithFileMode(mode fs.FileMode) Option { return engine.WithFileMode(mode) }

// WithFollowSymlinks lets the counter path be a symbolic link. By default a
// symbolic link at the counter path is refused with snapid.ErrUntrusted, so
// that a link planted there cannot redirect writes to another file.
func WithFollowSymlinks(on bool) Option { return engine.WithFollowSymlinks(on) }

// WithLogger sets the logger for notices (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return engine.WithLogger(l) }

// WithOwner makes Init and Repair give the counter file to the user uid
// and the group gid (-1 leaves one unchanged; changing the user needs
// root): an administrator running as root makes the counter of a service
// that runs as another user. The file is given through the descriptor
// Init or Repair opened, checked and locked, right after checking again
// on that descriptor that it is a regular file with one name whose owner
// is trusted, never by path: a user who can rename entries in the
// counter's directory cannot have another file (a hard link to a file of
// root's) given away in its place. The other calls refuse it
// (snapid.ErrInvalidOption).
func WithOwner(uid, gid int) Option { return engine.WithOwner(uid, gid) }
