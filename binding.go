package snapid

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// Name bindings: on one host, one node name goes with one counter file.
// Two counter files under one name issue the same ids (name-1 from each),
// and without a registry nothing else can tell. So Open without a registry
// records which counter file each name is used with (<dir>/<name>: the
// line "snapid-binding 1", then the counter's absolute path quoted as a Go
// string, each ending in a newline), and refuses the name with another
// counter file while that file exists (ErrNameBound). A binding whose
// counter file is gone is taken over. With a registry, the registry
// refuses a second counter file (its owner token differs), so no binding
// is made.
//
// Nothing another user can write or replace is trusted (see
// docs/security.md): a binding directory is opened once, level by level
// from / without following links, and every level must belong to root or
// the user itself (or be sticky, as /tmp is); the directory itself may not
// be writable by group or others. A binding file counts only if it is a
// regular file owned by root or, in the user's own directory, by the user;
// it is read without following links and without blocking. The bound
// counter is compared by device and inode, never through links.
//
// Every Open that binds holds an exclusive flock on <dir>/.lock (mode
// 0600, so no other user can open it) from reading the binding until its
// counter file exists (or, if the Open fails, until the binding it made is
// removed again), waiting at most as long as its context allows.

// DefaultBindingDir is the host-wide directory of name bindings. Only root
// writes it: an Open run as root creates it (mode 0755, owned by root,
// each new level synced into its parent) and records its bindings there.
// Every other user records its bindings in its own state directory
// (~/.local/state/snapid/names, mode 0700, in the home directory the
// system's user database gives, whatever $HOME or $XDG_STATE_HOME say; a
// user without a home of its own there uses $XDG_STATE_HOME/snapid/names,
// else $HOME/.local/state/snapid/names), which always counts for that
// user's programs, and also reads the host-wide directory: a name root
// bound there to another counter, whether that counter exists yet or not,
// is refused, and a host-wide directory it cannot read refuses every name.
// Root, before it uses a name, reads every user's own directory too (see
// checkUsersBindings). A host-wide directory left world-writable (mode
// 1777) by an earlier version is made 0755 by root's next Open, and any
// entry at a name in it not owned by root is ignored (with a warning) and
// moved aside when root binds that name. The environment variable
// SNAPID_BINDING_DIR, an absolute path, replaces both; WithBindingDir
// replaces it for one Open.
const DefaultBindingDir = "/var/lib/snapid/names"

// defaultBindingDir is DefaultBindingDir; tests point it elsewhere.
var defaultBindingDir = DefaultBindingDir

// testBindingDir, set by this package's tests only, gives each test its own
// host (a binding directory in the test's temporary directory), so that
// tests running in parallel under one name do not refuse each other. It
// returns "" for a counter outside a test's temporary directory.
var testBindingDir func(counterPath string) string

// testAfterHostWideCheck, set by this package's tests only, runs in a
// user's Open right after its first check of the host-wide bindings.
var testAfterHostWideCheck func()

const (
	bindingHeader = "snapid-binding 1"
	bindingLock   = ".lock" // never a node name: names start with a letter
)

// bindingDirs returns the directory to record the binding in ("" when
// bindings are off), whether it is the host-wide one, and the host-wide
// directory to check, read-only ("" if none).
func (o *options) bindingDirs(ctx context.Context, counterPath string) (dir string, hostWide bool, checkOnly string, err error) {
	if o.bindingSet {
		return o.binding, false, "", nil
	}
	d := os.Getenv("SNAPID_BINDING_DIR")
	if d != "" {
		if err := CheckBindingDir(d); err != nil {
			return "", false, "", fmt.Errorf("%w: SNAPID_BINDING_DIR=%q: %w", ErrInvalidOption, d, err)
		}
	}
	if testBindingDir != nil {
		if td := testBindingDir(counterPath); td != "" {
			return td, false, "", nil
		}
	}
	if d != "" {
		return d, false, "", nil
	}
	if os.Geteuid() == 0 {
		return defaultBindingDir, true, "", nil
	}
	// The user's home from the password database, not $HOME or
	// $XDG_STATE_HOME: one user's programs share one bindings directory
	// whatever their environment says (a second counter under a name is
	// refused even with another XDG_STATE_HOME), and root can find it.
	if home, ok := ownHome(ctx); ok {
		return userBindingDir(home), false, defaultBindingDir, nil
	}
	if err := ctx.Err(); err != nil {
		// Not "no home": the user database did not answer in time, and
		// another directory would split this user's bindings in two.
		return "", false, "", fmt.Errorf("looking up this user's home in the user database: %w", err)
	}
	state := os.Getenv("XDG_STATE_HOME")
	if state == "" || !filepath.IsAbs(state) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", false, "", fmt.Errorf("no directory for name bindings (only root writes %s, and there is no home directory): %w", defaultBindingDir, err)
		}
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "snapid", "names"), false, defaultBindingDir, nil
}

// trustedOwners are the users whose binding directories and files this
// process trusts: root, and itself; root in the host-wide directory.
func trustedOwners(hostWide bool) []uint32 {
	euid := uint32(os.Geteuid())
	if hostWide || euid == 0 {
		return []uint32{0}
	}
	return []uint32{0, euid}
}

// withNameBound runs open (which creates or opens the counter file at
// counterPath, absolute) with the name bound to that counter: it refuses,
// before open runs and so before anything is created, a name the host
// uses with another counter file that still exists (ErrNameBound) or whose
// binding it cannot read (ErrCorruptBinding); otherwise it records the
// binding if it is not there yet. When open fails, a binding this call
// made is removed again. Waiting for another Open's lock ends with ctx.
func withNameBound(ctx context.Context, name, counterPath string, o *options, open func() error) error {
	path, hostWide, checkOnly, err := o.bindingDirs(ctx, counterPath)
	if err != nil {
		return &FileError{Op: "bind", Path: counterPath, Err: err}
	}
	if path == "" {
		return open()
	}
	// A counter whose directory is missing fails to open: nothing is made
	// for it, neither the bindings directory nor its lock file.
	if dir := filepath.Dir(counterPath); !dirExists(dir) {
		err := fmt.Errorf("the directory %s does not exist: %w", dir, fs.ErrNotExist)
		if st, serr := os.Stat(dir); serr == nil && !st.IsDir() {
			err = fmt.Errorf("%s is not a directory: %w", dir, unix.ENOTDIR)
		}
		return &FileError{Op: "create", Path: counterPath, Err: err}
	}
	// A counter whose path another user could change, or an existing
	// counter that cannot be used, fails to open: nothing is made for it
	// either (both are checked here, before any bindings directory or
	// lock file is made).
	if err := checkCounterPath(counterPath, o); err != nil {
		return &FileError{Op: "open", Path: counterPath, Err: err}
	}
	if _, err := os.Lstat(counterPath); err == nil {
		c, err := openReadOnly(counterPath, o)
		if err != nil {
			return err
		}
		_, err = c.readContext(ctx)
		c.close()
		if err != nil {
			return err
		}
	}
	if checkOnly != "" {
		if err := checkHostWide(checkOnly, name, counterPath, o); err != nil {
			return err
		}
		if testAfterHostWideCheck != nil {
			testAfterHostWideCheck()
		}
	}
	owners := trustedOwners(hostWide)
	dir, err := openBindingDir(path, hostWide, owners, o)
	if err != nil {
		return err
	}
	defer dir.Close()
	// A refusal needs no lock (bindings appear and change by link and
	// rename, whole): a refused Open creates nothing, the lock file
	// included.
	if _, err := readBinding(dir, name, counterPath, owners, o); err != nil {
		return err
	}
	numbered := open
	if o.form.node != 0 {
		if err := precheckNumberBinding(dir, name, owners, checkOnly, o); err != nil {
			return err
		}
		numbered = func() error { return openNumberBound(ctx, dir, name, owners, hostWide, checkOnly, o, open) }
	}
	lockFile, err := dir.OpenLockFile(bindingLock, 0o600, owners...)
	if err != nil {
		lp := filepath.Join(path, bindingLock)
		if hostWide && errors.Is(err, statefile.ErrWrongOwner) {
			// Planted while the directory was writable by every user
			// (an earlier version made it 1777). It cannot be moved
			// aside safely here: another Open of root's may be making
			// the real one at this moment.
			err = fmt.Errorf("%w; it was made by another user while the directory was writable by every user (earlier versions "+
				"made it 1777): remove it (rm %s) and try again; root's next Open makes it again", err, lp)
		}
		return &FileError{Op: "bind", Path: lp, Err: untrusted(err)}
	}
	defer lockFile.Close()
	if err := statefile.Lock(ctx, int(lockFile.Fd()), lockFile.Name()); err != nil {
		return &FileError{Op: "bind", Path: lockFile.Name(), Err: lockError(err)}
	}
	st, err := readBinding(dir, name, counterPath, owners, o)
	if err != nil {
		return err
	}
	if hostWide && st == bindingUntrusted {
		// Not root's: planted while the directory was writable by every
		// user. Moved aside (whatever it is, a directory too), under the
		// lock, so that root's binding can take its place.
		aside, err := dir.MoveAside(name, ".not-root-")
		if err != nil {
			return &FileError{Op: "bind", Path: filepath.Join(path, name), Err: fmt.Errorf(
				"moving aside an entry not owned by root: %w; remove it and try again", err)}
		}
		o.logger.Warn("snapid: an entry not owned by root in the host-wide name bindings directory was moved aside",
			"entry", filepath.Join(path, name), "now", filepath.Join(path, aside))
		st = bindingNone
	}
	if hostWide {
		// Also when the binding is root's already: a user may have bound
		// the name while root's counter was out of sight (an unmounted
		// file system), and root must not issue beside that user.
		if err := checkUsersBindings(ctx, name, counterPath, o); err != nil {
			return err
		}
	}
	if st == bindingOurs {
		// An earlier Open may have linked this binding and then failed
		// (or been killed) before its directory was synced: make it
		// durable before any id is issued under it.
		if err := dir.Sync(); err != nil {
			return &FileError{Op: "bind", Path: filepath.Join(path, name), Err: fmt.Errorf("sync directory %s: %w", path, err)}
		}
		if err := numbered(); err != nil {
			return err
		}
		if checkOnly != "" {
			// A binding of ours whose counter an earlier Open never made
			// (it was killed) is stale to root, which may have bound the
			// name since this Open's first check: check again now that
			// the counter exists, as below.
			return checkHostWide(checkOnly, name, counterPath, o)
		}
		return nil
	}
	b := []byte(bindingHeader + "\n" + strconv.Quote(counterPath) + "\n")
	// A stale binding replaced here is put back if this Open fails: its
	// counter may only be out of sight for a while (an unmounted file
	// system), and a failed Open changes nothing.
	var stale []byte
	if st == bindingStale {
		stale, _, _ = dir.ReadFile(name, owners...)
	}
	undo := func() {
		if stale != nil {
			_ = dir.Replace(name, stale, 0o644)
		} else {
			_ = dir.Remove(name)
		}
	}
	if st == bindingNone {
		err = dir.Create(name, b, 0o644)
	} else {
		err = dir.Replace(name, b, 0o644)
	}
	if err != nil {
		// The link may have been made before the failure (a failed
		// directory sync): a failed Open leaves no binding of its own.
		if now, rerr := readBinding(dir, name, counterPath, owners, o); rerr == nil && now == bindingOurs {
			undo()
		}
		return &FileError{Op: "bind", Path: filepath.Join(path, name), Err: err}
	}
	// Root and another user bind under different locks; each checks the
	// other's bindings again after recording its own, root before its
	// counter is opened, the user after its counter exists, and neither
	// takes the other's binding for stale while the other may be making
	// its counter (the user refuses root's binding to another counter
	// whether it exists or not; root decides on a user's binding without
	// a counter under that user's lock): whichever order the two Opens
	// run in, at least one sees the other and fails (a user's Open that
	// fails so leaves its new counter, unused).
	if hostWide {
		if err := checkUsersBindings(ctx, name, counterPath, o); err != nil {
			undo()
			return err
		}
	}
	if err := numbered(); err != nil {
		undo()
		return err
	}
	if checkOnly != "" {
		if err := checkHostWide(checkOnly, name, counterPath, o); err != nil {
			undo()
			return err
		}
	}
	if st == bindingStale {
		o.logger.Warn("snapid: the counter file this node name went with on this host is gone; the name now goes with this one",
			"name", name, "binding", filepath.Join(path, name), "counter", counterPath)
	}
	return nil
}

// lockError turns the layer's lock error into this package's, saying once
// what happened (the path is the caller's to name).
func lockError(err error) error {
	var le *statefile.LockedError
	if errors.As(err, &le) {
		return fmt.Errorf("%w (%s) for as long as allowed: %w", ErrLocked, le.Holder, le.Cause)
	}
	if errors.Is(err, statefile.ErrLocked) {
		return fmt.Errorf("%w: %w", ErrLocked, err)
	}
	return err
}

// untrusted turns the layer's refusals of a directory or file into
// ErrUntrustedDir, keeping what they say.
func untrusted(err error) error {
	if errors.Is(err, statefile.ErrWrongOwner) || errors.Is(err, statefile.ErrUnsafeDir) || errors.Is(err, statefile.ErrSymlink) ||
		errors.Is(err, statefile.ErrNotRegular) || errors.Is(err, statefile.ErrLinked) {
		return fmt.Errorf("%w: %w", ErrUntrustedDir, err)
	}
	return err
}

// openBindingDir opens (creating it level by level, durably) the
// directory bindings are recorded in: the host-wide one 0755, others
// 0700.
func openBindingDir(path string, hostWide bool, owners []uint32, o *options) (*statefile.Dir, error) {
	perm := uint32(0o700)
	if hostWide {
		perm = 0o755
	}
	opts := statefile.DirOptions{Create: true, Perm: perm, Owners: owners, FS: o.fs}
	dir, err := statefile.OpenDir(path, opts)
	if hostWide && errors.Is(err, statefile.ErrUnsafeDir) {
		// Left world-writable by an earlier version: root takes it back.
		if terr := tightenHostWide(path, o); terr != nil {
			return nil, &FileError{Op: "bind", Path: path, Err: fmt.Errorf("%w; and making it 0755: %w", untrusted(err), terr)}
		}
		dir, err = statefile.OpenDir(path, opts)
	}
	if err != nil {
		return nil, &FileError{Op: "bind", Path: path, Err: fmt.Errorf("no directory for node name bindings: %w; "+
			"every level must belong to root or this user and not be writable by others (or set SNAPID_BINDING_DIR)", untrusted(err))}
	}
	return dir, nil
}

// tightenHostWide makes a root-owned host-wide directory that others can
// write (mode 1777, as earlier versions made it) 0755.
func tightenHostWide(path string, o *options) error {
	parent, err := statefile.OpenDir(filepath.Dir(path), statefile.DirOptions{Owners: []uint32{0}, FS: o.fs})
	if err != nil {
		return err
	}
	defer parent.Close()
	old, err := parent.Tighten(filepath.Base(path), 0, 0o755)
	if err != nil {
		return err
	}
	o.logger.Warn("snapid: the host-wide name bindings directory was writable by every user (made by an earlier version); it is now 0755, and bindings in it not owned by root are ignored",
		"dir", path, "old_mode", fmt.Sprintf("%#o", old))
	return nil
}

// checkHostWide refuses a name that root bound, in the host-wide
// directory at path, to another counter file, whether that counter exists
// or not: root's Open records its binding before it makes its counter, so
// a counter not there yet may be being made (only root takes over its own
// stale bindings). A directory that does not exist refuses nothing; one
// another user could have written is not read (with a warning). A
// directory this user cannot reach or read (EACCES: /var/lib/snapid at
// 0700, say) refuses every name, with an error saying what to do: root
// may have bound the name there, and issuing as if it had not would
// repeat root's ids.
func checkHostWide(path, name, counterPath string, o *options) error {
	dir, err := statefile.OpenDir(path, statefile.DirOptions{Owners: []uint32{0}, AllowSticky: true})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case errors.Is(err, fs.ErrPermission):
		return &FileError{Op: "bind", Path: path, Err: fmt.Errorf(
			"this user cannot read the host-wide name bindings directory (%w), where root records the names its programs use; "+
				"issuing under %q without it could repeat root's ids. Have an administrator make it and every directory above it "+
				"readable by every user (chmod 755; only root can write it), or use a registry, or set SNAPID_BINDING_DIR",
			err, name)}
	case err != nil:
		o.logger.Warn("snapid: the host-wide name bindings directory is not safe from other users; it is not read", "dir", path, "err", err)
		return nil
	}
	defer dir.Close()
	st, err := readBinding(dir, name, counterPath, []uint32{0}, o)
	if err == nil && st == bindingStale {
		p := filepath.Join(path, name)
		b, _, _ := dir.ReadFile(name, 0)
		bound, _ := parseBinding(b)
		err = &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
			"%w: root bound %q on this host to the counter %s (recorded in %s), which is not there now: root's program may be "+
				"making it, and two counter files under one name issue the same ids; use another name, or, if that counter is retired, "+
				"have root remove %s", ErrNameBound, name, bound, p, p)}
	}
	if errors.Is(err, ErrNameBound) && os.Geteuid() != 0 {
		// Advice this user can follow: not root's counter, not root's
		// binding.
		b, _, _ := dir.ReadFile(name, 0)
		bound, _ := parseBinding(b)
		err = &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
			"%w: root bound %q on this host to its counter %s (recorded in %s), and two counter files under one name issue the "+
				"same ids; this user can neither use root's counter nor change root's binding: use another name (--name or "+
				"SNAPID_NAME), or, for a private trial whose ids never meet root's, set SNAPID_BINDING_DIR to a directory of your own",
			ErrNameBoundByRoot, name, bound, filepath.Join(path, name))}
	}
	return err
}

type bindingState int

const (
	bindingNone      bindingState = iota // no binding
	bindingOurs                          // bound to this counter file
	bindingStale                         // bound to a counter file that is gone
	bindingUntrusted                     // a file not owned by a trusted user: ignored, replaced when binding
)

// readBinding reads the binding of name in dir and judges it for the
// counter file at counterPath: an error when the name goes with another
// counter file that exists, or when the binding cannot be read. A file
// owned by a user not in owners is ignored. Nothing here follows a link
// or blocks.
func readBinding(dir *statefile.Dir, name, counterPath string, owners []uint32, o *options) (bindingState, error) {
	path := filepath.Join(dir.Path(), name)
	b, st, err := dir.ReadFile(name, owners...)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return bindingNone, nil
	case errors.Is(err, statefile.ErrWrongOwner):
		o.logger.Warn("snapid: a name binding not owned by a user it can be trusted from is ignored",
			"binding", path, "owner", statefile.UserName(st.Uid))
		return bindingUntrusted, nil
	case errors.Is(err, statefile.ErrSymlink), errors.Is(err, statefile.ErrNotRegular), errors.Is(err, statefile.ErrTooLarge):
		if lst, lerr := dir.Lstat(name); lerr == nil && !slices.Contains(owners, lst.Uid) {
			// A link or a directory of another user's: as a file of
			// another user's.
			o.logger.Warn("snapid: an entry at a name binding not owned by a user it can be trusted from is ignored",
				"binding", path, "owner", statefile.UserName(lst.Uid))
			return bindingUntrusted, nil
		}
		return 0, &FileError{Op: "bind", Path: path, Err: fmt.Errorf("%w: %w; check which counter file this host uses the name %q with, then remove it (the next Open records the binding again)", ErrCorruptBinding, err, name)}
	case err != nil:
		return 0, &FileError{Op: "bind", Path: path, Err: err}
	}
	bound, ok := parseBinding(b)
	if !ok {
		return 0, &FileError{Op: "bind", Path: path, Err: fmt.Errorf("%w: it does not hold a binding this version writes; check which counter file this host uses the name %q with, then remove it (the next Open records the binding again)", ErrCorruptBinding, name)}
	}
	if sameFile(bound, counterPath) {
		return bindingOurs, nil
	}
	var bst unix.Stat_t
	if err := unix.Lstat(bound, &bst); errors.Is(err, unix.ENOENT) {
		return bindingStale, nil
	}
	return 0, &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
		"%w: this host uses %q with the counter %s (recorded in %s), and two counter files under one name issue the same ids; "+
			"use that counter or another name, or, if that counter is retired, remove %s", ErrNameBound, name, bound, path, path)}
}

// parseBinding returns the counter path a binding file holds.
func parseBinding(b []byte) (string, bool) {
	header, rest, ok := strings.Cut(string(b), "\n")
	if !ok || header != bindingHeader {
		return "", false
	}
	quoted, tail, ok := strings.Cut(rest, "\n")
	if !ok || tail != "" {
		return "", false
	}
	bound, err := strconv.Unquote(quoted)
	if err != nil || !filepath.IsAbs(bound) {
		return "", false
	}
	return bound, true
}

// sameFile reports whether a and b name the same file: equal paths, or
// the same device and inode, neither followed through a link at its last
// component (a link another user planted never makes a binding ours).
func sameFile(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	var sa, sb unix.Stat_t
	if unix.Lstat(a, &sa) != nil || unix.Lstat(b, &sb) != nil {
		return false
	}
	return sa.Mode&unix.S_IFMT == unix.S_IFREG && sb.Mode&unix.S_IFMT == unix.S_IFREG && sa.Dev == sb.Dev && sa.Ino == sb.Ino
}
