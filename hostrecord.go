package snapid

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/snapid/snapid/internal/hoststate"
	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// The host's record of names. Every Open, with a registry or without, as
// root or any user, in every id form, reads and writes the one record of
// its name in one place (see DefaultBindingDir): which counter file issues
// under the name (by device and inode), the counter's form history (see
// formhistory.go), the node number and stride a registry gave the name,
// whether it was released, and a floor and a mark (see hoststate.Record).
// It is the one place these are kept: files earlier versions kept beside
// the counter for them are taken in and removed (see migrate.go). An Open
// is refused, before it creates anything, when the record names another
// counter file, or a counter that is no longer there (an unmounted file
// system, a re-pointed link: it is never made again at 0), or when the
// counter is below the record's floor (rolled back, zeroed, restored). Node numbers and the stride are checked against
// every record of the place. Nothing here reads another user's directory,
// and nothing that cannot be read reads as "no record".

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
	open := func(dir string, mode uint32, owners []uint32) (*hoststate.Place, error) {
		p, err := hoststate.OpenPlace(dir, hoststate.PlaceOptions{Create: create, Mode: mode, Owners: owners, FS: o.fs})
		if err != nil {
			return nil, &FileError{Op: "record", Path: dir, Err: placeError(err, dir)}
		}
		return p, nil
	}
	if o.bindingSet {
		p, err = open(o.binding, 0o700, mine)
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
			p, err = open(td, 0o700, mine)
			return p, "", err
		}
	}
	if d != "" {
		p, err = open(d, 0o700, mine)
		return p, "", err
	}
	if euid == 0 {
		if create {
			// Root makes the place and its parent, never more: a /var
			// not mounted yet has no /var/lib, and a place made on the
			// file system under it would hide the host's records.
			if err := placeCanBeMade(); err != nil {
				return nil, "", err
			}
		}
		if p, err = open(defaultBindingDir, 0o1777, []uint32{0}); err != nil {
			return nil, "", err
		}
		return p, "", lastingPlace(p)
	}
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
	p, err = open(ownDir, 0o700, mine)
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

// hostRecord is a Generator's hold on its name's record.
type hostRecord struct {
	p        *hoststate.Place
	h        *hoststate.Handle
	mu       sync.Mutex
	mark     uint64                // the mark this process last wrote and synced: updates up to it need no write
	dev, ino uint64                // the counter's identity
	step     uint64                // how far the mark goes ahead of the counter
	trust    func(uid uint32) bool // whose claims speak for the counter (see claimNumbers)
	// present: this process holds the record's shared presence lock, so
	// no other process sets the mark back under it (see close).
	present bool
	// formGen is the generation of the record in which stillCurrent last
	// found this Generator's striped form in use; formLeft, once set, is
	// its refusal (the form was left).
	formGen  uint64
	formLeft error
	striped  *idForm // a striped Generator's form, checked at every update (see watchForm)
	log      interface {
		Warn(string, ...any)
	}
}

// recordForm is f as a record keeps it; complete is false for a numeric
// form whose node number or stride a registry has not given yet.
func recordForm(f idForm) (_ hoststate.Form, complete bool) {
	switch f.form {
	case FormatDecimal:
		return hoststate.Form{Kind: formDecimal, Node: f.node}, f.node != 0
	case FormatStriped:
		return hoststate.Form{Kind: formStriped, Node: f.node, Stride: f.stride}, f.node != 0 && f.stride != 0
	}
	return hoststate.Form{Kind: formName}, true
}

// counterIdentity is the device and inode of the file at path, not
// followed through a link unless follow; ok is false when nothing is
// there.
func counterIdentity(path string, follow bool) (dev, ino uint64, ok bool, err error) {
	var st unix.Stat_t
	if follow {
		err = unix.Stat(path, &st)
	} else {
		err = unix.Lstat(path, &st)
	}
	if errors.Is(err, unix.ENOENT) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}
	return st.Dev, st.Ino, true, nil
}

// trustedRecord reports whether a record owned by uid may speak for the
// counter owned by counterUID: root's, the counter owner's, or this
// user's own. A record another user made for a counter not theirs (they
// can read its device and inode) is never adopted: it could later be
// rewritten by that user.
func trustedRecord(uid, counterUID uint32) bool {
	return uid == 0 || uid == counterUID || uid == uint32(os.Geteuid())
}

// speaksFor is trustedRecord for the record r and the counter of status
// st, which also trusts a record that names this very counter made by one
// of its writers (its group, when group-writable; anyone, when writable
// by all): a writer of the counter can change the counter itself. What
// the records of a counter say about it (its name for a default, a node
// number, a release) is taken only from those.
func speaksFor(r hoststate.Record, st unix.Stat_t) bool {
	if trustedRecord(r.Owner, st.Uid) {
		return true
	}
	return r.Dev == uint64(st.Dev) && r.Ino == st.Ino && st.Nlink > 0 &&
		(st.Mode&0o002 != 0 || st.Mode&0o020 != 0 && r.Group == st.Gid)
}

// trusts is speaksFor for an Open of r's name: root and the counter's
// owner also take a record of the name that names the very counter they
// hold, whoever made it (a former owner or writer, before a chown or
// chmod): the record then follows the counter (hoststate.Handle.Conform).
// What another user could write there can only deny the name.
func trusts(r hoststate.Record, st unix.Stat_t) bool {
	if speaksFor(r, st) {
		return true
	}
	euid := uint32(os.Geteuid())
	return r.Dev == uint64(st.Dev) && r.Ino == st.Ino && st.Nlink > 0 && (euid == 0 || euid == st.Uid)
}

// judgeRecord refuses the record r of name for the counter at counterPath
// (identity dev, ino and owner uid; exists is false when there is no file
// there yet).
func judgeRecord(ctx context.Context, p *hoststate.Place, r hoststate.Record, name, counterPath string, dev, ino uint64, cst unix.Stat_t, exists bool, o *options) error {
	rp := p.RecordPath(name)
	who := statefile.UserName(r.Owner)
	remover := "user " + who + " or root"
	if r.Owner == 0 {
		remover = "root"
	}
	if !trusts(r, cst) {
		// Another user's record: it denies the name, and nothing it
		// says is followed (no path of it is looked at).
		return &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
			"%w: user %s recorded %q on this host (%s) for a counter of its own; two counter files under one name issue the same ids: "+
				"use another name, or have %s remove the record if that user no longer uses the name", ErrNameBound, who, name, rp, remover)}
	}
	if r.Released && !o.reg.reclaim {
		return &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
			"%w: %q was released on this host (recorded in %s); claim it again on purpose (snapctl register, or WithReclaim)", ErrReleased, name, rp)}
	}
	if exists && r.Dev == dev && r.Ino == ino {
		return nil
	}
	odev, oino, there, serr := counterIdentity(r.Path, false)
	switch {
	case there && odev == r.Dev && oino == r.Ino:
		return &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
			"%w: this host issues %q from the counter %s (user %s recorded it in %s), and two counter files under one name issue the same ids; "+
				"use that counter or another name", ErrNameBound, name, r.Path, who, rp)}
	case serr != nil:
		return &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
			"%w: this host issues %q from the counter %s (user %s recorded it in %s), which this user cannot look at (%w); "+
				"two counter files under one name issue the same ids: use that counter or another name", ErrNameBound, name, r.Path, who, rp, serr)}
	case r.Path == counterPath && exists && counterAtLeast(ctx, counterPath, r.Mark, o):
		// A replacement at the recorded path raised past every number the
		// record's counter may have handed out: it takes the name over
		// (see hostRecord.open); the old file's programs stop at the mark.
		return nil
	case r.Path == counterPath && exists:
		return &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
			"%w: %s is not the counter file this host issued %q from (recorded in %s, device %d inode %d, up to at most %d): it was replaced or made again, "+
				"or another file system is mounted there. Put the recorded counter back (mount its file system); if it is lost for good, raise this one past "+
				"every id issued (snapctl init --start %d), then have %s remove %s",
			ErrNameBound, counterPath, name, rp, r.Dev, r.Ino, r.Mark, r.Mark+1, remover, rp)}
	default:
		return &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
			"%w: this host issued %q from the counter %s (recorded in %s by user %s, up to at most %d), which is not there now "+
				"(a file system not mounted, a link re-pointed, a file moved?): a new counter would repeat its ids. Make that counter reachable again; "+
				"if it is lost for good, create this one past every id issued (snapctl init --start %d) and have %s remove %s",
			ErrNameBound, name, r.Path, rp, who, r.Mark, r.Mark+1, remover, rp)}
	}
}

// claimNumbers claims, for name, form's node number (node) and the
// host's stride in the place: each is an entry created without replacing
// ("#node-7", "#stride"), so of two Opens at the same moment one decides
// and the other is refused; a claim counts only if trust says its maker
// may speak for the counter (root, the caller, the counter's owner, or
// the writer of the counter who made the name's record). A stride of 0 (a
// registry's form before its claim) claims nothing.
func claimNumbers(p *hoststate.Place, name string, f idForm, node uint64, trust func(uid uint32) bool) error {
	if node != 0 {
		key := "#node-" + strconv.FormatUint(node, 10)
		got, owner, _, err := p.Claim(key, name)
		if err != nil {
			return recordError(p, key, err)
		}
		if got != name || !trust(owner) {
			// Another name's, or a claim of a user this Open cannot
			// trust with its number (one that user could remove or
			// rewrite at will): denied, never taken.
			return &FileError{Op: "open", Path: p.RecordPath(key), Err: fmt.Errorf(
				"%w: node number %d is claimed on this host for %q by user %s, and two names under one number issue the same ids; use another number, "+
					"or have that user or root remove %s if it is not in use", ErrNumberBound, node, got, statefile.UserName(owner), p.RecordPath(key))}
		}
	}
	if f.form == FormatStriped && f.stride != 0 {
		want := strconv.FormatUint(f.stride, 10)
		got, owner, _, err := p.Claim("#stride", want)
		if err != nil {
			return recordError(p, "#stride", err)
		}
		if got != want || !trust(owner) {
			return &FileError{Op: "open", Path: p.RecordPath("#stride"), Err: fmt.Errorf(
				"%w: this host's striped ids use stride %s (claimed by user %s), and ids of two strides collide (3021 is 302×10+1 and 30×100+21); use stride %s, "+
					"or have that user or root remove %s if no program uses it", ErrStrideMismatch, got, statefile.UserName(owner), got, p.RecordPath("#stride"))}
		}
	}
	return nil
}

// canIssue refuses, before anything is made or claimed, a counter at path
// that this user cannot write (or, missing, create), and one from which
// form f, when it claims a node number or stride, has no number left to
// hand out.
func canIssue(ctx context.Context, path string, exists bool, f idForm, o *options) error {
	if !exists {
		dir := filepath.Dir(path)
		if err := unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS); err != nil {
			return &FileError{Op: "create", Path: path, Err: fmt.Errorf("this user cannot create files in %s: %w", dir, err)}
		}
		return nil
	}
	if err := unix.Faccessat(unix.AT_FDCWD, path, unix.R_OK|unix.W_OK, unix.AT_EACCESS); err != nil {
		return &FileError{Op: "open", Path: path, Err: fmt.Errorf("this user cannot read and write the counter: %w", err)}
	}
	if f.limit == 0 || f.node == 0 && f.stride == 0 {
		// Nothing to claim (an exhausted counter opens, and its first
		// update fails), or a form the registry completes at its claim.
		return nil
	}
	v, err := readCounterAt(ctx, path, o)
	if err != nil {
		return err
	}
	return (&counterFile{path: path, form: &f}).fits(v, 1, f.form == FormatDecimal)
}

// withRecord runs open (which creates or opens the counter file) with the
// name's record judged first, before anything is created, and made or
// updated after: the returned hold keeps it. file returns the counter open
// has opened.
func withRecord(ctx context.Context, name, counterPath string, f idForm, o *options, open func() error, file func() *counterFile) (*hostRecord, error) {
	// A counter whose directory is missing, or whose path another user
	// could change, fails before anything is made for it, the place
	// included.
	if dir := filepath.Dir(counterPath); !dirExists(dir) {
		err := missingDirError(dir)
		if st, serr := os.Stat(dir); serr == nil && !st.IsDir() {
			err = fmt.Errorf("%s is not a directory: %w", dir, unix.ENOTDIR)
		}
		return nil, &FileError{Op: "create", Path: counterPath, Err: err}
	}
	if err := checkCounterPath(counterPath, o); err != nil {
		return nil, &FileError{Op: "open", Path: counterPath, Err: err}
	}
	// An existing counter that cannot be used fails before anything is
	// made for it, the place included.
	if _, err := os.Lstat(counterPath); err == nil {
		if _, err := readCounterAt(ctx, counterPath, o); err != nil {
			return nil, err
		}
	}
	p, own, err := recordPlace(ctx, counterPath, o, true)
	if err != nil {
		return nil, err
	}
	hr, err := withRecordIn(ctx, p, own, name, counterPath, f, o, open, file)
	if err != nil {
		p.Close()
		return nil, err
	}
	return hr, nil
}

func withRecordIn(ctx context.Context, p *hoststate.Place, own, name, counterPath string, f idForm, o *options, open func() error, file func() *counterFile) (_ *hostRecord, err error) {
	if err := migrateReleased(ctx, p, counterPath, o); err != nil {
		return nil, err
	}
	r, ok, err := p.Read(name)
	if errors.Is(err, fs.ErrPermission) {
		// Another user's record, which only that user (and the
		// counter's writers) may read: the name is that user's.
		who := "another user"
		var st unix.Stat_t
		if unix.Lstat(p.RecordPath(name), &st) == nil {
			who = "user " + statefile.UserName(st.Uid)
		}
		return nil, &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
			"%w: %s recorded %q on this host (%s) for a counter this user cannot read; two counter files under one name issue the same ids: "+
				"use another name, or have that user or root remove the record if the name is no longer used", ErrNameBound, who, name, p.RecordPath(name))}
	}
	if err != nil {
		return nil, recordError(p, name, err)
	}
	// The place and a record found in it may be there only in the
	// cache, made by an Open that failed at its sync: made durable
	// before anything is issued under them.
	if err := p.Sync(); err != nil {
		return nil, recordError(p, name, err)
	}
	if !ok && own != "" {
		if r, ok, err = adoptOwnRecord(p, own, name, o); err != nil {
			return nil, err
		}
	}
	if !ok {
		if r, ok, err = migrateBinding(p, name, o); err != nil {
			return nil, err
		}
	}
	dev, ino, exists, err := counterIdentity(counterPath, o.followSymlinks)
	if err != nil {
		return nil, &FileError{Op: "open", Path: counterPath, Err: err}
	}
	cst := unix.Stat_t{Uid: uint32(os.Geteuid())}
	if exists && unix.Lstat(counterPath, &cst) != nil {
		cst = unix.Stat_t{Uid: uint32(os.Geteuid())}
	}
	if ok {
		if err := judgeRecord(ctx, p, r, name, counterPath, dev, ino, cst, exists, o); err != nil {
			return nil, err
		}
	} else if exists {
		if err := oneNamePerCounter(p, name, counterPath, dev, ino, o.reg.reclaim); err != nil {
			return nil, err
		}
	}
	if ok && exists && o.reg.registry == nil && r.Dev == dev && r.Ino == ino {
		// Below the floor: refused before anything is opened or written
		// (the form's checks included); hostRecord.open checks again
		// under the lock.
		v, err := readCounterAt(ctx, counterPath, o)
		if err == nil && v < r.Floor {
			return nil, rolledBack(counterPath, v, r, p.RecordPath(name))
		}
		if err == nil && f.form == FormatStriped {
			// A form the counter's history refuses (a raise past its
			// bound) claims no number or stride either.
			if _, err := stripedRaise(r.Forms, f, v, counterPath); err != nil {
				return nil, err
			}
		}
	}
	// A claim made here is never given back, even if this Open fails:
	// another Open of the name may rely on it already, and an unused
	// claim only keeps the number for the name. So what would fail the
	// Open after it is found first: a counter this user cannot write or
	// create, or one already past the last number the form carries.
	if err := canIssue(ctx, counterPath, exists, f, o); err != nil {
		return nil, err
	}
	trust := func(uid uint32) bool { return trustedRecord(uid, cst.Uid) || ok && uid == r.Owner && trusts(r, cst) }
	if exists {
		v, err := readCounterAt(ctx, counterPath, o)
		if err != nil {
			return nil, err
		}
		if err := precheckOldFiles(p, r, name, counterPath, v, f, o, trust); err != nil {
			return nil, err
		}
	}
	if err := claimNumbers(p, name, f, f.node, trust); err != nil {
		return nil, err
	}
	if err := open(); err != nil {
		return nil, err
	}
	c := file()
	st, err := statefile.CheckRegular(c.fd)
	if err != nil {
		return nil, &FileError{Op: "open", Path: counterPath, Err: err}
	}
	if !ok {
		v, err := c.readContext(ctx)
		if err != nil {
			return nil, err
		}
		nr := hoststate.Record{Name: name, Dev: c.dev, Ino: c.ino, Path: counterPath, Floor: v, Mark: v, Forms: counterForms(p, c, st, v)}
		if f.form == FormatStriped && o.reg.registry == nil {
			// A form the counter's history refuses leaves no record.
			if _, err := stripedRaise(nr.Forms, f, v, counterPath); err != nil {
				return nil, err
			}
		}
		err = p.Create(nr, recordPerm(st))
		if errors.Is(err, fs.ErrExist) {
			// Another Open made it first: judged as any record.
			if r, ok, err = p.Read(name); err == nil && ok {
				err = judgeRecord(ctx, p, r, name, counterPath, c.dev, c.ino, st, true, o)
			}
		}
		if err != nil {
			return nil, recordError(p, name, err)
		}
	} else if (r.Dev != c.dev || r.Ino != c.ino) && !(r.Path == counterPath && counterAtLeast(ctx, counterPath, r.Mark, o)) || !trusts(r, st) {
		// Made or replaced between the check and the open.
		return nil, judgeRecord(ctx, p, r, name, counterPath, c.dev, c.ino, st, true, o)
	}
	h, err := p.OpenHandle(name)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			rr, _, _ := p.Read(name)
			err = fmt.Errorf("%w: the record belongs to %s and this user cannot write it; the counter's writers must be able to "+
				"(a record is made writable by the counter's group when the counter is)", err, statefile.UserName(rr.Owner))
		}
		return nil, recordError(p, name, err)
	}
	if euid := uint32(os.Geteuid()); euid == 0 || euid == h.Record().Owner {
		// A record made before the counter's owner, group or mode
		// changed follows them: its writers alone may open it.
		if err := h.Conform(recordPerm(st)); err != nil {
			o.logger.Warn("snapid: the record's owner and mode could not be made to follow the counter's", "record", h.Path(), "err", err)
		}
	}
	step := uint64(recordStep)
	if o.reg.registry != nil {
		// No more than the registry's step: a crash's gap stays within
		// the registry's bound.
		step = min(step, o.reg.step)
	}
	hr := &hostRecord{p: p, h: h, log: o.logger, dev: c.dev, ino: c.ino, step: step, trust: trust}
	if err := hr.open(ctx, c, f, o); err != nil {
		h.Close()
		return nil, err
	}
	return hr, nil
}

// recordPerm is who the record of a counter of status st belongs to: the
// counter's owner (root gives it; any other maker is one of the
// counter's writers and keeps it), so that a service's programs keep the
// record root made for the service's counter; and its writers alone may
// open it: its owner, its group when the group may write the counter
// (the group's programs keep the record), everyone when everyone may. No
// other user can read it, and so none can lock it (see hostRecord.open).
func recordPerm(st unix.Stat_t) hoststate.Perm {
	p := hoststate.Perm{Mode: 0o600, UID: -1, GID: -1}
	if os.Geteuid() == 0 {
		p.UID = int(st.Uid)
	}
	if st.Mode&0o020 != 0 {
		p.Mode |= 0o060
		p.GID = int(st.Gid)
	}
	if st.Mode&0o002 != 0 {
		p.Mode |= 0o006
	}
	return p
}

func recordError(p *hoststate.Place, name string, err error) error {
	if errors.Is(err, hoststate.ErrCorrupt) || errors.Is(err, statefile.ErrNotRegular) || errors.Is(err, statefile.ErrSymlink) ||
		errors.Is(err, statefile.ErrLinked) || errors.Is(err, statefile.ErrTooLarge) {
		rp := p.RecordPath(name)
		owner := "its owner"
		var st unix.Stat_t
		if unix.Lstat(rp, &st) == nil {
			owner = "user " + statefile.UserName(st.Uid)
		}
		err = fmt.Errorf("%w: %w; nothing is issued under it until it is fixed: check which counter file issues under the name and how far it went, "+
			"then have %s or root remove %s (the next Open records the counter it is given, from its value)", ErrCorruptBinding, err, owner, rp)
	}
	return &FileError{Op: "record", Path: p.RecordPath(name), Err: err}
}

// open takes the record's presence lock and checks the counter against the
// record under the counter's lock. Below the floor it was rolled back:
// refused (with a registry, raised; the registry's mark covers the rest).
// The first program of the name finding the counter below the mark (no
// clean close since: a crash, or a restore within the last step) raises it
// to the mark. Then the form and the counter's value are recorded.
func (hr *hostRecord) open(ctx context.Context, c *counterFile, f idForm, o *options) error {
	return c.withLockContext(ctx, func() error {
		// Presence, decided under the counter's lock, which every
		// opener takes: the first is the one whose exclusive try
		// succeeds (no other program holds the record). Only the
		// counter's writers can open the record (its mode), so none of
		// these waits on a stranger.
		first := hr.h.Lock(true)
		// Then its share, before the record is read: a Release (or a
		// closer) holding the lock exclusively meanwhile is waited for,
		// and this process counts from here on, so a Release sees it.
		if err := hr.h.LockShared(ctx); err != nil {
			return &FileError{Op: "record", Path: hr.h.Path(), Err: fmt.Errorf("%w: waiting for the name's presence lock (a Release, or a program closing): %w", ErrInUse, err)}
		}
		hr.present = true
		v, err := c.load()
		if err != nil {
			return err
		}
		unlock, err := writeLock(ctx, hr.h)
		if err != nil {
			return err
		}
		defer unlock()
		r, err := hr.h.Read()
		if err != nil {
			return &FileError{Op: "record", Path: hr.h.Path(), Err: err}
		}
		replaced := r.Dev != c.dev || r.Ino != c.ino
		if replaced && (r.Path != c.path || v < r.Mark) {
			return &FileError{Op: "record", Path: hr.h.Path(), Err: fmt.Errorf("%w: the record now names another counter (%s)", ErrNameBound, r.Path)}
		}
		if replaced {
			o.logger.Warn("snapid: the counter file at the recorded path was replaced by one past every number the old one may have handed out; the name goes with the new one",
				"path", c.path, "counter", v, "mark", r.Mark)
			r.Dev, r.Ino = c.dev, c.ino
			r.Floor, r.Mark = v, v
		}
		if r.Released && !o.reg.reclaim {
			// Released since this Open judged the record.
			return &FileError{Op: "record", Path: hr.h.Path(), Err: fmt.Errorf("%w: %q was released on this host meanwhile", ErrReleased, r.Name)}
		}
		if v < r.Floor && o.reg.registry == nil {
			return rolledBack(c.path, v, r, hr.h.Path())
		}
		if v < r.Floor || (first && v < r.Mark) {
			to := max(r.Floor, r.Mark)
			if err := c.store(to); err != nil {
				return err
			}
			o.logger.Warn("snapid: the counter was below the host's record of how far it went (after a crash, or restored or copied over); raised to it",
				"path", c.path, "counter", v, "to", to)
			v = to
		}
		moved := r.Path != c.path // the same file at another path: the record follows it
		r.Path = c.path
		changed := replaced || moved || v > r.Mark || r.Released
		r.Released = false // judged before: only a reclaim gets here
		// Files an earlier version kept beside the counter: taken into
		// the record, then removed (see migrate.go).
		old, err := readOldFiles(c.path, max(v, c.high))
		if err != nil {
			return err
		}
		if len(old.ours) > 0 {
			old.merge(&r, r.Name, max(v, c.high))
			old.claimOthers(hr.p, r.Name)
			changed = true
		}
		if o.reg.registry == nil || f.form == FormatName {
			// With a registry, the numeric forms once it gave the number
			// (see useRegistryForm).
			raised, adopted, err := adoptForm(c, &r, f)
			if err != nil {
				return err
			}
			logRaise(o, c.path, raised, f)
			changed = changed || adopted
		}
		if !changed {
			// (hr.mark stays 0: the first update writes the record, see
			// cover.)
			old.remove(o, hr.h.Path())
			return nil
		}
		// The floor moves only with values known to be on disk (see
		// counterFile.durable): one read here may be lost by a power cut.
		r.Mark = max(r.Mark, v)
		if err := hr.h.Write(r); err != nil {
			return &FileError{Op: "record", Path: hr.h.Path(), Err: err}
		}
		hr.mark = r.Mark
		old.remove(o, hr.h.Path())
		return nil
	})
}

// check runs under the counter's lock before every update from cur. The
// record is read once (a 4 KiB read compared with the copy last read,
// decoded only when it changed: one write a step of each process, see
// cover). A striped Generator's form must still be the counter's (see
// stillCurrent). A counter below the record's floor went back (restored
// or copied over in place while this process runs) further than what
// this process saw itself can tell: check returns the record's mark, at
// or above every number any program of the name may have handed out, to
// raise it to (0: no raise).
func (hr *hostRecord) check(cur uint64) (raise uint64, err error) {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	if hr.formLeft != nil {
		return 0, hr.formLeft
	}
	same, err := hr.h.Unchanged()
	if err != nil {
		return 0, &FileError{Op: "record", Path: hr.h.Path(), Err: err}
	}
	r := hr.h.Record()
	if !same {
		if r, err = hr.h.Read(); err != nil {
			return 0, &FileError{Op: "record", Path: hr.h.Path(), Err: err}
		}
	}
	if hr.striped != nil {
		if err := hr.stillCurrent(r, *hr.striped); err != nil {
			return 0, err
		}
	}
	if cur < r.Floor && r.Dev == hr.dev && r.Ino == hr.ino {
		return max(r.Floor, r.Mark), nil
	}
	return 0, nil
}

// due reports whether cover(…, upTo) writes the record.
func (hr *hostRecord) due(upTo uint64) bool {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	return !hr.present || upTo > hr.mark
}

// counterForms returns the forms the host's records of other names say
// the counter c (at v now) issued under, for a new record of a name for
// it (a name released and the counter taken for another on purpose): the
// history is the counter's. Records that do not speak for the counter
// (st, see trusts) are passed over; a form in use there is taken as left
// at v.
func counterForms(p *hoststate.Place, c *counterFile, st unix.Stat_t, v uint64) []hoststate.Form {
	var forms []hoststate.Form
	recs, _ := p.All(func(n string) bool { return ValidateName(n) == nil })
	for _, r := range recs {
		if r.Dev != c.dev || r.Ino != c.ino || !trusts(r, st) {
			continue
		}
		for _, e := range r.Forms {
			if e.Current {
				e.Current, e.Upto = false, max(e.Upto, v)
			}
			h := hoststate.Record{Forms: forms}
			if i := h.FormIndex(e); i >= 0 {
				forms[i].Upto = max(forms[i].Upto, e.Upto)
			} else {
				forms = append(forms, e)
			}
		}
	}
	return forms
}

// cover makes the record's mark cover upTo before the counter is stored at
// it (the caller holds the counter's lock): a write only when the counter
// passes the mark this process last wrote, which then goes a step ahead,
// and the floor to base, the highest value this process synced.
func (hr *hostRecord) cover(base, cur, upTo uint64) error {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	if hr.present && upTo <= hr.mark {
		return nil
	}
	unlock, err := writeLock(context.Background(), hr.h)
	if err != nil {
		return err
	}
	defer unlock()
	r, err := hr.h.Read()
	if err != nil {
		return &FileError{Op: "record", Path: hr.h.Path(), Err: err}
	}
	if r.Dev != hr.dev || r.Ino != hr.ino {
		// The name went with another counter (a replacement raised past
		// the mark): this one hands out nothing above it.
		return &FileError{Op: "record", Path: hr.h.Path(), Err: fmt.Errorf("%w: the host's record of the name now names another counter file (%s)", ErrNameBound, r.Path)}
	}
	if r.Released {
		return &FileError{Op: "record", Path: hr.h.Path(), Err: fmt.Errorf("%w: %q was released on this host while this process used it", ErrReleased, r.Name)}
	}
	// Written even when the record read covers upTo already: what was
	// read may be a write whose sync failed (visible, not durable, and a
	// later sync may report success without writing it), so a process
	// issues only under a mark it wrote and synced itself: one write a
	// step for each process.
	r.Floor = max(r.Floor, base)
	// A step ahead of the counter as it was (cur), and at least upTo: a
	// crash leaves a gap of at most a step.
	r.Mark = max(r.Mark, upTo)
	if cur <= MaxNumber-hr.step {
		r.Mark = max(r.Mark, cur+hr.step)
	} else {
		r.Mark = MaxNumber
	}
	if err := hr.h.Write(r); err != nil {
		return &FileError{Op: "record", Path: hr.h.Path(), Err: err}
	}
	hr.mark = r.Mark
	return nil
}

// raiseFloor records v, a value synced to the counter, as the floor (the
// caller holds the counter's lock).
func (hr *hostRecord) raiseFloor(v uint64) error {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	unlock, err := writeLock(context.Background(), hr.h)
	if err != nil {
		return err
	}
	defer unlock()
	r, err := hr.h.Read()
	if err != nil {
		return &FileError{Op: "record", Path: hr.h.Path(), Err: err}
	}
	if r.Dev != hr.dev || r.Ino != hr.ino || r.Floor >= v {
		return nil
	}
	r.Floor = v
	r.Mark = max(r.Mark, v)
	if err := hr.h.Write(r); err != nil {
		return &FileError{Op: "record", Path: hr.h.Path(), Err: err}
	}
	hr.mark = r.Mark
	return nil
}

// useRegistryForm, once the registry gave the name its node number (0:
// a registry that gives none) and the form its stride, claims them on
// the host (refused when another name of the host holds the number or
// the host uses another stride) and records the form (see adoptForm)
// before any id is handed out.
func (hr *hostRecord) useRegistryForm(ctx context.Context, c *counterFile, f idForm, node uint64, o *options) error {
	if err := claimNumbers(hr.p, hr.h.Record().Name, f, node, hr.trust); err != nil {
		return err
	}
	err := c.withLockContext(ctx, func() error {
		hr.mu.Lock()
		defer hr.mu.Unlock()
		unlock, err := writeLock(ctx, hr.h)
		if err != nil {
			return err
		}
		defer unlock()
		r, err := hr.h.Read()
		if err != nil {
			return &FileError{Op: "record", Path: hr.h.Path(), Err: err}
		}
		if r.Node != 0 && node != 0 && r.Node != node {
			return &FileError{Op: "record", Path: hr.h.Path(), Err: fmt.Errorf(
				"%w: the registry gave %q node number %d, but this host recorded %d for it", ErrNumberMismatch, r.Name, node, r.Node)}
		}
		changed := node != 0 && r.Node != node
		if node != 0 {
			r.Node = node
		}
		raised, adopted, err := adoptForm(c, &r, f)
		if err != nil {
			return err
		}
		logRaise(o, c.path, raised, f)
		if !changed && !adopted {
			return nil
		}
		if err := hr.h.Write(r); err != nil {
			return &FileError{Op: "record", Path: hr.h.Path(), Err: err}
		}
		hr.mark = r.Mark
		return nil
	})
	if err != nil {
		return err
	}
	hr.watchForm(f)
	return nil
}

// setNumber records in the name's record the node number and stride (0:
// not known) a registry gave the name, for the host's processes that
// join its claim; another number than the one recorded is refused
// (ErrNumberMismatch), and another stride (ErrStrideMismatch). with runs
// a function under the counter's lock.
func (hr *hostRecord) setNumber(ctx context.Context, with func(context.Context, func(*counterFile) error) error, node, stride uint64) error {
	return with(ctx, func(*counterFile) error {
		hr.mu.Lock()
		defer hr.mu.Unlock()
		unlock, err := writeLock(ctx, hr.h)
		if err != nil {
			return err
		}
		defer unlock()
		r, err := hr.h.Read()
		if err != nil {
			return &FileError{Op: "record", Path: hr.h.Path(), Err: err}
		}
		if r.Node != 0 && r.Node != node {
			return &FileError{Op: "open", Path: hr.h.Path(), Err: fmt.Errorf(
				"%w: the registry gives %q node number %d, and this host recorded %d; was the registry's row or this record replaced? Nothing was issued",
				ErrNumberMismatch, r.Name, node, r.Node)}
		}
		if r.Stride != 0 && stride != 0 && r.Stride != stride {
			return &FileError{Op: "open", Path: hr.h.Path(), Err: fmt.Errorf(
				"%w: the cluster's stride is %d, and this host recorded %d", ErrStrideMismatch, stride, r.Stride)}
		}
		if r.Node == node && (stride == 0 || r.Stride == stride) {
			return nil
		}
		r.Node, r.Stride = node, max(r.Stride, stride)
		if err := hr.h.Write(r); err != nil {
			return &FileError{Op: "record", Path: hr.h.Path(), Err: err}
		}
		hr.mark = r.Mark
		return nil
	})
}

// number returns the node number and stride the name's record holds
// (see setNumber), read again.
func (hr *hostRecord) number() (node, stride uint64, err error) {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	r, err := hr.h.Read()
	if err != nil {
		return 0, 0, &FileError{Op: "record", Path: hr.h.Path(), Err: err}
	}
	return r.Node, r.Stride, nil
}

// recordLockWait bounds every wait for a record's write lock: a program
// holds it for one read and one write (a sync), so a longer wait is a
// process holding it on purpose, and the caller gets ErrLocked instead of
// hanging, whatever its context.
const recordLockWait = 10 * time.Second

// writeLock takes h's write lock (see hoststate.Handle.WriteLock),
// waiting no longer than ctx allows, and never longer than recordLockWait.
func writeLock(ctx context.Context, h *hoststate.Handle) (unlock func(), err error) {
	ctx, cancel := context.WithTimeout(ctx, recordLockWait)
	defer cancel()
	unlock, err = h.WriteLock(ctx)
	if err != nil {
		return unlock, &FileError{Op: "record", Path: h.Path(), Err: fmt.Errorf("%w: %w", ErrLocked, err)}
	}
	return unlock, nil
}

// close: the last program of the name (no other holds the presence lock)
// records the counter's value as the mark, and as the floor as far as it
// synced it, so that the next start finds a clean close.
//
// Holding the presence lock alone is what makes the counter still: every
// program of the name holds it shared while it issues. The counter's lock
// is taken when it can be had at once; when it cannot, its holder is one
// opening the name (it waits for the presence lock next, and must find
// the clean close, not a crash) or an operator raising the counter, and
// the record is closed without it: a value raised meanwhile is above the
// mark written, which reads as clean.
func (hr *hostRecord) close(c *counterFile) {
	defer hr.drop()
	if !hr.present || !hr.h.Lock(true) {
		// Others use the name: the last of them closes the record. (A
		// closer that is not the last holds no lock here, so that it
		// never keeps the last one from its write.)
		return
	}
	write := func() error {
		v, err := c.load()
		if err != nil {
			return err
		}
		hr.mu.Lock()
		defer hr.mu.Unlock()
		unlock, err := writeLock(context.Background(), hr.h)
		if err != nil {
			return err
		}
		defer unlock()
		r, err := hr.h.Read()
		if err != nil || r.Dev != c.dev || r.Ino != c.ino || v < r.Floor {
			return err
		}
		floor := max(r.Floor, min(c.durable, v))
		if floor == r.Floor && r.Mark == v {
			return nil
		}
		r.Floor = floor
		r.Mark = v // a clean close: the next start goes on from v
		return hr.h.Write(r)
	}
	if err := c.tryWithLock(write); errors.Is(err, unix.EWOULDBLOCK) {
		_ = write()
	}
}

// drop closes the record and its place.
func (hr *hostRecord) drop() {
	hr.h.Close()
	hr.p.Close()
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
		// The home hidden from a hardened service (ProtectHome=yes): a
		// record kept there while the host had no place stays there.
		o.logger.Warn("snapid: this user's own place of records cannot be looked at (a home hidden from a service?); the host's place alone is used",
			"place", own, "err", err)
		return hoststate.Record{}, false, nil
	}
	if err != nil {
		return hoststate.Record{}, false, &FileError{Op: "record", Path: own, Err: err}
	}
	defer op.Close()
	r, ok, err := op.Read(name)
	if err != nil {
		return r, false, recordError(op, name, err)
	}
	if !ok {
		return r, false, nil
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
	r, ok, err = p.Read(name)
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
	var dirs []string
	if o.bindingSet || os.Getenv("SNAPID_BINDING_DIR") != "" || testBindingDir != nil {
		return hoststate.Record{}, false, nil
	}
	if os.Geteuid() == 0 {
		dirs = []string{"/var/lib/snapid/names"}
	} else if home, err := os.UserHomeDir(); err == nil {
		dirs = []string{filepath.Join(home, ".local", "state", "snapid", "names")}
	}
	for _, d := range dirs {
		b, _, err := statefile.ReadSmall(filepath.Join(d, name), false)
		if err != nil {
			continue
		}
		header, rest, _ := strings.Cut(string(b), "\n")
		quoted, _, _ := strings.Cut(rest, "\n")
		if header != "snapid-binding 1" || len(quoted) < 2 {
			continue
		}
		path := strings.Trim(quoted, `"`)
		var st unix.Stat_t
		if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || !trustedRecord(st.Uid, uint32(os.Geteuid())) {
			continue
		}
		v, _ := ReadCounter(path)
		r := hoststate.Record{Name: name, Dev: st.Dev, Ino: st.Ino, Path: path, Floor: v, Mark: v}
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

// holdRecordAlone takes the host's record of name for the counter c
// exclusively, refused (ErrInUse) while any program of the host uses the
// name, with a registry or not; it returns the record's mark when the
// record names c (0 otherwise, or when there is no record) and the
// function that lets the record go.
func holdRecordAlone(ctx context.Context, c *counterFile, name string, o *options) (mark uint64, done func(), err error) {
	p, _, err := recordPlace(ctx, c.path, o, false)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, func() {}, nil
	}
	if err != nil {
		return 0, func() {}, err
	}
	h, err := p.OpenHandle(name)
	if errors.Is(err, fs.ErrNotExist) {
		p.Close()
		return 0, func() {}, nil
	}
	if err != nil {
		err = recordError(p, name, err)
		p.Close()
		return 0, nil, err
	}
	done = func() { h.Close(); p.Close() }
	if !h.Lock(true) {
		done()
		return 0, nil, fmt.Errorf("snapid: cannot release %q: %w: a program of this host uses the name (it holds %s); stop it first", name, ErrInUse, h.Path())
	}
	r, err := h.Read()
	if err != nil {
		done()
		return 0, nil, recordError(p, name, err)
	}
	if r.Dev == c.dev && r.Ino == c.ino {
		mark = r.Mark
	}
	return mark, done, nil
}

// markRecordReleased records in the host's record of name that it was
// released, with final as its floor (raised to the counter's value and
// the record's mark, read under the counter's lock; the value it
// returns): every program of the host, with a registry or not, then
// refuses the name until it is claimed again on purpose (WithReclaim).
func markRecordReleased(ctx context.Context, c *counterFile, name string, final uint64, o *options) (uint64, error) {
	p, _, err := recordPlace(ctx, c.path, o, true)
	if err != nil {
		return 0, err
	}
	defer p.Close()
	return markReleasedIn(ctx, p, c, name, final)
}

// markReleasedIn is markRecordReleased in the place p.
func markReleasedIn(ctx context.Context, p *hoststate.Place, c *counterFile, name string, final uint64) (uint64, error) {
	if _, ok, err := p.Read(name); err != nil {
		return 0, recordError(p, name, err)
	} else if !ok {
		// No record yet (made before records were kept): one is made,
		// released, for this counter.
		st, err := statefile.CheckRegular(c.fd)
		if err != nil {
			return 0, &FileError{Op: "release", Path: c.path, Err: err}
		}
		r := hoststate.Record{Name: name, Dev: c.dev, Ino: c.ino, Path: c.path, Released: true, Mark: min(final, MaxNumber)}
		if err := p.Create(r, recordPerm(st)); err != nil && !errors.Is(err, fs.ErrExist) {
			return 0, recordError(p, name, err)
		}
	}
	h, err := p.OpenHandle(name)
	if err != nil {
		return 0, recordError(p, name, err)
	}
	defer h.Close()
	err = c.withLockContext(ctx, func() error {
		unlock, err := writeLock(ctx, h)
		if err != nil {
			return err
		}
		defer unlock()
		r, err := h.Read()
		if err != nil {
			return err
		}
		// The name is released on this host, whichever counter the
		// record names (a replacement not adopted yet, say). The last
		// number is read again under the lock: at or above the
		// counter now and the record's mark.
		r.Released = true
		if r.Dev == c.dev && r.Ino == c.ino {
			cur, err := c.load()
			if err != nil {
				return err
			}
			final = max(final, cur, r.Mark)
			r.Floor = max(r.Floor, min(c.durable, final))
			r.Mark = max(r.Mark, min(final, MaxNumber))
		}
		return h.Write(r)
	})
	return final, err
}

// tryWithLock runs fn under the counter's lock if it can be had at once.
func (c *counterFile) tryWithLock(fn func() error) error {
	if c.broken != nil {
		return c.broken
	}
	if err := unix.Flock(c.fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return err
	}
	defer c.unlock()
	if err := c.checkIdentity(); err != nil {
		return err
	}
	return fn()
}

// counterAtLeast reports whether the counter file at path holds at least
// v (read under its lock, waiting no longer than ctx allows; false when it
// cannot be read).
func counterAtLeast(ctx context.Context, path string, v uint64, o *options) bool {
	got, err := readCounterAt(ctx, path, o)
	return err == nil && got >= v
}

// oneNamePerCounter refuses a name for an existing counter that the host
// records under another name: one counter serves one name; one whose name
// was released takes another only on purpose (reclaim). (Two names on
// one counter would not repeat each other's ids, so records that cannot
// be read are passed over here: they deny no other name.)
func oneNamePerCounter(p *hoststate.Place, name, counterPath string, dev, ino uint64, reclaim bool) error {
	recs, _ := p.All(func(n string) bool { return ValidateName(n) == nil })
	for _, r := range recs {
		if r.Name == name || r.Dev != dev || r.Ino != ino {
			continue
		}
		if r.Released && !reclaim {
			return &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
				"%w: this counter's name %q was released on this host (recorded in %s); the counter takes a name again only on purpose (snapctl register, or WithReclaim)",
				ErrReleased, r.Name, p.RecordPath(r.Name))}
		}
		if !r.Released {
			return &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
				"%w: this counter holds the name %q on this host (recorded in %s); one counter serves one name: use another counter for %q, "+
					"or, if %q is no longer this host's (taken over by another host), remove %s",
				ErrNameMismatch, r.Name, p.RecordPath(r.Name), name, r.Name, p.RecordPath(r.Name))}
		}
	}
	return nil
}

// lowerRecords sets the floor and the mark of every record of the host
// naming the counter c, or its path, to v, and their counter to c (a
// repair; the caller holds c's lock).
func lowerRecords(ctx context.Context, c *counterFile, v uint64, o *options) error {
	p, _, err := recordPlace(ctx, c.path, o, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no records: nothing to lower
	}
	if err != nil {
		return err
	}
	defer p.Close()
	recs, _ := p.All(func(n string) bool { return ValidateName(n) == nil })
	for _, r := range recs {
		if (r.Dev != c.dev || r.Ino != c.ino) && r.Path != c.path {
			continue
		}
		h, err := p.OpenHandle(r.Name)
		if err != nil {
			return recordError(p, r.Name, err)
		}
		unlock, err := writeLock(ctx, h)
		if err == nil {
			r, err = h.Read()
		}
		if err == nil {
			// A counter replaced at the recorded path is the repaired
			// one now: the operator vouched for its value.
			r.Dev, r.Ino, r.Path = c.dev, c.ino, c.path
			r.Floor, r.Mark = min(r.Floor, v), v
			err = h.Write(r)
		}
		unlock()
		h.Close()
		if err != nil {
			return recordError(p, r.Name, err)
		}
	}
	return nil
}

// rolledBack is the refusal of a counter found at v, below the floor of
// its record r (at recordPath).
func rolledBack(path string, v uint64, r hoststate.Record, recordPath string) error {
	return &FileError{Op: "open", Path: path, Err: fmt.Errorf(
		"%w: the counter holds %d, but it had reached %d (recorded in %s): it was restored from a backup, copied over or zeroed, "+
			"and issuing from it would repeat ids; raise it past every id issued (snapctl init --start %d)",
		ErrRolledBack, v, r.Floor, recordPath, r.Mark+1)}
}

// readCounterAt reads the counter file at path under its lock, waiting no
// longer than ctx allows.
func readCounterAt(ctx context.Context, path string, o *options) (uint64, error) {
	c, err := openReadOnly(path, o)
	if err != nil {
		return 0, err
	}
	defer c.close()
	return c.readContext(ctx)
}

// nameInRecords is the name the host's records give the counter at path
// (by device and inode), and whether it was released there; "" if none
// does or the records cannot be read.
func nameInRecords(path string, o *options) (name string, released bool) {
	if recs := recordsOfCounter(path, o); len(recs) > 0 {
		return recs[0].Name, recs[0].Released
	}
	return "", false
}

// releasedInRecords returns the name the host's records say was released
// with the counter at path ("" if none, or if they cannot be read: it
// reports, and decides nothing).
func releasedInRecords(path string, o *options) string {
	for _, r := range recordsOfCounter(path, o) {
		if r.Released {
			return r.Name
		}
	}
	return ""
}

// recordsOfCounter returns the host's records that name the counter at
// path (by device and inode) and speak for it (see trusts); none if the
// records cannot be read.
func recordsOfCounter(path string, o *options) []hoststate.Record {
	dev, ino, ok, err := counterIdentity(path, o.followSymlinks)
	if err != nil || !ok {
		return nil
	}
	p, _, err := recordPlace(context.Background(), path, o, false)
	if err != nil {
		return nil
	}
	defer p.Close()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil
	}
	var of []hoststate.Record
	recs, _ := p.All(func(n string) bool { return ValidateName(n) == nil })
	for _, r := range recs {
		if r.Dev == dev && r.Ino == ino && speaksFor(r, st) {
			of = append(of, r)
		}
	}
	return of
}
