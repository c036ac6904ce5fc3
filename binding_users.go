package snapid

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// Root's reading of the other users' own bindings: their homes from the
// system's user database, and one scan of their bindings directories that
// ends with the caller's context (names, node numbers and strides).

// userBindingDir is the bindings directory of a user whose home is home.
func userBindingDir(home string) string {
	return filepath.Join(home, ".local", "state", "snapid", "names")
}

// ownHome returns the effective user's home directory from the system's
// user database, if it exists and belongs to the user (a service user's
// /nonexistent or root-owned home does not: then $XDG_STATE_HOME or $HOME
// is used, as before).
func ownHome(ctx context.Context) (string, bool) {
	u, ok := statefile.ByUID(ctx, uint32(os.Geteuid()))
	if !ok {
		return "", false
	}
	return u.Home, usableHome(u)
}

func usableHome(u statefile.User) bool {
	var st unix.Stat_t
	return filepath.IsAbs(u.Home) && unix.Stat(u.Home, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid == u.Uid
}

// checkUsersBindings refuses, for root binding a name host-wide, a name a
// user of this host bound in its own bindings directory (in its home, see
// bindingDirs) to another counter: both counters would issue the same ids.
// Only bindings owned by that user, in a directory only that user (or
// root) can write, count; they are read without following links or
// blocking. A binding counts while:
//
//   - its counter is a counter file of that user's (a regular file of
//     CounterSize bytes owned by the user): the user issued, or may issue,
//     ids under the name;
//   - or its counter does not exist yet and an Open of that user may be
//     making it: the user's Open holds its bindings lock (<dir>/.lock)
//     from before it links the binding until its counter exists (or it
//     removed the binding again), so root takes that lock, waiting at most
//     until ctx ends and never longer than userLockWait, and reads the
//     binding again under it. A binding whose counter is still absent
//     under the lock was left by an Open that was killed: it does not
//     count.
//
// A binding to anything else (a directory, another user's file, a file
// that is not a counter) or that cannot be parsed does not count. A user
// can so make root's Open of a name fail, naming the user and the file,
// only while it has a counter bound to that name or holds its own lock; it
// cannot make ids repeat. What root cannot read (the user database, a
// user's bindings directory or a binding in it) is an error, never "no
// bindings" (see eachUserDir).
func checkUsersBindings(ctx context.Context, name, counterPath string, o *options) error {
	return eachUserDir(ctx, fmt.Sprintf("the name bindings of the host's users, which root must check before it uses %q", name), counterPath, o,
		func(u statefile.User, dir *statefile.Dir) error {
			return checkUserBinding(ctx, u, dir, name, counterPath)
		})
}

// userLockWait bounds how long root waits for a user's bindings lock (see
// checkUsersBindings): a user's Open holds it for one counter's creation.
var userLockWait = 10 * time.Second

// checkUserBinding judges the binding of name in the user u's directory
// dir for root's counter at counterPath (see checkUsersBindings).
func checkUserBinding(ctx context.Context, u statefile.User, dir *statefile.Dir, name, counterPath string) error {
	path := filepath.Join(dir.Path(), name)
	bound, found, err := userBinding(dir, u, name, counterPath)
	if !found {
		return err
	}
	switch userCounter(bound, u.Uid) {
	case counterAbsent:
		// The user's Open may be between linking the binding and making
		// its counter: decide under its lock.
		lf, err := dir.OpenExisting(bindingLock, u.Uid)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// No lock file: no Open of the user's ever bound a name here
			// (each makes it before it links a binding).
			return nil
		case errors.Is(err, fs.ErrPermission):
			// Root without CAP_DAC_OVERRIDE cannot open the user's 0600
			// lock, and so cannot tell a user's Open making its counter
			// from one that was killed.
			return &FileError{Op: "bind", Path: counterPath, Err: fmt.Errorf(
				"%w: the user %s bound %q to the counter %s (in %s), which does not exist yet, and root cannot open that user's bindings lock "+
					"to tell whether that user's program is making it (%w); try again once it has started, run as root with CAP_DAC_OVERRIDE, "+
					"use another name, or have that user remove %s", ErrNameBound, u.Name, name, bound, path, err, path)}
		case err != nil:
			return nil // not a lock of the user's: no Open of the user's made it
		}
		defer lf.Close()
		lctx, cancel := context.WithTimeout(ctx, userLockWait)
		defer cancel()
		if err := statefile.Lock(lctx, int(lf.Fd()), lf.Name()); err != nil {
			return &FileError{Op: "bind", Path: counterPath, Err: fmt.Errorf(
				"%w: the user %s bound %q to the counter %s (in %s), which does not exist yet, and holds its bindings lock: %w; "+
					"try again once that user's program has started, or use another name", ErrNameBound, u.Name, name, bound, path, lockError(err))}
		}
		if bound, found, err = userBinding(dir, u, name, counterPath); !found {
			return err
		}
		if userCounter(bound, u.Uid) != counterPresent {
			return nil // left by an Open of the user's that was killed
		}
	case counterOther:
		return nil
	}
	return &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
		"%w: the user %s uses %q on this host with the counter %s (recorded in %s), and two counter files under one name issue the same ids; "+
			"use another name, or have that user retire its counter and remove %s", ErrNameBound, u.Name, name, bound, path, path)}
}

// userBinding returns the counter the user u bound name to in dir, if u
// owns a binding there to another counter than counterPath; an error if
// root cannot read the binding (see readUserFile).
func userBinding(dir *statefile.Dir, u statefile.User, name, counterPath string) (string, bool, error) {
	b, ok, err := readUserFile(dir, u, name)
	if !ok {
		return "", false, err
	}
	bound, ok := parseBinding(b)
	if !ok || sameFile(bound, counterPath) {
		return "", false, nil
	}
	return bound, true, nil
}

type userCounterState int

const (
	counterAbsent  userCounterState = iota // nothing at the path
	counterPresent                         // a counter file of the user's
	counterOther                           // something else: does not count
)

// userCounter judges the path a user's binding names, without following a
// link at its last component.
func userCounter(path string, uid uint32) userCounterState {
	var st unix.Stat_t
	err := unix.Lstat(path, &st)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return counterAbsent
	case err != nil:
		// Cannot be seen (an I/O error): counted, as a counter may be there.
		return counterPresent
	case st.Mode&unix.S_IFMT == unix.S_IFREG && st.Uid == uid && st.Size == CounterSize:
		return counterPresent
	}
	return counterOther
}

// withDeadline runs fn and returns its error, or returns when ctx ends
// (fn, stuck in the kernel on a hung file system, is left to finish on its
// own; it must not touch anything the caller uses afterwards).
func withDeadline(ctx context.Context, what string, fn func() error) error {
	if ctx.Done() == nil {
		return fn()
	}
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("snapid: %s: %w", what, ctx.Err())
	}
}

// eachUserDir runs fn on the bindings directory of every user of the host
// but root that has one it can trust (owned by root or that user, not
// writable by others), until fn returns an error, which it returns; what
// names what root is checking, at the file root is about to use (for
// errors).
//
// The users come from the system's user database (statefile.UsersContext),
// and the whole scan (the database, the users' homes, their directories
// and files) ends when ctx does, even if a directory service or a home's
// file system hangs: an error then, never "no users". A home or bindings
// directory that does not exist, or that another user could have written,
// holds no bindings that count; one root cannot reach or read (EACCES: root
// without CAP_DAC_READ_SEARCH, a home on NFS with root_squash; or an I/O
// error) is an error naming the user and the directory (wrapping
// fs.ErrPermission for EACCES): that user may have bound what root is
// about to use.
func eachUserDir(ctx context.Context, what, at string, o *options, fn func(u statefile.User, dir *statefile.Dir) error) error {
	return withDeadline(ctx, "reading "+what, func() error {
		users, err := statefile.UsersContext(ctx)
		if err != nil {
			return &FileError{Op: "bind", Path: at, Err: fmt.Errorf(
				"reading %s: cannot list the host's users: %w; try again once the user database answers", what, err)}
		}
		for _, u := range users {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("snapid: reading %s: %w", what, err)
			}
			if u.Uid == 0 {
				continue
			}
			dir, err := openUserDir(u, o)
			if err != nil {
				return &FileError{Op: "bind", Path: at, Err: fmt.Errorf("reading %s: %w", what, err)}
			}
			if dir == nil {
				continue
			}
			err = fn(u, dir)
			dir.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// openUserDir opens the bindings directory of the user u, for root: nil
// and no error if there is none that counts (no home of the user's own,
// no directory, or one another user could have written), an error if root
// cannot tell (it cannot reach or read the home or the directory).
func openUserDir(u statefile.User, o *options) (*statefile.Dir, error) {
	if !filepath.IsAbs(u.Home) {
		return nil, nil
	}
	var st unix.Stat_t
	switch err := unix.Stat(u.Home, &st); {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return nil, nil // no home: no bindings there
	case err != nil:
		return nil, unreadableUserDir(u, u.Home, err)
	case st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != u.Uid:
		return nil, nil // not a home of the user's own (/nonexistent, /): the user keeps its bindings elsewhere
	}
	path := userBindingDir(u.Home)
	dir, err := statefile.OpenDir(path, statefile.DirOptions{Owners: []uint32{0, u.Uid}, FS: o.fs})
	switch {
	case err == nil:
		return dir, nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR),
		errors.Is(err, statefile.ErrWrongOwner), errors.Is(err, statefile.ErrUnsafeDir), errors.Is(err, statefile.ErrSymlink):
		return nil, nil // no bindings, or none that can be trusted
	}
	return nil, unreadableUserDir(u, path, err)
}

func unreadableUserDir(u statefile.User, path string, err error) error {
	return fmt.Errorf("root cannot read the bindings directory %s of the user %s (%w), so it cannot tell whether that user "+
		"uses the same name, node number or stride with a counter of its own; run as root with CAP_DAC_READ_SEARCH "+
		"(on NFS, homes exported without root_squash), or have that user make the directory readable by root, "+
		"or use a registry, or set SNAPID_BINDING_DIR to one directory that every program of the host uses", path, u.Name, err)
}
