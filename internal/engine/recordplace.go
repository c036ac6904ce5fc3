package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/snapid/snapid/internal/hoststate"
	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// Where the host's records of names are kept: the place (the host's, one
// SNAPID_BINDING_DIR or WithBindingDir names, or a user's own while the
// host has none), when it may be made, and what is taken into it from a
// user's own place or an earlier version's name bindings.

// DefaultBindingDir is the host's place for records of node names, made by
// root's first Open (mode 1777 under a root-owned /var/lib/snapid, like
// /tmp: every user adds its own records, and only a record's owner, or
// root, can remove or replace it). A user's Open uses it when it exists;
// on a host where root has not made it yet, the user's records are kept in
// its own state directory (~/.local/state/snapid/records) and moved into
// the place by the user's first Open after root made it. SNAPID_BINDING_DIR
// (an absolute path) or WithBindingDir names another place: one every
// program of the host uses, root-owned and 1777 if several users share it.
const DefaultBindingDir = hoststate.DefaultDir

// defaultBindingDir is DefaultBindingDir; tests point it elsewhere.
var defaultBindingDir = DefaultBindingDir

// testBindingDir, set by this package's tests only, gives each test its own
// host (a place in the test's temporary directory). It returns "" for a
// counter outside a test's temporary directory.
var testBindingDir func(counterPath string) string

// recordStep is how far the record's mark is kept ahead of the counter: one
// record write (synced) per step of numbers.
const recordStep = 1024

// recordPlace opens (with create, making it if missing) the place of this
// Open's records. own is, for a user's Open in the host's place, the
// user's own place kept while the host had none (its records are moved
// into the host's place as they are used).
func recordPlace(ctx context.Context, counterPath string, o *options, create bool) (p *hoststate.Place, own string, err error) {
	euid := uint32(os.Geteuid())
	mine := []uint32{0, euid}
	if o.bindingSet {
		p, err = openRecordPlace(o.binding, 0o700, mine, create, o)
		return p, "", err
	}
	d := os.Getenv("SNAPID_BINDING_DIR")
	if d != "" {
		if err := CheckBindingDir(d); err != nil {
			return nil, "", fmt.Errorf("%w: SNAPID_BINDING_DIR=%q: %w", ErrInvalidOption, d, err)
		}
	}
	if testBindingDir != nil {
		if td := testBindingDir(counterPath); td != "" {
			p, err = openRecordPlace(td, 0o700, mine, create, o)
			return p, "", err
		}
	}
	if d != "" {
		p, err = openRecordPlace(d, 0o700, mine, create, o)
		return p, "", err
	}
	if euid == 0 {
		p, err = rootRecordPlace(o, create)
		return p, "", err
	}
	return userRecordPlace(ctx, o, mine, create)
}

// openRecordPlace opens (with create, making it if missing, with mode) the
// place of records at dir, whose owner must be one of owners.
func openRecordPlace(dir string, mode uint32, owners []uint32, create bool, o *options) (*hoststate.Place, error) {
	p, err := hoststate.OpenPlace(dir, hoststate.PlaceOptions{Create: create, Mode: mode, Owners: owners, FS: o.fs})
	if err != nil {
		return nil, &FileError{Op: "record", Path: dir, Err: placeError(err, dir)}
	}
	return p, nil
}

// rootRecordPlace opens (with create, making it if missing) the host's
// default place for root's Open, refusing one that does not outlast its
// mount (lastingPlace).
func rootRecordPlace(o *options, create bool) (*hoststate.Place, error) {
	if create {
		// Root makes the place and its parent, never more: a /var
		// not mounted yet has no /var/lib, and a place made on the
		// file system under it would hide the host's records.
		if err := placeCanBeMade(); err != nil {
			return nil, err
		}
	}
	p, err := openRecordPlace(defaultBindingDir, 0o1777, []uint32{0}, create, o)
	if err != nil {
		return nil, err
	}
	return p, lastingPlace(p)
}

// userRecordPlace opens the place of records for a user's Open: the
// host's default place if root made it (with own, the user's own place
// kept while the host had none), else, where root could make it now, the
// user's own place, with a warning. mine are the owners the user's own
// place may have; with create it is made if missing.
func userRecordPlace(ctx context.Context, o *options, mine []uint32, create bool) (p *hoststate.Place, own string, err error) {
	ownDir, oerr := ownRecordDir(ctx)
	p, err = hoststate.OpenPlace(defaultBindingDir, hoststate.PlaceOptions{Owners: []uint32{0}, FS: o.fs})
	if err == nil {
		if oerr != nil {
			ownDir = ""
		}
		if err := lastingPlace(p); err != nil {
			return nil, "", err
		}
		return p, ownDir, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		// Refused, unreadable, not safe: never "no records".
		return nil, "", &FileError{Op: "record", Path: defaultBindingDir, Err: placeError(err, defaultBindingDir)}
	}
	// Missing: only where root could make it now. A /var not mounted
	// yet, or a tmpfs over /var/lib, hides the place rather than lacks
	// it.
	if err := placeCanBeMade(); err != nil {
		return nil, "", err
	}
	// Root has not made the host's place: this user's own, with a
	// warning (root's programs do not see it until this user's next Open
	// after root made the place moves its records there).
	if oerr != nil {
		return nil, "", &FileError{Op: "record", Path: defaultBindingDir, Err: oerr}
	}
	o.logger.Warn("snapid: the host's place for node name records does not exist; this user's records are kept in its own state directory "+
		"until it does, and root's programs do not read them: have root make the place (install -d -m 0755 /var/lib/snapid && install -d -m 1777 "+defaultBindingDir+
		", or run any snapid program as root once) before root's programs use this user's names",
		"place", defaultBindingDir, "own", ownDir)
	p, err = openRecordPlace(ownDir, 0o700, mine, create, o)
	return p, "", err
}

// lastingPlace refuses (and closes) the host's default place when it is
// on a file system that does not outlive its mount (a service's
// TemporaryFileSystem over /var/lib, a tmpfs mounted over the place):
// what it lacks is hidden, not absent, and records made there are lost.
func lastingPlace(p *hoststate.Place) error {
	v, err := p.Volatile()
	if err == nil && !v {
		return nil
	}
	path := p.Path()
	p.Close()
	if err == nil {
		err = errors.New("it is on a tmpfs or ramfs, which hides the host's records (a service's TemporaryFileSystem= or a mount over it?) and loses those made there at a reboot: " +
			"give the program the host's place (BindPaths=/var/lib/snapid under systemd), or name a lasting one (SNAPID_BINDING_DIR)")
	}
	return &FileError{Op: "record", Path: path, Err: err}
}

// placeCanBeMade refuses to take the host's default place for missing
// when what it would be made in is not the host's lasting /var/lib: the
// directory above /var/lib/snapid missing (a /var not mounted yet), a
// mount point /etc/fstab lists at or above the place not mounted, or the
// nearest existing level on a tmpfs or ramfs (a service's
// TemporaryFileSystem=/var/lib): the real place may be hidden there.
func placeCanBeMade() error {
	lib := filepath.Dir(filepath.Dir(defaultBindingDir))
	if !dirExists(lib) {
		return &FileError{Op: "record", Path: defaultBindingDir, Err: fmt.Errorf(
			"%w: %s does not exist (is its file system mounted?): the host's records of node names are kept under it", fs.ErrNotExist, lib)}
	}
	if at := hoststate.NotMounted(defaultBindingDir); at != "" {
		return &FileError{Op: "record", Path: defaultBindingDir, Err: fmt.Errorf("%w: %w", fs.ErrNotExist, hoststate.NotMountedError(defaultBindingDir, at))}
	}
	for d := defaultBindingDir; ; d = filepath.Dir(d) {
		var st unix.Statfs_t
		if err := unix.Statfs(d, &st); errors.Is(err, unix.ENOENT) {
			continue
		} else if err != nil {
			return &FileError{Op: "record", Path: defaultBindingDir, Err: err}
		}
		if st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC {
			return &FileError{Op: "record", Path: defaultBindingDir, Err: fmt.Errorf(
				"%w: %s is on a tmpfs or ramfs, which hides the host's records (a service's TemporaryFileSystem= or a mount over it?) and loses those made there at a reboot: "+
					"give the program the host's place (BindPaths=/var/lib/snapid under systemd), or name a lasting one (SNAPID_BINDING_DIR)", fs.ErrNotExist, d)}
		}
		return nil
	}
}

// ownRecordDir is the user's own place for records when the host has
// none: in the home the user database gives (whatever $HOME says), else
// $XDG_STATE_HOME or $HOME.
func ownRecordDir(ctx context.Context) (string, error) {
	if u, ok := statefile.ByUID(ctx, uint32(os.Geteuid())); ok && filepath.IsAbs(u.Home) {
		var st unix.Stat_t
		if unix.Stat(u.Home, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid == u.Uid {
			return filepath.Join(u.Home, ".local", "state", "snapid", "records"), nil
		}
	}
	state := os.Getenv("XDG_STATE_HOME")
	if state == "" || !filepath.IsAbs(state) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no place for node name records (root has not made %s, and this user has no home directory): %w", defaultBindingDir, err)
		}
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "snapid", "records"), nil
}

// placeError says what to do about a place that cannot be used.
func placeError(err error, dir string) error {
	switch {
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: this user cannot read the place where every program of the host records the node names it uses, "+
			"and issuing without it could repeat another program's ids; have root make it and every directory above it searchable by every user "+
			"(chmod 755 on the parents, 1777 on %s)", err, dir)
	case errors.Is(err, statefile.ErrWrongOwner), errors.Is(err, statefile.ErrUnsafeDir), errors.Is(err, statefile.ErrSymlink):
		return fmt.Errorf("%w: %w: the place for node name records, and every directory above it, must belong to root (or this user, for a place of its own) "+
			"and be writable by no one else, unless sticky (mode 1777); fix its owner and mode", ErrUntrustedDir, err)
	}
	return err
}

// adoptOwnRecord moves name's record from own, the user's own place kept
// while the host had none, into the host's place p (created there, as
// any record; then removed from own).
func adoptOwnRecord(p *hoststate.Place, own, name string, o *options) (hoststate.Record, bool, error) {
	op, err := hoststate.OpenPlace(own, hoststate.PlaceOptions{Owners: []uint32{0, uint32(os.Geteuid())}})
	if errors.Is(err, fs.ErrNotExist) {
		return hoststate.Record{}, false, nil
	}
	if errors.Is(err, fs.ErrPermission) {
		// The home hidden from a hardened service (ProtectHome=yes):
		// never "no record" (a second record of the name would be made
		// in the host's place), refused.
		return hoststate.Record{}, false, &FileError{Op: "record", Path: own, Err: fmt.Errorf(
			"%w: this user's own place of records, kept while the host had none, cannot be looked at (a home hidden from a service: ProtectHome=); "+
				"a record there would be missed: open the name once without the hardening, which moves it into the host's place", err)}
	}
	if err != nil {
		return hoststate.Record{}, false, &FileError{Op: "record", Path: own, Err: err}
	}
	defer op.Close()
	oh, err := op.OpenHandle(name)
	if errors.Is(err, fs.ErrNotExist) {
		return hoststate.Record{}, false, nil
	}
	if err != nil {
		return hoststate.Record{}, false, recordError(op, name, err)
	}
	defer oh.Close()
	// Programs started while the host had no place hold the own record
	// (presence): moving it from under them would hide them from every
	// later Open, Release and close of the name.
	if !oh.Lock(true) {
		return hoststate.Record{}, false, fmt.Errorf("snapid: %w: programs of %q started before the host's place of records existed still use its record in %s; "+
			"stop them, then open the name again (its record then moves to %s)", ErrInUse, name, own, p.Path())
	}
	r, err := oh.Read()
	if err != nil {
		return r, false, recordError(op, name, err)
	}
	r.Gen = 0
	perm := hoststate.Perm{Mode: 0o600, UID: -1, GID: -1}
	var st unix.Stat_t
	if unix.Lstat(r.Path, &st) == nil && uint64(st.Dev) == r.Dev && st.Ino == r.Ino {
		perm = recordPerm(st) // the counter's writers keep it, as any record
	}
	if err := p.Create(r, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return r, false, recordError(p, name, err)
	}
	_ = op.Remove(name)
	r, ok, err := p.Read(name)
	if err != nil {
		return r, false, recordError(p, name, err)
	}
	return r, ok, nil
}

// migrateBinding makes name's record from a binding an earlier version
// kept (/var/lib/snapid/names/<name> for root, the user's own
// ~/.local/state/snapid/names/<name>): the counter it names, from that
// counter's value, so that the name stays with it.
func migrateBinding(p *hoststate.Place, name string, o *options) (hoststate.Record, bool, error) {
	if o.bindingSet || os.Getenv("SNAPID_BINDING_DIR") != "" || testBindingDir != nil {
		return hoststate.Record{}, false, nil
	}
	for _, d := range oldBindingDirs() {
		r, st, ok := readOldBinding(d, name)
		if !ok {
			continue
		}
		if err := p.Create(r, recordPerm(st)); err != nil && !errors.Is(err, fs.ErrExist) {
			return hoststate.Record{}, false, recordError(p, name, err)
		}
		o.logger.Warn("snapid: the node name binding of an earlier version is now the host's record of the name", "binding", filepath.Join(d, name), "record", p.RecordPath(name))
		r, ok, err := p.Read(name)
		if err != nil {
			return r, false, recordError(p, name, err)
		}
		return r, ok, nil
	}
	return hoststate.Record{}, false, nil
}

// oldBindingDirs returns where an earlier version kept the node name
// bindings of the user running: /var/lib/snapid/names for root, the
// user's own ~/.local/state/snapid/names (none if it has no home).
func oldBindingDirs() []string {
	if os.Geteuid() == 0 {
		return []string{"/var/lib/snapid/names"}
	}
	if home, err := os.UserHomeDir(); err == nil {
		return []string{filepath.Join(home, ".local", "state", "snapid", "names")}
	}
	return nil
}

// readOldBinding reads name's binding in the earlier version's directory
// d: the record it makes (the counter it names, at that counter's value)
// and the counter's stat; ok is false without a valid binding naming a
// regular file the user running trusts.
func readOldBinding(d, name string) (r hoststate.Record, st unix.Stat_t, ok bool) {
	b, _, err := statefile.ReadSmall(filepath.Join(d, name), false)
	if err != nil {
		return r, st, false
	}
	header, rest, _ := strings.Cut(string(b), "\n")
	quoted, _, _ := strings.Cut(rest, "\n")
	if header != "snapid-binding 1" || len(quoted) < 2 {
		return r, st, false
	}
	path := strings.Trim(quoted, `"`)
	if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || !trustedRecord(st.Uid, uint32(os.Geteuid())) {
		return r, st, false
	}
	v, _ := ReadCounter(path)
	return hoststate.Record{Name: name, Dev: st.Dev, Ino: st.Ino, Path: path, Floor: v, Mark: v}, st, true
}
