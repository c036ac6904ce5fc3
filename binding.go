package snapid

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Name bindings: on one host, one node name goes with one counter file.
// Two counter files under one name issue the same ids (name-1 from each),
// and without a registry nothing else can tell. So Open without a registry
// records, in a directory shared by the host's programs, which counter file
// each name is used with (<dir>/<name>: "snapid-binding 1", then the
// counter's absolute path, each on a line), and refuses the name with
// another counter file while that file exists (ErrNameBound). With a
// registry, the registry refuses a second counter file (its owner token
// differs), so no binding is made.

// DefaultBindingDir is the host-wide directory of name bindings. Open
// creates it (mode 1777, like /tmp, so that every user's programs can
// record their names) when it can; a program that cannot write it records
// its bindings in the user's state directory instead
// ($XDG_STATE_HOME/snapid/names, else ~/.local/state/snapid/names), which
// protects that user's programs only. The variable SNAPID_BINDING_DIR, if
// set to an absolute path, replaces both; WithBindingDir replaces it for
// one Open.
const DefaultBindingDir = "/var/lib/snapid/names"

const bindingHeader = "snapid-binding 1"

// bindingDir returns the directory to use, creating it if needed, or ""
// when bindings are off.
func (o *options) bindingDir() (string, error) {
	if o.bindingSet {
		if o.binding == "" {
			return "", nil
		}
		return o.binding, os.MkdirAll(o.binding, 0o700)
	}
	if d := os.Getenv("SNAPID_BINDING_DIR"); d != "" && filepath.IsAbs(d) {
		return d, os.MkdirAll(d, 0o700)
	}
	if err := os.MkdirAll(DefaultBindingDir, 0o755); err == nil {
		if os.Geteuid() == 0 {
			// Shared by every user of the host, each binding owned by
			// its creator (sticky, as /tmp).
			_ = os.Chmod(DefaultBindingDir, 0o777|fs.ModeSticky)
		}
		if unixAccessW(DefaultBindingDir) {
			return DefaultBindingDir, nil
		}
	}
	state := os.Getenv("XDG_STATE_HOME")
	if state == "" || !filepath.IsAbs(state) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no directory for name bindings (%s not writable, no home directory): %w", DefaultBindingDir, err)
		}
		state = filepath.Join(home, ".local", "state")
	}
	d := filepath.Join(state, "snapid", "names")
	return d, os.MkdirAll(d, 0o700)
}

// bindName records that name goes with the counter file at counterPath
// (absolute), or refuses if the host uses name with another counter file
// that still exists. A binding whose counter file is gone is taken over.
// unbind, if not nil, removes a binding this call created, for an Open
// that fails after it.
func bindName(name, counterPath string, o *options) (unbind func(), err error) {
	dir, err := o.bindingDir()
	if err != nil {
		return nil, &FileError{Op: "bind", Path: counterPath, Err: err}
	}
	if dir == "" {
		return nil, nil
	}
	path := filepath.Join(dir, name)
	want := []byte(bindingHeader + "\n" + counterPath + "\n")
	for attempt := 0; attempt < 3; attempt++ {
		b, err := readSmallFile(path, false)
		if errors.Is(err, fs.ErrNotExist) {
			err = createFileAtomically(o.fs, path, want, 0o644)
			if errors.Is(err, fs.ErrExist) {
				continue // another program bound it first: read its binding
			}
			if err != nil {
				return nil, &FileError{Op: "bind", Path: path, Err: err}
			}
			return func() { _ = o.fs.Remove(path); _ = o.fs.SyncDir(dir) }, nil
		}
		if err != nil {
			return nil, &FileError{Op: "bind", Path: path, Err: err}
		}
		header, bound, ok := strings.Cut(strings.TrimSuffix(string(b), "\n"), "\n")
		if !ok || header != bindingHeader || !filepath.IsAbs(bound) {
			return nil, &FileError{Op: "bind", Path: path, Err: fmt.Errorf("%w: not a name binding; remove it if no program uses the name %q", ErrCorrupt, name)}
		}
		if sameFile(bound, counterPath) {
			return nil, nil
		}
		if _, err := os.Lstat(bound); !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("snapid: %w: %q is used on this host with the counter %s (recorded in %s); two counter files under one name issue the same ids: "+
				"use that counter, another name, or remove %s if that counter is retired", ErrNameBound, name, bound, path, path)
		}
		// The bound counter is gone: take the name over.
		tmp := path + ".rebind"
		_ = o.fs.Remove(tmp)
		if err := createFileAtomically(o.fs, tmp, want, 0o644); err != nil {
			return nil, &FileError{Op: "bind", Path: path, Err: err}
		}
		if err := o.fs.Rename(tmp, path); err != nil {
			return nil, &FileError{Op: "bind", Path: path, Err: err}
		}
		if err := o.fs.SyncDir(dir); err != nil {
			return nil, &FileError{Op: "bind", Path: path, Err: err}
		}
		o.logger.Warn("snapid: node name's counter file is gone; the name now goes with this one", "name", name, "was", bound, "now", counterPath)
		return nil, nil
	}
	return nil, &FileError{Op: "bind", Path: path, Err: errors.New("the binding kept changing")}
}

// sameFile reports whether a and b name the same file (equal paths, or
// the same inode through links).
func sameFile(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// unixAccessW reports whether this process may create files in dir.
func unixAccessW(dir string) bool {
	return unix.Access(dir, unix.W_OK|unix.X_OK) == nil
}
