package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/snapid/snapid/internal/hoststate"
	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// A release of a name on the host (its record marked released, once no
// program uses it), a repair lowering the records with the counter, and
// what the records say about a counter (its name, a release).

// holdRecordAlone takes the host's record of name for the counter c
// exclusively, refused (ErrInUse) while any program of the host uses the
// name, with a registry or not; it returns the record's mark when the
// record names c (0 otherwise, or when there is no record) and the
// function that lets the record go.
func holdRecordAlone(ctx context.Context, c *counterFile, name string, o *options) (mark uint64, done func(), err error) {
	p, own, err := recordPlace(ctx, c.Path(), o, false)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, func() {}, nil
	}
	if err != nil {
		return 0, func() {}, err
	}
	if own != "" {
		// A record kept in the user's own place while the host had
		// none: taken in first (refused while a program holds it).
		if _, ok, err := p.Read(name); err == nil && !ok {
			if _, _, err := adoptOwnRecord(p, own, name, o); err != nil {
				p.Close()
				return 0, func() {}, err
			}
		}
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
	if r.Dev == c.Dev() && r.Ino == c.Ino() {
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
	p, _, err := recordPlace(ctx, c.Path(), o, true)
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
		st, err := statefile.CheckRegular(c.Fd())
		if err != nil {
			return 0, &FileError{Op: "release", Path: c.Path(), Err: err}
		}
		r := hoststate.Record{Name: name, Dev: c.Dev(), Ino: c.Ino(), Path: c.Path(), Released: true, Mark: min(final, MaxNumber)}
		if err := p.Create(r, recordPerm(st)); err != nil && !errors.Is(err, fs.ErrExist) {
			return 0, recordError(p, name, err)
		}
	}
	h, err := p.OpenHandle(name)
	if err != nil {
		return 0, recordError(p, name, err)
	}
	defer h.Close()
	err = c.WithLockContext(ctx, func() error {
		unlock, err := hoststate.WriteLock(ctx, h)
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
		if r.Dev == c.Dev() && r.Ino == c.Ino() {
			cur, err := c.Load()
			if err != nil {
				return err
			}
			final = max(final, cur, r.Mark)
			r.Floor = max(r.Floor, min(c.Durable(), final))
			r.Mark = max(r.Mark, min(final, MaxNumber))
		}
		return h.Write(r)
	})
	return final, err
}

// lowerRecords sets the floor and the mark of every record of the host
// naming the counter c, or its path, to v, and their counter to c (a
// repair; the caller holds c's lock).
func lowerRecords(ctx context.Context, c *counterFile, v uint64, o *options) error {
	p, _, err := recordPlace(ctx, c.Path(), o, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no records: nothing to lower
	}
	if err != nil {
		return err
	}
	defer p.Close()
	recs, _ := p.All(func(n string) bool { return ValidateName(n) == nil })
	for _, r := range recs {
		if (r.Dev != c.Dev() || r.Ino != c.Ino()) && r.Path != c.Path() {
			continue
		}
		h, err := p.OpenHandle(r.Name)
		if err != nil {
			return recordError(p, r.Name, err)
		}
		unlock, err := hoststate.WriteLock(ctx, h)
		if err == nil {
			r, err = h.Read()
		}
		if err == nil {
			// A counter replaced at the recorded path is the repaired
			// one now: the operator vouched for its value.
			r.Dev, r.Ino, r.Path = c.Dev(), c.Ino(), c.Path()
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
