package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/snapid/snapid/internal/counterfile"
	"github.com/snapid/snapid/internal/leasefile"
	"github.com/snapid/snapid/internal/statefile"
	"github.com/snapid/snapid/registry"
)

// The lease file's place beside the counter: <counter>.seq.<sequence>,
// and its floor and refill lock beside it (see package leasefile for its
// format).
const (
	leaseSuffix  = ".seq."
	refillSuffix = ".refill" // beside the lease file: an empty file whose flock one leasing process holds
	floorSuffix  = ".floor"  // beside the lease file: the record as the host's last update left it
)

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
func openLeaseFile(ctx context.Context, counterPath, sequence, node, owner string, o *options) (*leasefile.File, error) {
	path := leasePath(counterPath, sequence)
	floorPath := path + floorSuffix
	init, err := leasefile.Encode(&leasefile.Record{Node: node, Seq: sequence, Owner: owner})
	if err != nil {
		return nil, err
	}
	fo := *o // how the floor is made again, if replaced
	openFloor := func(path string) (*counterfile.File, error) {
		if err := counterfile.CreateBeside(fo.fs, path, nil, fo.fileMode); err != nil {
			return nil, err
		}
		f, err := openExisting(path, &fo)
		if err != nil {
			return nil, err
		}
		return f.File, nil
	}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		// No lease file, so no process of the host writes the floor: it
		// is read without the lease file's lock.
		if err := checkFloorAlone(floorPath, node, sequence, owner, o); err != nil {
			return nil, err
		}
		if err := counterfile.CreateBeside(o.fs, path, init, o.fileMode); err != nil {
			return nil, err
		}
	}
	c, err := openExisting(path, o)
	if err != nil {
		return nil, err
	}
	lf := leasefile.New(c.File, node, sequence, owner, openFloor)
	err = c.WithLockContext(ctx, func() error {
		if _, err := lf.Load(); err != nil {
			return err
		}
		if err := lf.OpenFloor(floorPath); err != nil {
			return err
		}
		_, _, err := lf.LoadFloor()
		return err
	})
	if err != nil {
		lf.Close()
		return nil, err
	}
	return lf, nil
}

// checkSequenceFiles refuses, before anything is made, a sequence whose
// files beside the counter could not all be made and opened: one whose
// name, made into the temporary name it is created from, would be too
// long for a file name, or a refill lock file that is there but not a
// file to lock (a directory, a FIFO, another user's file). What
// openLeaseFile checks of the lease file and its floor, it checks before
// it makes them.
func checkSequenceFiles(counterPath, sequence string, o *options) error {
	path := leasePath(counterPath, sequence)
	for _, p := range []string{path, path + floorSuffix, path + refillSuffix} {
		if err := statefile.CheckCreatable(p); err != nil {
			return &FileError{Op: "create", Path: p, Err: fmt.Errorf("sequence %q: %w (a shorter sequence name, or counter file name, fits)", sequence, err)}
		}
	}
	refill := path + refillSuffix
	if _, err := os.Lstat(refill); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return counterfile.CheckBeside(refill, o.followSymlinks)
}

// checkFloorAlone checks a floor file at path, if there is one, for a
// lease file that does not exist.
func checkFloorAlone(path, node, sequence, owner string, o *options) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	f, err := openReadOnly(path, o)
	if err != nil {
		return err
	}
	defer f.Close()
	return leasefile.New(nil, node, sequence, owner, nil).CheckFloor(f.File)
}

// ReadLeaseFile returns what the lease file of sequence beside the counter
// at counterPath holds: the current range, the position in it and the
// next range; ok is false if there is no file. It takes the file's lock,
// waiting for it no longer than the default registry timeout (ErrLocked).
func ReadLeaseFile(counterPath, sequence string) (cur, ahead registry.SequenceLease, pos uint64, ok bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultOptions().reg.timeout)
	defer cancel()
	return readLeaseFile(ctx, counterPath, sequence)
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
	var l leasefile.Record
	err = c.WithLockContext(ctx, func() error {
		var err error
		l, err = leasefile.Read(c.File)
		return err
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
func closeLeases(ctx context.Context, counterPath string, reg registry.Registry, name, owner, session string, log *slog.Logger) {
	sr, ok := reg.(registry.SequenceRegistry)
	if !ok {
		return
	}
	files, _ := filepath.Glob(globEscape(counterPath) + leaseSuffix + "*")
	for _, f := range files {
		seq := strings.TrimPrefix(f, counterPath+leaseSuffix)
		if ValidateName(seq) != nil {
			continue // the refill lock files, and anything else
		}
		cur, ahead, pos, ok, err := readLeaseFile(ctx, counterPath, seq)
		if err != nil || !ok || cur.First == 0 || cur.Session != session || cur.Name != name {
			continue
		}
		latest := cur
		if ahead.First != 0 {
			latest = ahead
		}
		latest.Sequence, latest.Name, latest.Owner, latest.Session = seq, name, owner, session
		if err := sr.CloseLease(ctx, latest, pos); err != nil {
			log.Warn("snapid: could not record where the host's sequence lease stands; the next start drops it (a gap)",
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
