package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/snapid/snapid/internal/hoststate"
	"github.com/snapid/snapid/internal/idform"
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

// hostRecord is a Generator's hold on its name's record (the mark it
// trusts, its presence: see hoststate.Hold) with what the engine checks
// of it: the claims of node numbers and the striped form.
type hostRecord struct {
	*hoststate.Hold
	p     *hoststate.Place
	h     *hoststate.Handle     // the Hold's
	trust func(uid uint32) bool // whose claims speak for the counter (see claimNumbers)
	made  bool                  // the Open that opened it made the record (see unmakeRefused)

	formMu sync.Mutex // guards the fields below
	// formGen is the generation of the record in which stillCurrent last
	// found this Generator's striped form in use; formLeft, once set, is
	// its refusal (the form was left).
	formGen  uint64
	formLeft error
	striped  *idform.Form // a striped Generator's form, checked at every update (see watchForm)
	log      interface {
		Warn(string, ...any)
	}
}

// recordForm is f as a record keeps it; complete is false for a numeric
// form whose node number or stride a registry has not given yet.
func recordForm(f idform.Form) (_ hoststate.Form, complete bool) {
	switch f.Format {
	case FormatDecimal:
		return hoststate.Form{Kind: formDecimal, Node: f.Node}, f.Node != 0
	case FormatStriped:
		return hoststate.Form{Kind: formStriped, Node: f.Node, Stride: f.Stride}, f.Node != 0 && f.Stride != 0
	}
	return hoststate.Form{Kind: formName}, true
}

// open takes the record's presence lock and checks the counter against the
// record under the counter's lock. Below the floor it was rolled back:
// refused (with a registry, raised; the registry's mark covers the rest).
// The first program of the name finding the counter below the mark (no
// clean close since: a crash, or a restore within the last step) raises it
// to the mark. Then the form and the counter's value are recorded.
func (hr *hostRecord) open(ctx context.Context, c *counterFile, f idform.Form, o *options) error {
	return c.WithLockContext(ctx, func() error {
		// Presence, decided under the counter's lock, which every
		// opener takes. Only the counter's writers can open the record
		// (its mode), so none of these waits on a stranger. This
		// process counts from here on, so a Release sees it.
		first, err := hr.Enter(ctx)
		if err != nil {
			return err
		}
		v, err := c.Load()
		if err != nil {
			return err
		}
		var old oldFiles // files an earlier version kept beside the counter (see migrate.go)
		err = hr.Update(ctx, func(r *hoststate.Record) (bool, error) {
			replaced := r.Dev != c.Dev() || r.Ino != c.Ino()
			if replaced && (r.Path != c.Path() || v < r.Mark) {
				return false, &FileError{Op: "record", Path: hr.h.Path(), Err: fmt.Errorf("%w: the record now names another counter (%s)", ErrNameBound, r.Path)}
			}
			if replaced {
				o.logger.Warn("snapid: the counter file at the recorded path was replaced by one past every number the old one may have handed out; the name goes with the new one",
					"path", c.Path(), "counter", v, "mark", r.Mark)
				r.Dev, r.Ino = c.Dev(), c.Ino()
				r.Floor, r.Mark = v, v
			}
			if r.Released && !o.reg.reclaim {
				// Released since this Open judged the record.
				return false, &FileError{Op: "record", Path: hr.h.Path(), Err: fmt.Errorf("%w: %q was released on this host meanwhile", ErrReleased, r.Name)}
			}
			if v < r.Floor && o.reg.registry == nil {
				return false, rolledBack(c.Path(), v, *r, hr.h.Path())
			}
			if v < r.Floor || (first && v < r.Mark) {
				to := max(r.Floor, r.Mark)
				if err := c.Store(to); err != nil {
					return false, err
				}
				o.logger.Warn("snapid: the counter was below the host's record of how far it went (after a crash, or restored or copied over); raised to it",
					"path", c.Path(), "counter", v, "to", to)
				v = to
			}
			moved := r.Path != c.Path() // the same file at another path: the record follows it
			r.Path = c.Path()
			changed := replaced || moved || v > r.Mark || r.Released
			r.Released = false // judged before: only a reclaim gets here
			var err error
			if old, err = readOldFiles(c.Path(), max(v, c.High())); err != nil {
				return false, err
			}
			if len(old.ours) > 0 {
				old.merge(r, r.Name, max(v, c.High()))
				old.claimOthers(hr.p, r.Name)
				changed = true
			}
			if o.reg.registry == nil || f.Format == FormatName {
				// With a registry, the numeric forms once it gave the
				// number (see useRegistryForm).
				raised, adopted, err := adoptForm(c, r, f)
				if err != nil {
					return false, err
				}
				logRaise(o, c.Path(), raised, f)
				changed = changed || adopted
			}
			// Unchanged, the mark this process trusts stays 0: its first
			// update writes the record (see hoststate.Hold.Cover). The
			// floor moves only with values known to be on disk (see
			// counterFile.durable): one read here may be lost by a power
			// cut.
			r.Mark = max(r.Mark, v)
			return changed, nil
		})
		if err != nil {
			return err
		}
		// The files of an earlier version, taken into the record: removed.
		old.remove(o, hr.h.Path())
		return nil
	})
}

// check runs under the counter's lock before every update from cur (see
// hoststate.Hold.Check): a striped Generator's form must still be the
// counter's (see stillCurrent).
func (hr *hostRecord) check(cur uint64) (raise uint64, err error) {
	hr.formMu.Lock()
	left, striped := hr.formLeft, hr.striped
	hr.formMu.Unlock()
	if left != nil {
		return 0, left
	}
	if striped == nil {
		return hr.Check(cur, nil)
	}
	return hr.Check(cur, func(r hoststate.Record) error { return hr.stillCurrent(r, *striped) })
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
		if r.Dev != c.Dev() || r.Ino != c.Ino() || !trusts(r, st) {
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

// useRegistryForm, once the registry gave the name its node number (0:
// a registry that gives none) and the form its stride, claims them on
// the host (refused when another name of the host holds the number or
// the host uses another stride) and records the form (see adoptForm)
// before any id is handed out.
func (hr *hostRecord) useRegistryForm(ctx context.Context, c *counterFile, f idform.Form, node uint64, o *options) error {
	if err := claimNumbers(hr.p, hr.h.Record().Name, f, node, hr.trust); err != nil {
		return err
	}
	err := c.WithLockContext(ctx, func() error {
		return hr.Update(ctx, func(r *hoststate.Record) (bool, error) {
			if r.Node != 0 && node != 0 && r.Node != node {
				return false, &FileError{Op: "record", Path: hr.h.Path(), Err: fmt.Errorf(
					"%w: the registry gave %q node number %d, but this host recorded %d for it", ErrNumberMismatch, r.Name, node, r.Node)}
			}
			changed := node != 0 && r.Node != node
			if node != 0 {
				r.Node = node
			}
			raised, adopted, err := adoptForm(c, r, f)
			if err != nil {
				return false, err
			}
			logRaise(o, c.Path(), raised, f)
			return changed || adopted, nil
		})
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
		return hr.Update(ctx, func(r *hoststate.Record) (bool, error) {
			if r.Node != 0 && r.Node != node {
				return false, &FileError{Op: "open", Path: hr.h.Path(), Err: fmt.Errorf(
					"%w: the registry gives %q node number %d, and this host recorded %d; was the registry's row or this record replaced? Nothing was issued",
					ErrNumberMismatch, r.Name, node, r.Node)}
			}
			if r.Stride != 0 && stride != 0 && r.Stride != stride {
				return false, &FileError{Op: "open", Path: hr.h.Path(), Err: fmt.Errorf(
					"%w: the cluster's stride is %d, and this host recorded %d", ErrStrideMismatch, stride, r.Stride)}
			}
			if r.Node == node && (stride == 0 || r.Stride == stride) {
				return false, nil
			}
			r.Node, r.Stride = node, max(r.Stride, stride)
			return true, nil
		})
	})
}

// number returns the node number and stride the name's record holds
// (see setNumber), read again.
func (hr *hostRecord) number() (node, stride uint64, err error) {
	r, err := hr.Read()
	if err != nil {
		return 0, 0, err
	}
	return r.Node, r.Stride, nil
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
func (hr *hostRecord) close(c *counterFile) error {
	defer hr.drop()
	if !hr.Last() {
		// Others use the name: the last of them closes the record. (A
		// closer that is not the last holds no lock here, so that it
		// never keeps the last one from its write.)
		return nil
	}
	var werr error // the clean close's write failed
	write := func() error {
		v, err := c.Load()
		if err != nil {
			return err
		}
		wrote := false
		err = hr.Update(context.Background(), func(r *hoststate.Record) (bool, error) {
			if r.Dev != c.Dev() || r.Ino != c.Ino() || v < r.Floor {
				return false, nil
			}
			floor := max(r.Floor, min(c.Durable(), v))
			if floor == r.Floor && r.Mark == v {
				return false, nil
			}
			r.Floor = floor
			r.Mark = v // a clean close: the next start goes on from v
			wrote = true
			return true, nil
		})
		if wrote && err != nil {
			werr = err
		}
		return err
	}
	if err := c.TryWithLock(write); errors.Is(err, unix.EWOULDBLOCK) {
		_ = write()
	}
	if werr != nil {
		return &FileError{Op: "close", Path: hr.h.Path(), Err: fmt.Errorf(
			"the name's record could not be closed cleanly, so the next start raises the counter to its mark (a gap of up to a step): %w", werr)}
	}
	return nil
}

// drop closes the record and its place.
func (hr *hostRecord) drop() {
	hr.h.Close()
	hr.p.Close()
}
