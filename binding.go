package snapid

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Name bindings: on one host, one node name goes with one counter file.
// Two counter files under one name issue the same ids (name-1 from each),
// and without a registry nothing else can tell. So Open without a registry
// records, in a directory shared by the host's programs, which counter file
// each name is used with (<dir>/<name>: the line "snapid-binding 1", then
// the counter's absolute path quoted as a Go string, each ending in a
// newline), and refuses the name with another counter file while that file
// exists (ErrNameBound). A binding whose counter file is gone is taken
// over. With a registry, the registry refuses a second counter file (its
// owner token differs), so no binding is made.
//
// Every Open that binds holds an exclusive flock on the directory itself
// from reading the binding until its counter file exists (or, if the Open
// fails, until the binding it made is removed again), so that a binding is
// never taken over from an Open that is still creating its counter, and of
// two first Opens of one name with different counters exactly one wins.

// DefaultBindingDir is the host-wide directory of name bindings. An Open
// run as root creates it (mode 1777, like /tmp, so that every user's
// programs can record their names; each binding stays its creator's), and
// an administrator can create it beforehand the same way
// (install -d -m 1777 /var/lib/snapid/names). A program that cannot write
// it records its bindings in the user's state directory instead
// ($XDG_STATE_HOME/snapid/names, else ~/.local/state/snapid/names), which
// protects that user's programs only; it still refuses a name that the
// host-wide directory, if it can read it, binds to another counter. The
// environment variable SNAPID_BINDING_DIR, an absolute path, replaces
// both; WithBindingDir replaces it for one Open.
const DefaultBindingDir = "/var/lib/snapid/names"

// defaultBindingDir is DefaultBindingDir; tests point it elsewhere.
var defaultBindingDir = DefaultBindingDir

// testBindingDir, set by this package's tests only, gives each test its own
// host (a binding directory in the test's temporary directory), so that
// tests running in parallel under one name do not refuse each other. It
// returns "" for a counter outside a test's temporary directory.
var testBindingDir func(counterPath string) string

const bindingHeader = "snapid-binding 1"

// bindingDirs returns the directory to record the binding in ("" when
// bindings are off) and a directory only to check, read-only ("" if none).
// It creates nothing but the host-wide directory, when run as root.
func (o *options) bindingDirs(counterPath string) (dir, checkOnly string, err error) {
	if o.bindingSet {
		return o.binding, "", nil
	}
	d := os.Getenv("SNAPID_BINDING_DIR")
	if d != "" && !filepath.IsAbs(d) {
		return "", "", fmt.Errorf("%w: SNAPID_BINDING_DIR=%q: an absolute path", ErrInvalidOption, d)
	}
	if testBindingDir != nil {
		if td := testBindingDir(counterPath); td != "" {
			return td, "", nil
		}
	}
	if d != "" {
		return d, "", nil
	}
	shared := defaultBindingDir
	if _, err := os.Stat(shared); errors.Is(err, fs.ErrNotExist) && os.Geteuid() == 0 {
		if err := makeSharedDir(shared); err != nil {
			return "", "", fmt.Errorf("creating %s: %w", shared, err)
		}
	}
	if unix.Access(shared, unix.W_OK|unix.X_OK) == nil {
		return shared, "", nil
	}
	if unix.Access(shared, unix.R_OK|unix.X_OK) == nil {
		checkOnly = shared
	}
	state := os.Getenv("XDG_STATE_HOME")
	if state == "" || !filepath.IsAbs(state) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", "", fmt.Errorf("no directory for name bindings (%s is not writable, and no home directory): %w", shared, err)
		}
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "snapid", "names"), checkOnly, nil
}

// makeSharedDir creates the host-wide binding directory, its parents with
// mode 0755 and itself with mode 1777. A directory that exists is left as
// it is: an administrator may have made it differently on purpose.
func makeSharedDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	}
	return os.Chmod(dir, 0o777|fs.ModeSticky)
}

// withNameBound runs open (which creates or opens the counter file at
// counterPath, absolute) with the name bound to that counter: it refuses,
// before open runs and so before anything is created, a name the host
// uses with another counter file that still exists (ErrNameBound) or whose
// binding it cannot read (ErrCorruptBinding); otherwise it records the
// binding if it is not there yet. When open fails, a binding this call
// made is removed again.
func withNameBound(name, counterPath string, o *options, open func() error) error {
	dir, checkOnly, err := o.bindingDirs(counterPath)
	if err != nil {
		return &FileError{Op: "bind", Path: counterPath, Err: err}
	}
	if dir == "" {
		return open()
	}
	if checkOnly != "" {
		if _, err := readBinding(filepath.Join(checkOnly, name), name, counterPath); err != nil {
			return err
		}
	}
	path := filepath.Join(dir, name)
	// A name can only be refused by a binding in an existing directory,
	// so making a missing one is never the only trace of a refusal.
	_, statErr := os.Stat(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return &FileError{Op: "bind", Path: dir, Err: fmt.Errorf("no directory for node name bindings: %w; "+
			"create the host's (install -d -m 1777 %s), or set SNAPID_BINDING_DIR", err, DefaultBindingDir)}
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		// The new directory's entry is durable before a binding in it is.
		if err := o.fs.SyncDir(filepath.Dir(dir)); err != nil {
			return &FileError{Op: "bind", Path: dir, Err: err}
		}
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return &FileError{Op: "bind", Path: dir, Err: err}
	}
	defer unlock()
	st, err := readBinding(path, name, counterPath)
	if err != nil {
		return err
	}
	if st == bindingOurs {
		return open()
	}
	if err := writeBinding(o.fs, dir, path, counterPath, st == bindingStale); err != nil {
		return &FileError{Op: "bind", Path: path, Err: err}
	}
	if err := open(); err != nil {
		if rerr := o.fs.Remove(path); rerr == nil {
			_ = o.fs.SyncDir(dir)
		}
		return err
	}
	if st == bindingStale {
		o.logger.Warn("snapid: the counter file this node name went with on this host is gone; the name now goes with this one",
			"name", name, "binding", path, "counter", counterPath)
	}
	return nil
}

type bindingState int

const (
	bindingNone  bindingState = iota // no binding
	bindingOurs                      // bound to this counter file
	bindingStale                     // bound to a counter file that is gone
)

// readBinding reads the binding at path of name and judges it for the
// counter file at counterPath: an error when the name goes with another
// counter file that exists, or when the binding cannot be read.
func readBinding(path, name, counterPath string) (bindingState, error) {
	b, err := readSmallFile(path, false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return bindingNone, nil
	case errors.Is(err, unix.ELOOP):
		return 0, &FileError{Op: "bind", Path: path, Err: fmt.Errorf("%w: it is a symbolic link; check which counter file this host uses the name %q with, then remove it (the next Open records the binding again)", ErrCorruptBinding, name)}
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
	if _, err := os.Lstat(bound); errors.Is(err, fs.ErrNotExist) {
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

// writeBinding records that the name bound at path goes with counterPath:
// a new binding is linked into place (it fails if one appeared), a stale
// one is replaced by rename. The caller holds the directory's lock.
func writeBinding(fsys fsOps, dir, path, counterPath string, replace bool) error {
	b := []byte(bindingHeader + "\n" + strconv.Quote(counterPath) + "\n")
	if !replace {
		return createFileAtomically(fsys, path, b, 0o644)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	if err := writeTemp(fsys, tmp, b, 0o644); err != nil {
		_ = fsys.Remove(tmp.Name())
		return err
	}
	if err := fsys.Rename(tmp.Name(), path); err != nil {
		_ = fsys.Remove(tmp.Name())
		if errors.Is(err, fs.ErrPermission) {
			err = fmt.Errorf("%w (the binding is another user's: its owner or root can remove it)", err)
		}
		return err
	}
	return fsys.SyncDir(dir)
}

// lockDir takes an exclusive flock on the directory dir and returns its
// release.
func lockDir(dir string) (func(), error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := ignoringEINTR(func() error { return unix.Flock(fd, unix.LOCK_EX) }); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return func() { unix.Close(fd) }, nil
}

// sameFile reports whether a and b name the same file (equal paths, or
// the same file through links).
func sameFile(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}
