package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/snapid/snapid/internal/hoststate"
	"github.com/snapid/snapid/internal/idform"
	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// Whether an Open may use a name on this host: the name's record judged
// (whose it is, which counter it names, released or rolled back), the
// host's claims of node numbers and stride, and the record made or opened
// before anything is issued (withRecord).

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
func claimNumbers(p *hoststate.Place, name string, f idform.Form, node uint64, trust func(uid uint32) bool) error {
	// The stride first, read only: an Open the host's stride refuses
	// claims no node number (the claims are never given back).
	if f.Format == FormatStriped && f.Stride != 0 {
		want := strconv.FormatUint(f.Stride, 10)
		got, owner, ok, err := p.Lookup("#stride")
		if err != nil {
			return recordError(p, "#stride", err)
		}
		if ok && (got != want || !trust(owner)) {
			return strideRefused(p, got, owner)
		}
	}
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
	if f.Format == FormatStriped && f.Stride != 0 {
		want := strconv.FormatUint(f.Stride, 10)
		got, owner, _, err := p.Claim("#stride", want)
		if err != nil {
			return recordError(p, "#stride", err)
		}
		if got != want || !trust(owner) {
			return strideRefused(p, got, owner)
		}
	}
	return nil
}

// strideRefused is the refusal of a stride other than the host's, got,
// claimed by owner.
func strideRefused(p *hoststate.Place, got string, owner uint32) error {
	return &FileError{Op: "open", Path: p.RecordPath("#stride"), Err: fmt.Errorf(
		"%w: this host's striped ids use stride %s (claimed by user %s), and ids of two strides collide (3021 is 302×10+1 and 30×100+21); use stride %s, "+
			"or have that user or root remove %s if no program uses it", ErrStrideMismatch, got, statefile.UserName(owner), got, p.RecordPath("#stride"))}
}

// canIssue refuses, before anything is made or claimed, a counter at path
// that this user cannot write (or, missing, create), and one from which
// form f, when it claims a node number or stride, has no number left to
// hand out.
func canIssue(ctx context.Context, path string, exists bool, f idform.Form, o *options) error {
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
	if f.Limit == 0 || f.Node == 0 && f.Stride == 0 {
		// Nothing to claim (an exhausted counter opens, and its first
		// update fails), or a form the registry completes at its claim.
		return nil
	}
	v, err := readCounterAt(ctx, path, o)
	if err != nil {
		return err
	}
	return idform.Fits(path, &f, v, 1, f.Format == FormatDecimal)
}

// withRecord runs open (which creates or opens the counter file) with the
// name's record judged first, before anything is created, and made or
// updated after: the returned hold keeps it. file returns the counter open
// has opened.
func withRecord(ctx context.Context, name, counterPath string, f idform.Form, o *options, open func() error, file func() *counterFile) (*hostRecord, error) {
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

func withRecordIn(ctx context.Context, p *hoststate.Place, own, name, counterPath string, f idform.Form, o *options, open func() error, file func() *counterFile) (_ *hostRecord, err error) {
	r, ok, err := findRecord(ctx, p, own, name, counterPath, o)
	if err != nil {
		return nil, err
	}
	dev, ino, exists, err := counterIdentity(counterPath, o.followSymlinks)
	if err != nil {
		return nil, &FileError{Op: "open", Path: counterPath, Err: err}
	}
	cst := unix.Stat_t{Uid: uint32(os.Geteuid())}
	if exists && unix.Lstat(counterPath, &cst) != nil {
		cst = unix.Stat_t{Uid: uint32(os.Geteuid())}
	}
	if err := judgeBeforeOpen(ctx, p, r, ok, name, counterPath, dev, ino, cst, exists, f, o); err != nil {
		return nil, err
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
	if err := claimNumbers(p, name, f, f.Node, trust); err != nil {
		return nil, err
	}
	if err := open(); err != nil {
		return nil, err
	}
	c := file()
	st, err := statefile.CheckRegular(c.Fd())
	if err != nil {
		return nil, &FileError{Op: "open", Path: counterPath, Err: err}
	}
	recorded := ok
	if r, ok, err = recordOpenedCounter(ctx, p, r, ok, name, counterPath, c, st, f, o); err != nil {
		return nil, err
	}
	hr, err := openRecordHandle(ctx, p, name, c, st, f, o, trust)
	if err == nil {
		hr.made = !recorded && !ok // this Open made the record
	}
	return hr, err
}

// findRecord reads the record of name, taking in files of earlier
// versions when there is none.
func findRecord(ctx context.Context, p *hoststate.Place, own, name, counterPath string, o *options) (hoststate.Record, bool, error) {
	if err := migrateReleased(ctx, p, counterPath, o); err != nil {
		return hoststate.Record{}, false, err
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
		return r, false, &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
			"%w: %s recorded %q on this host (%s) for a counter this user cannot read; two counter files under one name issue the same ids: "+
				"use another name, or have that user or root remove the record if the name is no longer used", ErrNameBound, who, name, p.RecordPath(name))}
	}
	if err != nil {
		return r, false, recordError(p, name, err)
	}
	// The place and a record found in it may be there only in the
	// cache, made by an Open that failed at its sync: made durable
	// before anything is issued under them.
	if err := p.Sync(); err != nil {
		return r, false, recordError(p, name, err)
	}
	if !ok && own != "" {
		if r, ok, err = adoptOwnRecord(p, own, name, o); err != nil {
			return r, false, err
		}
	}
	if !ok {
		if r, ok, err = migrateBinding(p, name, o); err != nil {
			return r, false, err
		}
	}
	return r, ok, nil
}

// judgeBeforeOpen judges the record r of name (ok: there is one) against
// the counter (dev, ino, its status cst; exists: it is there) before
// anything is opened or written.
func judgeBeforeOpen(ctx context.Context, p *hoststate.Place, r hoststate.Record, ok bool, name, counterPath string, dev, ino uint64, cst unix.Stat_t, exists bool, f idform.Form, o *options) error {
	if ok {
		if err := judgeRecord(ctx, p, r, name, counterPath, dev, ino, cst, exists, o); err != nil {
			return err
		}
	} else if exists {
		if err := oneNamePerCounter(p, name, counterPath, dev, ino, o.reg.reclaim); err != nil {
			return err
		}
	}
	if !ok || !exists || o.reg.registry != nil || r.Dev != dev || r.Ino != ino {
		return nil
	}
	// Below the floor: refused before anything is opened or written (the
	// form's checks included); hostRecord.open checks again under the
	// lock.
	v, err := readCounterAt(ctx, counterPath, o)
	if err == nil && v < r.Floor {
		return rolledBack(counterPath, v, r, p.RecordPath(name))
	}
	if err == nil && f.Format == FormatStriped {
		// A form the counter's history refuses (a raise past its bound)
		// claims no number or stride either.
		if _, err := stripedRaise(r.Forms, f, v, counterPath); err != nil {
			return err
		}
	}
	return nil
}

// recordOpenedCounter makes the record of the opened counter c (status
// st) if there was none (r, ok). It returns r and ok as the caller's trust
// must see them: unchanged when this call made the record (ok stays
// false), the record another Open made first when that one is judged. A
// record that changed since it was read is judged again: the Open goes on
// only if the judgement lets it (a replacement at the recorded path raised
// past the mark between the two looks, say), as it does before the open.
func recordOpenedCounter(ctx context.Context, p *hoststate.Place, r hoststate.Record, ok bool, name, counterPath string, c *counterFile, st unix.Stat_t, f idform.Form, o *options) (hoststate.Record, bool, error) {
	if ok {
		if (r.Dev != c.Dev() || r.Ino != c.Ino()) && !(r.Path == counterPath && counterAtLeast(ctx, counterPath, r.Mark, o)) || !trusts(r, st) {
			// Made or replaced between the check and the open.
			return r, ok, judgeRecord(ctx, p, r, name, counterPath, c.Dev(), c.Ino(), st, true, o)
		}
		return r, ok, nil
	}
	v, err := c.ReadContext(ctx)
	if err != nil {
		return r, ok, err
	}
	nr := hoststate.Record{Name: name, Dev: c.Dev(), Ino: c.Ino(), Path: counterPath, Floor: v, Mark: v, Forms: counterForms(p, c, st, v)}
	if f.Format == FormatStriped && o.reg.registry == nil {
		// A form the counter's history refuses leaves no record.
		if _, err := stripedRaise(nr.Forms, f, v, counterPath); err != nil {
			return r, ok, err
		}
	}
	err = p.Create(nr, recordPerm(st))
	if errors.Is(err, fs.ErrExist) {
		// Another Open made it first: judged as any record.
		if r, ok, err = p.Read(name); err == nil && ok {
			err = judgeRecord(ctx, p, r, name, counterPath, c.Dev(), c.Ino(), st, true, o)
		}
	}
	if err != nil {
		return r, ok, recordError(p, name, err)
	}
	return r, ok, nil
}

// openRecordHandle opens the record of name for the counter c (status
// st) and the Generator's hold on it.
func openRecordHandle(ctx context.Context, p *hoststate.Place, name string, c *counterFile, st unix.Stat_t, f idform.Form, o *options, trust func(uint32) bool) (*hostRecord, error) {
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
	hr := &hostRecord{Hold: hoststate.NewHold(h, c.Dev(), c.Ino(), step), p: p, h: h, log: o.logger, trust: trust}
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
			"then have %s or root remove %s (the next Open records the counter it is given, from its value)", errCorruptBinding, err, owner, rp)
	}
	return &FileError{Op: "record", Path: p.RecordPath(name), Err: err}
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
	defer c.Close()
	return c.ReadContext(ctx)
}
