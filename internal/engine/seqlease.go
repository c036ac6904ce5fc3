package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/snapid/snapid/internal/leasefile"
	"github.com/snapid/snapid/registry"
)

// The lease file's place beside the counter: <counter>.seq.<sequence>,
// and its floor and refill lock beside it (see seqleasecodec.go for its
// format).
const (
	leaseSuffix  = ".seq."
	refillSuffix = ".refill" // beside the lease file: an empty file whose flock one leasing process holds
	floorSuffix  = ".floor"  // beside the lease file: the record as the host's last update left it
)

// leaseFile is an open lease file. Its methods are called with the
// Sequence's mutex held (the flock is per open file description, not per
// goroutine).
type leaseFile struct {
	c     *counterFile // the descriptor, lock, identity check and I/O of the counter file
	floor *counterFile // the floor file (its descriptor and I/O; never locked: the lease file's lock covers it)
	buf   [leasefile.Size + 1]byte
	fbuf  [leasefile.Size + 1]byte
	o     options // how files beside it are made (the floor again, if replaced)
	node  string
	seq   string
	ow    string
}

// close closes the lease file and its floor.
func (lf *leaseFile) close() error {
	err := lf.c.Close()
	if lf.floor != nil {
		err = errors.Join(err, lf.floor.Close())
	}
	return err
}

// leasePath is the lease file of sequence beside the counter.
func leasePath(counterPath, sequence string) string {
	return counterPath + leaseSuffix + sequence
}

// openLeaseFile opens (creating it atomically if missing, with no ranges)
// and checks the lease file of sequence for this host's node name and
// owner token.
//
// Every file that exists is checked before anything is created: a
// refused call (a damaged lease file or floor) changes nothing on disk.
func openLeaseFile(ctx context.Context, counterPath, sequence, node, owner string, o *options) (*leaseFile, error) {
	path := leasePath(counterPath, sequence)
	floorPath := path + floorSuffix
	init, err := leasefile.Encode(&leasefile.Record{Node: node, Seq: sequence, Owner: owner})
	if err != nil {
		return nil, err
	}
	lf := &leaseFile{node: node, seq: sequence, ow: owner, o: *o}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		// No lease file, so no process of the host writes the floor: it
		// is read without the lease file's lock.
		if err := lf.checkFloorAlone(floorPath, o); err != nil {
			return nil, err
		}
		if err := createIfAbsent(path, init, o); err != nil {
			return nil, err
		}
	}
	if lf.c, err = openExisting(path, o); err != nil {
		return nil, err
	}
	err = lf.c.WithLockContext(ctx, func() error {
		if _, err := lf.load(); err != nil {
			return err
		}
		if err := lf.openFloor(floorPath, o); err != nil {
			return err
		}
		_, _, err := lf.loadFloor()
		return err
	})
	if err != nil {
		lf.close()
		return nil, err
	}
	return lf, nil
}

// openFloor opens the floor file at path, creating it empty if it is
// missing; the caller holds the lease file's lock.
func (lf *leaseFile) openFloor(path string, o *options) error {
	if lf.floor != nil {
		lf.floor.Close()
		lf.floor = nil
	}
	if err := createIfAbsent(path, nil, o); err != nil {
		return err
	}
	f, err := openExisting(path, o)
	if err != nil {
		return err
	}
	lf.floor = f
	return nil
}

// checkFloorAlone checks a floor file at path, if there is one, for a
// lease file that does not exist.
func (lf *leaseFile) checkFloorAlone(path string, o *options) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	f, err := openReadOnly(path, o)
	if err != nil {
		return err
	}
	lf.floor = f
	_, _, err = lf.loadFloor()
	f.Close()
	lf.floor = nil
	return err
}

// load reads and checks the file; the caller holds the lock.
func (lf *leaseFile) load() (leasefile.Record, error) {
	c := lf.c
	n, err := c.ReadAt(lf.buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return leasefile.Record{}, &FileError{Op: "read", Path: c.Path(), Err: err}
	}
	size := int64(n)
	if n > leasefile.Size {
		size = fileSize(c, n)
	}
	l, err := lf.decode(lf.buf[:n], size)
	if err != nil {
		return leasefile.Record{}, &FileError{Op: "read", Path: c.Path(), Err: err}
	}
	return l, nil
}

// decode decodes a record of this file (or of its floor).
func (lf *leaseFile) decode(b []byte, size int64) (leasefile.Record, error) {
	l, err := leasefile.Decode(b, size)
	switch {
	case err != nil:
	case l.Owner != lf.ow:
		err = fmt.Errorf("%w: it belongs to owner token %s, not this counter's (%s)", errCorruptLease, registry.OwnerID(l.Owner), registry.OwnerID(lf.ow))
	case l.Node != lf.node:
		err = fmt.Errorf("%w: it belongs to node name %q, not %q", errCorruptLease, l.Node, lf.node)
	case l.Seq != lf.seq:
		err = fmt.Errorf("%w: it belongs to sequence %q, not %q", errCorruptLease, l.Seq, lf.seq)
	}
	return l, err
}

// loadFloor reads the floor file; ok is false if it is empty (no floor
// yet). A floor that is not a record of this lease file is refused
// (errCorruptLease), as the lease file would be. The caller holds the
// lease file's lock.
func (lf *leaseFile) loadFloor() (l leasefile.Record, ok bool, err error) {
	c := lf.floor
	n, err := c.ReadAt(lf.fbuf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return leasefile.Record{}, false, &FileError{Op: "read", Path: c.Path(), Err: err}
	}
	if allZero(lf.fbuf[:n]) {
		// Empty, or zeros: a floor never written, or its first write
		// lost to a power cut on a file system that shows an unsynced
		// extension as zeros (the floor is not synced).
		return leasefile.Record{}, false, nil
	}
	size := int64(n)
	if n > leasefile.Size {
		size = fileSize(c, n)
	}
	if l, err = lf.decode(lf.fbuf[:n], size); err != nil {
		return leasefile.Record{}, false, &FileError{Op: "read", Path: c.Path(), Err: fmt.Errorf("the lease file's floor: %w", err)}
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

// floorCurrent makes sure the floor file open is the one at its path
// (another process or an operator may have removed or replaced it: the
// processes of the host must all read and write the same floor), opening
// it again if not; the caller holds the lease file's lock.
func (lf *leaseFile) floorCurrent() error {
	if lf.floor.CheckIdentity() == nil {
		return nil
	}
	return lf.openFloor(lf.floor.Path(), &lf.o)
}

// storeFloor writes l to the floor file, not synced: the whole record,
// or with posOnly its position alone (the floor then holds l's
// generation and ranges already). The caller holds the lease file's lock.
func (lf *leaseFile) storeFloor(l *leasefile.Record, posOnly bool) error {
	c := lf.floor
	var b []byte
	off := int64(0)
	if posOnly {
		b = lf.fbuf[8:16]
		binary.LittleEndian.PutUint64(b, l.Pos)
		off = 8
	} else {
		b = lf.fbuf[:leasefile.Size]
		clear(b)
		if err := leasefile.EncodeTo(b, l); err != nil {
			return err
		}
	}
	if n, err := c.WriteAt(b, off); err != nil || n != len(b) {
		if err == nil {
			err = io.ErrShortWrite
		}
		return &FileError{Op: "write", Path: c.Path(), Err: err}
	}
	return nil
}

// storePos writes the position alone (8 bytes in place) and syncs; the
// caller holds the lock.
func (lf *leaseFile) storePos(pos uint64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], pos)
	return lf.write(b[:], 8)
}

// store writes the whole record in place and syncs; the caller holds the
// lock. A torn write fails the checksum: the file is then refused as
// corrupt (its ranges are lost, a gap), never read wrong.
func (lf *leaseFile) store(l *leasefile.Record) error {
	l.Node, l.Seq, l.Owner = lf.node, lf.seq, lf.ow
	if l.Gen >= leasefile.MaxGen {
		return &FileError{Op: "write", Path: lf.c.Path(), Err: fmt.Errorf("%w: generation %d cannot grow", errCorruptLease, l.Gen)}
	}
	l.Gen++
	b := lf.buf[:leasefile.Size]
	clear(b)
	if err := leasefile.EncodeTo(b, l); err != nil {
		return err
	}
	return lf.write(b, 0)
}

func (lf *leaseFile) write(b []byte, off int64) error {
	c := lf.c
	if n, err := c.WriteAt(b, off); err != nil || n != len(b) {
		if err == nil {
			err = io.ErrShortWrite
		}
		return &FileError{Op: "write", Path: c.Path(), Err: err}
	}
	if c.Synced() {
		if err := c.Sync(); err != nil {
			return &FileError{Op: "sync", Path: c.Path(), Err: err}
		}
	}
	return nil
}

// ReadLeaseFile returns what the lease file of sequence beside the counter
// at counterPath holds: the current range, the position in it and the
// next range; ok is false if there is no file. It takes the file's lock.
func ReadLeaseFile(counterPath, sequence string) (cur, ahead registry.SequenceLease, pos uint64, ok bool, err error) {
	return readLeaseFile(context.Background(), counterPath, sequence)
}

// readLeaseFile is ReadLeaseFile waiting for the lock no longer than ctx
// allows.
func readLeaseFile(ctx context.Context, counterPath, sequence string) (cur, ahead registry.SequenceLease, pos uint64, ok bool, err error) {
	o := defaultOptions()
	c, err := openReadOnly(leasePath(counterPath, sequence), &o)
	if errors.Is(err, fs.ErrNotExist) {
		return cur, ahead, 0, false, nil
	}
	if err != nil {
		return cur, ahead, 0, false, err
	}
	defer c.Close()
	lf := &leaseFile{c: c}
	var l leasefile.Record
	err = c.WithLockContext(ctx, func() error {
		var err error
		n, rerr := c.ReadAt(lf.buf[:], 0)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return &FileError{Op: "read", Path: c.Path(), Err: rerr}
		}
		l, err = leasefile.Decode(lf.buf[:n], fileSize(c, n))
		if err != nil {
			return &FileError{Op: "read", Path: c.Path(), Err: err}
		}
		return nil
	})
	if err != nil {
		return cur, ahead, 0, false, err
	}
	mk := func(r leasefile.Range) registry.SequenceLease {
		return registry.SequenceLease{Sequence: l.Seq, Name: l.Node, Owner: l.Owner, Session: l.Session, First: r.First, Last: r.Last}
	}
	return mk(l.Cur), mk(l.Ahead), l.Pos, true, nil
}

// closeLeases records, for the last process of the host (under the gate,
// so that no process of this claim takes numbers afterwards), where each
// of the host's sequence lease files stands, so that the host's next claim
// may carry the lease over (see Sequence.verify). Failures only leave a
// gap: the next claim then drops the lease.
func (r *reservation) closeLeases(ctx context.Context) {
	sr, ok := r.reg.(registry.SequenceRegistry)
	if !ok {
		return
	}
	counterPath := strings.TrimSuffix(r.host.sessionPath, sessionSuffix)
	files, _ := filepath.Glob(globEscape(counterPath) + leaseSuffix + "*")
	for _, f := range files {
		seq := strings.TrimPrefix(f, counterPath+leaseSuffix)
		if ValidateName(seq) != nil {
			continue // the refill lock files, and anything else
		}
		cur, ahead, pos, ok, err := readLeaseFile(ctx, counterPath, seq)
		if err != nil || !ok || cur.First == 0 || cur.Session != r.session || cur.Name != r.name {
			continue
		}
		latest := cur
		if ahead.First != 0 {
			latest = ahead
		}
		latest.Sequence, latest.Name, latest.Owner, latest.Session = seq, r.name, r.host.owner, r.session
		if err := sr.CloseLease(ctx, latest, pos); err != nil {
			r.log.Warn("snapid: could not record where the host's sequence lease stands; the next start drops it (a gap)",
				"sequence", seq, "err", err)
		}
	}
}

// globEscape escapes the glob metacharacters of a path.
func globEscape(p string) string {
	var b strings.Builder
	for _, c := range p {
		if strings.ContainsRune(`*?[\`, c) {
			b.WriteRune('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}
