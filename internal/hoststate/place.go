package hoststate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// DefaultDir is the host's one place for records: a directory root makes
// with mode 1777 (every user may add a record, and the sticky bit lets
// only a record's owner, or root, remove or replace it), under a
// root-owned /var/lib/snapid that only root can write.
const DefaultDir = "/var/lib/snapid/records"

// Place is a directory of records, opened once (every level without
// following links) and reached through its descriptor.
type Place struct {
	dir *statefile.Dir
}

// PlaceOptions says how to open a place.
type PlaceOptions struct {
	// Create makes the place if it is missing: its parents with mode
	// 0755 and the place itself with Mode.
	Create bool
	Mode   uint32
	// Owners are the users the place and every level above it may belong
	// to (root and the caller, say).
	Owners []uint32
	// FS is the file-system seam (nil: the real one).
	FS statefile.FS
}

// OpenPlace opens the place at the absolute path. The place may be
// writable by others only with the sticky bit: no one then replaces
// another user's record. Nothing here ever reads as "no records": a place
// that cannot be reached is an error (fs.ErrNotExist when it does not
// exist and Create is not set).
func OpenPlace(path string, o PlaceOptions) (*Place, error) {
	mode := o.Mode
	if mode == 0 {
		mode = 0o700
	}
	if o.Create {
		parent := filepath.Dir(path)
		d, err := statefile.OpenDir(parent, statefile.DirOptions{Create: true, Perm: 0o755, Owners: o.Owners, AllowSticky: true, FS: o.FS})
		if err != nil {
			return nil, err
		}
		err = unix.Mkdirat(dirFd(d), filepath.Base(path), mode&0o777)
		if err == nil {
			// mkdir masks the mode with the umask and never sets the
			// sticky bit: set it whole on the new directory.
			if cerr := chmodAt(d, filepath.Base(path), mode); cerr != nil {
				d.Close()
				return nil, cerr
			}
			if serr := d.Sync(); serr != nil {
				d.Close()
				return nil, fmt.Errorf("sync directory %s: %w", parent, serr)
			}
		}
		d.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, &fs.PathError{Op: "mkdir", Path: path, Err: err}
		}
	}
	d, err := statefile.OpenDir(path, statefile.DirOptions{Owners: o.Owners, AllowSticky: true, FS: o.FS})
	if err != nil {
		return nil, err
	}
	if m := d.Mode(); m&0o022 != 0 && m&unix.S_ISVTX == 0 {
		d.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: statefile.ErrUnsafeDir}
	}
	return &Place{dir: d}, nil
}

// Path returns the place's path.
func (p *Place) Path() string { return p.dir.Path() }

// Close closes the place.
func (p *Place) Close() error { return p.dir.Close() }

// RecordPath returns the path of name's record.
func (p *Place) RecordPath(name string) string { return filepath.Join(p.dir.Path(), name) }

// Read returns name's record; ok is false when there is none. A record
// that cannot be read or is damaged is an error, never "none".
func (p *Place) Read(name string) (r Record, ok bool, err error) {
	for range 3 {
		f, st, err := p.dir.OpenFile(name, false)
		if errors.Is(err, fs.ErrNotExist) {
			return Record{}, false, nil
		}
		if errors.Is(err, statefile.ErrLinked) && st.Nlink == 0 {
			continue // removed as it was opened: look again
		}
		if err != nil {
			return Record{}, false, err
		}
		r, _, err = readOpen(f, st, name)
		f.Close()
		return r, err == nil, err
	}
	return Record{}, false, fmt.Errorf("%s: removed and made again while read, three times", p.RecordPath(name))
}

// readOpen reads the record in the open file f (status st).
func readOpen(f *os.File, st unix.Stat_t, name string) (Record, int, error) {
	return readOpenInto(f, st, name, make([]byte, FileSize+1))
}

// readOpenInto is readOpen reading into b (FileSize+1 bytes).
func readOpenInto(f *os.File, st unix.Stat_t, name string, b []byte) (Record, int, error) {
	n, err := f.ReadAt(b, 0)
	if err != nil && n < len(b) && !errors.Is(err, io.EOF) {
		return Record{}, 0, &fs.PathError{Op: "read", Path: f.Name(), Err: err}
	}
	r, slot, err := decode(b[:n], name)
	if err != nil {
		return Record{}, 0, &fs.PathError{Op: "read", Path: f.Name(), Err: err}
	}
	r.Owner, r.Group = st.Uid, st.Gid
	return r, slot, nil
}

// Perm is who a record belongs to: its mode, owner and group (-1: the
// creator's).
type Perm struct {
	Mode     uint32
	UID, GID int
}

// Create makes name's record holding r (both slots, generation 1 unless
// r has one), with perm. It fails with fs.ErrExist when the name has a
// record: never replaced.
func (p *Place) Create(r Record, perm Perm) error {
	if r.Gen == 0 {
		r.Gen = 1
	}
	b, err := encode(r)
	if err != nil {
		return err
	}
	return p.dir.CreateOwned(r.Name, b, perm.Mode, perm.UID, perm.GID)
}

// Replace puts r in place of name's record (a new file renamed over it):
// only its owner or root can, in a sticky place.
func (p *Place) Replace(r Record, mode uint32) error {
	if r.Gen == 0 {
		r.Gen = 1
	}
	b, err := encode(r)
	if err != nil {
		return err
	}
	return p.dir.Replace(r.Name, b, mode)
}

// Remove removes name's record.
func (p *Place) Remove(name string) error { return p.dir.Remove(name) }

// All returns every record in the place, by name. Entries that are not
// node names (temporary files start with ".") are skipped; a record that
// cannot be read is returned in errs, which the caller must not take for
// "no record".
func (p *Place) All(valid func(string) bool) (recs []Record, errs []error) {
	names, err := p.dir.Names()
	if err != nil {
		return nil, []error{err}
	}
	sort.Strings(names)
	for _, n := range names {
		if !valid(n) {
			continue
		}
		r, ok, err := p.Read(n)
		switch {
		case err != nil:
			errs = append(errs, err)
		case ok:
			recs = append(recs, r)
		}
	}
	return recs, errs
}

// Handle is a record opened for writing, kept open while a program uses
// the name: the newest copy it read, and the slot that copy is in.
type Handle struct {
	f    *os.File
	st   unix.Stat_t
	name string
	rec  Record
	slot int
	fs   statefile.FS // writes and syncs go through it
	// img is the file as last read or written (see Unchanged); buf is
	// where it is read.
	img [FileSize]byte
	buf [FileSize + 1]byte
}

// OpenHandle opens name's record for reading and writing.
func (p *Place) OpenHandle(name string) (*Handle, error) {
	f, st, err := p.dir.OpenFile(name, true)
	if err != nil {
		return nil, err
	}
	h := &Handle{f: f, st: st, name: name, fs: p.dir.FS()}
	if _, err := h.Read(); err != nil {
		f.Close()
		return nil, err
	}
	return h, nil
}

// Conform gives the record perm where it differs (an owner or group of -1
// is left as it is): as far as this user may, which is all of it for
// root and the mode and group for the record's owner.
func (h *Handle) Conform(perm Perm) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(h.f.Fd()), &st); err != nil {
		return &fs.PathError{Op: "stat", Path: h.f.Name(), Err: err}
	}
	uid, gid := -1, -1
	if perm.UID >= 0 && uint32(perm.UID) != st.Uid {
		uid = perm.UID
	}
	if perm.GID >= 0 && uint32(perm.GID) != st.Gid {
		gid = perm.GID
	}
	if uid >= 0 || gid >= 0 {
		if err := unix.Fchown(int(h.f.Fd()), uid, gid); err != nil {
			return &fs.PathError{Op: "chown", Path: h.f.Name(), Err: err}
		}
	}
	if st.Mode&0o7777 != perm.Mode || uid >= 0 || gid >= 0 {
		// (chown may clear set-id bits; the mode is set after it.)
		if err := unix.Fchmod(int(h.f.Fd()), perm.Mode); err != nil {
			return &fs.PathError{Op: "chmod", Path: h.f.Name(), Err: err}
		}
	}
	if err := unix.Fstat(int(h.f.Fd()), &h.st); err != nil {
		return &fs.PathError{Op: "stat", Path: h.f.Name(), Err: err}
	}
	h.rec.Owner, h.rec.Group = h.st.Uid, h.st.Gid
	return nil
}

// Read reads the record again (another process of the host may have
// written it) and returns it.
func (h *Handle) Read() (Record, error) {
	r, slot, err := readOpenInto(h.f, h.st, h.name, h.buf[:])
	if err != nil {
		return Record{}, err
	}
	h.rec, h.slot = r, slot
	copy(h.img[:], h.buf[:FileSize])
	return r, nil
}

// Unchanged reports whether the record file holds exactly what was last
// read or written through h: one read of the file and a comparison, no
// decoding, nothing allocated. false (changed, or not a whole record)
// calls for Read.
func (h *Handle) Unchanged() (bool, error) {
	n, err := h.f.ReadAt(h.buf[:], 0)
	if err != nil && n < len(h.buf) && !errors.Is(err, io.EOF) {
		return false, &fs.PathError{Op: "read", Path: h.f.Name(), Err: err}
	}
	return n == FileSize && bytes.Equal(h.buf[:FileSize], h.img[:]), nil
}

// Record returns the copy last read or written.
func (h *Handle) Record() Record { return h.rec }

// Write writes r as the next generation into the slot the newest copy is
// not in, and syncs it: a write torn by a crash leaves the newest copy
// whole. Callers hold WriteLock from the Read this write follows.
func (h *Handle) Write(r Record) error {
	r.Name = h.name
	r.Gen = h.rec.Gen + 1
	b, err := encodeSlot(r)
	if err != nil {
		return err
	}
	slot := 1 - h.slot
	if err := statefile.WriteInPlaceAt(h.fs, h.f, b, int64(slot*SlotSize), true); err != nil {
		return &fs.PathError{Op: "write", Path: h.f.Name(), Err: err}
	}
	r.Owner, r.Group = h.rec.Owner, h.rec.Group
	h.rec, h.slot = r, slot
	copy(h.img[slot*SlotSize:], b)
	return nil
}

// Path returns the record's path.
func (h *Handle) Path() string { return h.f.Name() }

// Close closes the record.
func (h *Handle) Close() error { return h.f.Close() }

// Claim gives key (a name no node name can have: "#node-7", "#stride") the
// value, unless the place already gives it one: the first claim decides,
// atomically (created without replacing), and every later one gets the
// value and the owner of the entry that decided. A value taken by a claim
// of the same caller's that then failed can be given back with Remove.
func (p *Place) Claim(key, value string) (got string, owner uint32, created bool, err error) {
	b := []byte(claimHeader + "\n" + value + "\n")
	for range 3 {
		err := p.dir.Create(key, b, 0o644)
		if err == nil {
			return value, uint32(os.Geteuid()), true, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", 0, false, err
		}
		v, uid, ok, err := p.Lookup(key)
		if err == nil && !ok {
			continue // removed as it was read: claim again
		}
		return v, uid, false, err
	}
	return "", 0, false, fmt.Errorf("%s: removed and made again while claimed, three times", filepath.Join(p.Path(), key))
}

// Lookup returns the value the place gives key and the owner of the
// entry that decided it; ok is false when it gives none. It claims
// nothing: an Open checks what would refuse it before it claims anything.
func (p *Place) Lookup(key string) (value string, owner uint32, ok bool, err error) {
	c, st, err := p.dir.ReadFile(key)
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", st.Uid, false, err
	}
	h, v, cut := strings.Cut(strings.TrimSuffix(string(c), "\n"), "\n")
	if h != claimHeader || !cut || strings.Contains(v, "\n") {
		return "", st.Uid, false, &fs.PathError{Op: "read", Path: filepath.Join(p.Path(), key), Err: ErrCorrupt}
	}
	return v, st.Uid, true, nil
}

const claimHeader = "snapid-claim 1"

// Lock takes the record's presence lock: shared while a program uses the
// name, exclusive to learn that no other program does. It never waits:
// false when another process holds a lock that conflicts.
func (h *Handle) Lock(exclusive bool) bool {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	return unix.Flock(int(h.f.Fd()), how|unix.LOCK_NB) == nil
}

// LockShared takes the record's presence lock shared, waiting while
// another process holds it exclusively, no longer than ctx allows.
func (h *Handle) LockShared(ctx context.Context) error {
	return statefile.LockShared(ctx, int(h.f.Fd()), h.f.Name())
}
