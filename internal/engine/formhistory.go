package engine

import (
	"fmt"
	"math/bits"

	"github.com/snapid/snapid/internal/hoststate"
	"github.com/snapid/snapid/internal/idform"
)

// The form history: every id form a counter has issued under, kept in the
// host's record of the name (hoststate.Record.Forms): each decimal node
// number, and each striped stride and node number, the striped form in
// use marked current and every other with the counter's value when it was
// left. The record is written under the counter's lock, synced, in two
// checksummed copies (see hoststate): a torn write leaves the other copy,
// and a record with neither copy whole refuses the name (errCorruptBinding).
//
// Striped ids of two forms meet (30×100+13 = 301×10+3): so a Generator
// that opens the counter with another stride or node number than the form
// in use raises the counter first, so that its first id is above every id
// the counter issued under every earlier striped form (number × stride +
// node for the highest number the counter had reached when that form was
// left), then records its own form as current; both durably, under the
// counter's lock, before any id of the new form is handed out. A
// Generator of the form left (another process) reads the record again at
// its next counter update, finds another form current and is refused
// (ErrFormChanged): two striped forms never issue from one counter at
// once. Decimal ids never meet striped ones (they are not integers) nor
// those of another node number; their node numbers are recorded for the
// operator.
//
// A new record of a name for a counter that the host's records of other
// names already name (a name released, and the counter taken for another
// on purpose) starts with their forms: the history is the counter's.

// Kinds of form in a record.
const (
	formName    = "name"
	formDecimal = "decimal"
	formStriped = "striped"
)

// highestStriped returns the highest id the counter may have issued under
// a striped form of forms other than (stride, node), cur being the
// counter's value now (the bound of the form in use); ok is false if there
// is none. An id past 2^64-1 is reported as 2^64-1.
func highestStriped(forms []hoststate.Form, stride, node, cur uint64) (high uint64, ok bool) {
	for _, e := range forms {
		if e.Kind != formStriped || e.Stride == stride && e.Node == node {
			continue
		}
		n := e.Upto
		if e.Current {
			n = max(n, cur)
		}
		hi, lo := bits.Mul64(n, e.Stride)
		v, carry := bits.Add64(lo, e.Node, 0)
		if hi != 0 || carry != 0 {
			v = MaxNumber
		}
		high, ok = max(high, v), true
	}
	return high, ok
}

// raiseFor returns the counter value from which the striped form (stride,
// node) hands out only ids above high: the smallest n with
// (n+1)×stride + node > high.
func raiseFor(high, stride, node uint64) uint64 {
	if high < node {
		return 0
	}
	return (high - node) / stride
}

// stripedRaise returns the value the counter at path, now at cur, must be
// raised to before the striped form fm hands out ids (0: none), or
// ErrExhausted when that is past fm's bound.
func stripedRaise(forms []hoststate.Form, fm idform.Form, cur uint64, path string) (uint64, error) {
	high, ok := highestStriped(forms, fm.Stride, fm.Node, cur)
	if !ok {
		return 0, nil
	}
	need := raiseFor(high, fm.Stride, fm.Node)
	if need <= cur {
		return 0, nil
	}
	if need >= fm.Limit {
		return 0, &FileError{Op: "open", Path: path, Err: fmt.Errorf(
			"%w: this counter handed out striped ids up to %d under another stride or node number; the %s form with stride %d and node number %d would start above them at number %d, past its bound (%d); nothing was issued",
			ErrExhausted, high, fm.Format, fm.Stride, fm.Node, need+1, fm.Limit)}
	}
	return need, nil
}

// adoptForm, for a Generator of the form fm holding the counter's lock,
// records fm in the history of r and, for a striped form other than the
// one in use, first raises the counter (durably) so that fm's first id is
// above every id of the earlier striped forms, and records the form left
// at the counter's value. It returns the value the counter was raised to
// (0: not raised) and whether r changed (the caller writes it). A
// numeric form whose number or stride is not known yet records nothing.
func adoptForm(c *counterFile, r *hoststate.Record, fm idform.Form) (raised uint64, changed bool, err error) {
	nf, complete := recordForm(fm)
	if !complete {
		return 0, false, nil
	}
	if fm.Format != FormatStriped {
		if r.HasForm(nf) {
			return 0, false, nil
		}
		r.Forms = append(r.Forms, nf)
		return 0, true, nil
	}
	cur, err := c.Load()
	if err != nil {
		return 0, false, err
	}
	cur = max(cur, c.High())
	need, err := stripedRaise(r.Forms, fm, cur, c.Path())
	if err != nil {
		return 0, false, err
	}
	if need != 0 {
		if err := c.Store(need); err != nil {
			return 0, false, err
		}
		if !c.Synced() {
			if err := c.Sync(); err != nil {
				return 0, false, &FileError{Op: "sync", Path: c.Path(), Err: err}
			}
		}
		raised = need
	}
	if i := r.FormIndex(nf); i >= 0 && r.Forms[i].Current {
		// The form in use: a raise is needed only above forms recorded
		// as left after it became current (taken over from files an
		// earlier version kept, see migrate.go).
		return raised, false, nil
	}
	next := make([]hoststate.Form, 0, len(r.Forms)+1)
	for _, e := range r.Forms {
		switch {
		case e.Kind == formStriped && e.Stride == fm.Stride && e.Node == fm.Node:
			continue // current again, below
		case e.Current:
			e.Current, e.Upto = false, max(e.Upto, cur)
		}
		next = append(next, e)
	}
	nf.Current = true
	r.Forms = append(next, nf)
	return raised, true, nil
}

// stillCurrent refuses a striped Generator's update when the record r
// shows that another Generator changed the counter to another striped
// form since this one adopted its own (see hostRecord.check).
func (hr *hostRecord) stillCurrent(r hoststate.Record, fm idform.Form) error {
	hr.formMu.Lock()
	defer hr.formMu.Unlock()
	if hr.formLeft != nil {
		return hr.formLeft // refused at every later update too
	}
	if r.Gen == hr.formGen {
		return nil
	}
	for _, e := range r.Forms {
		if e.Kind == formStriped && e.Current && e.Stride == fm.Stride && e.Node == fm.Node {
			hr.formGen = r.Gen
			return nil
		}
	}
	hr.formLeft = &FileError{Op: "advance", Path: hr.h.Path(), Err: fmt.Errorf(
		"%w: another process opened this counter with another striped form (stride or node number) than this Generator's (stride %d, node number %d), and striped ids of two forms meet; nothing was issued: close this Generator and open it again with the counter's form",
		ErrFormChanged, fm.Stride, fm.Node)}
	return hr.formLeft
}

// logRaise tells of a raise adoptForm made.
func logRaise(o *options, path string, raised uint64, fm idform.Form) {
	if raised != 0 {
		o.logger.Warn("snapid: counter raised above the striped ids it handed out under another stride or node number",
			"path", path, "to", raised, "stride", fm.Stride, "node", fm.Node)
	}
}

// watchForm has every update of a striped Generator check that its form
// is still the counter's (see stillCurrent).
func (hr *hostRecord) watchForm(fm idform.Form) {
	if fm.Format == FormatStriped {
		hr.formMu.Lock()
		hr.striped = &fm
		hr.formMu.Unlock()
	}
}
