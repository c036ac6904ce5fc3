package leasefile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/snapid/snapid/internal/counterfile"
	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/registry"
)

// File is an open lease file and its floor, for one node name, sequence
// and owner token: every record read from either must be theirs. Its
// methods but Close are called with the lease file's lock held (Lease's
// WithLock or WithLockContext); the lock covers the floor too, which is
// never locked itself. The methods of one File are called from one
// goroutine at a time (the flock is per open file description, not per
// goroutine).
type File struct {
	lease     *counterfile.File // the lease file: its descriptor, lock, identity check and I/O
	floor     *counterfile.File // nil until OpenFloor
	openFloor func(path string) (*counterfile.File, error)
	buf       [Size + 1]byte
	fbuf      [Size + 1]byte
	node      string
	seq       string
	owner     string
}

// New returns the File of the open lease file lease for node name node,
// sequence seq and owner token owner. openFloor opens the floor file at
// a path, making it empty first if it is missing; OpenFloor and
// FloorCurrent call it. New reads nothing.
func New(lease *counterfile.File, node, seq, owner string, openFloor func(path string) (*counterfile.File, error)) *File {
	return &File{lease: lease, node: node, seq: seq, owner: owner, openFloor: openFloor}
}

// Lease is the lease file: its lock, path and identity check.
func (lf *File) Lease() *counterfile.File { return lf.lease }

// Close closes the lease file and its floor.
func (lf *File) Close() error {
	err := lf.lease.Close()
	if lf.floor != nil {
		err = errors.Join(err, lf.floor.Close())
	}
	return err
}

// OpenFloor opens the floor file at path, creating it empty if it is
// missing.
func (lf *File) OpenFloor(path string) error {
	if lf.floor != nil {
		lf.floor.Close()
		lf.floor = nil
	}
	f, err := lf.openFloor(path)
	if err != nil {
		return err
	}
	lf.floor = f
	return nil
}

// CheckFloor reads and checks the floor file floor (of a lease file not
// made yet, so that no process of the host writes that floor), as
// LoadFloor would; it does not keep or close floor.
func (lf *File) CheckFloor(floor *counterfile.File) error {
	kept := lf.floor
	lf.floor = floor
	_, _, err := lf.LoadFloor()
	lf.floor = kept
	return err
}

// Load reads and checks the lease file.
func (lf *File) Load() (Record, error) {
	c := lf.lease
	n, err := c.ReadAt(lf.buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Record{}, &errs.FileError{Op: "read", Path: c.Path(), Err: err}
	}
	size := int64(n)
	if n > Size {
		size = fileSize(c, n)
	}
	l, err := lf.decode(lf.buf[:n], size)
	if err != nil {
		return Record{}, &errs.FileError{Op: "read", Path: c.Path(), Err: err}
	}
	return l, nil
}

// decode decodes a record of this file (or of its floor).
func (lf *File) decode(b []byte, size int64) (Record, error) {
	l, err := Decode(b, size)
	switch {
	case err != nil:
	case l.Owner != lf.owner:
		err = fmt.Errorf("%w: it belongs to owner token %s, not this counter's (%s)", errs.ErrCorruptLease, registry.OwnerID(l.Owner), registry.OwnerID(lf.owner))
	case l.Node != lf.node:
		err = fmt.Errorf("%w: it belongs to node name %q, not %q", errs.ErrCorruptLease, l.Node, lf.node)
	case l.Seq != lf.seq:
		err = fmt.Errorf("%w: it belongs to sequence %q, not %q", errs.ErrCorruptLease, l.Seq, lf.seq)
	}
	return l, err
}

// LoadFloor reads the floor file; ok is false if it is empty (no floor
// yet). A floor that is not a record of this lease file is refused
// (errs.ErrCorruptLease), as the lease file would be.
func (lf *File) LoadFloor() (l Record, ok bool, err error) {
	c := lf.floor
	n, err := c.ReadAt(lf.fbuf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Record{}, false, &errs.FileError{Op: "read", Path: c.Path(), Err: err}
	}
	if allZero(lf.fbuf[:n]) {
		// Empty, or zeros: a floor never written, or its first write
		// lost to a power cut on a file system that shows an unsynced
		// extension as zeros (the floor is not synced).
		return Record{}, false, nil
	}
	size := int64(n)
	if n > Size {
		size = fileSize(c, n)
	}
	if l, err = lf.decode(lf.fbuf[:n], size); err != nil {
		return Record{}, false, &errs.FileError{Op: "read", Path: c.Path(), Err: fmt.Errorf("the lease file's floor: %w", err)}
	}
	return l, true, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// FloorCurrent makes sure the floor file open is the one at its path
// (another process or an operator may have removed or replaced it: the
// processes of the host must all read and write the same floor), opening
// it again if not.
func (lf *File) FloorCurrent() error {
	if lf.floor.CheckIdentity() == nil {
		return nil
	}
	return lf.OpenFloor(lf.floor.Path())
}

// StoreFloor writes l to the floor file, not synced: the whole record,
// or with posOnly its position alone (the floor then holds l's
// generation and ranges already).
func (lf *File) StoreFloor(l *Record, posOnly bool) error {
	c := lf.floor
	var b []byte
	off := int64(0)
	if posOnly {
		b = lf.fbuf[8:16]
		binary.LittleEndian.PutUint64(b, l.Pos)
		off = 8
	} else {
		b = lf.fbuf[:Size]
		clear(b)
		if err := EncodeTo(b, l); err != nil {
			return err
		}
	}
	if n, err := c.WriteAt(b, off); err != nil || n != len(b) {
		if err == nil {
			err = io.ErrShortWrite
		}
		return &errs.FileError{Op: "write", Path: c.Path(), Err: err}
	}
	return nil
}

// StorePos writes the position alone (8 bytes in place) and syncs.
func (lf *File) StorePos(pos uint64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], pos)
	return lf.write(b[:], 8)
}

// Store writes the whole record in place, one generation later, and
// syncs. A torn write fails the checksum: the file is then refused as
// corrupt (its ranges are lost, a gap), never read wrong.
func (lf *File) Store(l *Record) error {
	l.Node, l.Seq, l.Owner = lf.node, lf.seq, lf.owner
	if l.Gen >= MaxGen {
		return &errs.FileError{Op: "write", Path: lf.lease.Path(), Err: fmt.Errorf("%w: generation %d cannot grow", errs.ErrCorruptLease, l.Gen)}
	}
	l.Gen++
	b := lf.buf[:Size]
	clear(b)
	if err := EncodeTo(b, l); err != nil {
		return err
	}
	return lf.write(b, 0)
}

func (lf *File) write(b []byte, off int64) error {
	c := lf.lease
	if n, err := c.WriteAt(b, off); err != nil || n != len(b) {
		if err == nil {
			err = io.ErrShortWrite
		}
		return &errs.FileError{Op: "write", Path: c.Path(), Err: err}
	}
	if c.Synced() {
		if err := c.Sync(); err != nil {
			return &errs.FileError{Op: "sync", Path: c.Path(), Err: err}
		}
	}
	return nil
}

// Read reads the lease file c holds, checked as every read is but for
// whose it is (node name, sequence and owner token are returned as
// read); the caller holds c's lock.
func Read(c *counterfile.File) (Record, error) {
	var buf [Size + 1]byte
	n, err := c.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Record{}, &errs.FileError{Op: "read", Path: c.Path(), Err: err}
	}
	l, err := Decode(buf[:n], fileSize(c, n))
	if err != nil {
		return Record{}, &errs.FileError{Op: "read", Path: c.Path(), Err: err}
	}
	return l, nil
}

// fileSize returns f's size for a message, or n if it cannot be had.
func fileSize(f interface{ Stat() (os.FileInfo, error) }, n int) int64 {
	if st, err := f.Stat(); err == nil {
		return st.Size()
	}
	return int64(n)
}
