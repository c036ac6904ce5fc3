package snapid

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
	"strconv"
	"strings"
)

// The form history: every numeric form a counter has issued under, kept
// beside the counter in two copies, <counter>.forms and
// <counter>.forms.copy, each written whole (a synced temporary file
// renamed into place) and carrying a generation and a checksum:
//
//	snapid-forms 2
//	generation <one more than the highest of the copies it replaced>
//	registry <node name> <node number> <stride, 0 if not known>
//	striped <stride> <node number> <counter when it was left>
//	striped <stride> <node number> current
//	decimal <node number>
//	crc32c <checksum of the lines above, hex>
//
// Striped ids of two forms meet (30×100+13 = 301×10+3): so the striped
// form in use is recorded as current, and a Generator that opens the
// counter with another stride or node number raises the counter first, so
// that its first id is above every id the counter issued under every
// earlier striped form (number × stride + node for the highest number the
// counter had reached when that form was left), then records its own form
// as current; both durably, before any id of the new form is handed out.
// A Generator of the form left (another process) finds the history
// changed at its next counter update and is refused (ErrFormChanged): two
// striped forms never issue from one counter at once. Decimal ids never
// meet striped ones (they are not integers) nor those of another node
// number; their node numbers are recorded for the operator. A registry
// line records the node number (and stride) a registry gave a name on
// this counter, as <counter>.number does: an Open without a registry
// reads it when the number file is gone (see useRecordedNumber).
//
// A history only grows, so the two copies are read together: every form
// either records is kept (a copy restored from an older backup, valid as
// it is, forgets no form the other records), the form in use is the one
// of the copy with the higher generation, and a form one copy records as
// in use and the other does not is taken as left at the counter's value
// now (the most it can have issued). The striped form <counter>.number
// records is added the same way if the history lacks it. One damaged or
// removed copy is restored from the other. Both damaged refuses the
// numeric forms (ErrCorruptForms): removing them would forget what the
// counter issued under. Something at either path that is not a regular
// file of the counter's user (another user's file, a directory, a FIFO)
// is refused as such (ErrUntrustedOwner, ErrNotRegular), never taken for
// damage.
const (
	formsSuffix     = ".forms"
	formsCopySuffix = ".forms.copy"
	formsHeader     = "snapid-forms 2"
	formsHeaderV1   = "snapid-forms 1"
)

// formEntry is one form in the history.
type formEntry struct {
	form         Format // FormatStriped or FormatDecimal
	stride, node uint64
	upto         uint64 // striped: the counter's value when the form was left
	current      bool   // striped: the form in use
	// unknown (striped, never written): a form one copy records as in
	// use and the other does not; left at the counter's value now, the
	// most it can have issued (see resolve).
	unknown bool
	// registry (form FormatName): a registry gave the node name registry
	// node number node and, if known, stride (0: not known).
	registry string
}

type formHistory []formEntry

var crc32c = crc32.MakeTable(crc32.Castagnoli)

func encodeForms(h formHistory, gen uint64) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\ngeneration %d\n", formsHeader, gen)
	for _, e := range h {
		switch {
		case e.registry != "":
			fmt.Fprintf(&b, "registry %s %d %d\n", e.registry, e.node, e.stride)
		case e.form == FormatDecimal:
			fmt.Fprintf(&b, "decimal %d\n", e.node)
		case e.current:
			fmt.Fprintf(&b, "striped %d %d current\n", e.stride, e.node)
		default:
			fmt.Fprintf(&b, "striped %d %d %d\n", e.stride, e.node, e.upto)
		}
	}
	body := b.String()
	return fmt.Appendf([]byte(body), "crc32c %08x\n", crc32.Checksum([]byte(body), crc32c))
}

func decodeForms(b []byte) (formHistory, error) {
	h, _, err := decodeFormsGen(b)
	return h, err
}

// decodeFormsGen decodes one copy of the history and its generation (0
// for a version 1 copy, which has none).
func decodeFormsGen(b []byte) (formHistory, uint64, error) {
	s := string(b)
	i := strings.LastIndex(strings.TrimSuffix(s, "\n"), "\n")
	if i < 0 || !strings.HasSuffix(s, "\n") {
		return nil, 0, errors.New("not a form history this version writes")
	}
	body, sum := s[:i+1], strings.TrimSuffix(s[i+1:], "\n")
	if sum != fmt.Sprintf("crc32c %08x", crc32.Checksum([]byte(body), crc32c)) {
		return nil, 0, errors.New("its checksum does not match")
	}
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	num := func(s string) (uint64, bool) {
		v, err := strconv.ParseUint(s, 10, 64)
		return v, err == nil && strconv.FormatUint(v, 10) == s
	}
	var gen uint64
	switch {
	case lines[0] == formsHeaderV1:
		lines = lines[1:]
	case lines[0] == formsHeader && len(lines) > 1:
		g, prefixed := strings.CutPrefix(lines[1], "generation ")
		var ok bool
		if gen, ok = num(g); !ok || !prefixed {
			return nil, 0, fmt.Errorf("line %q is not a generation this version writes", lines[1])
		}
		lines = lines[2:]
	default:
		return nil, 0, errors.New("not a form history this version writes")
	}
	var h formHistory
	currents := 0
	for _, l := range lines {
		f := strings.Fields(l)
		var e formEntry
		var ok1, ok2, ok3 bool
		switch {
		case len(f) == 4 && f[0] == "registry":
			e.registry, ok1 = f[1], ValidateName(f[1]) == nil
			e.node, ok2 = num(f[2])
			ok2 = ok2 && checkNodeNumber(e.node, 0) == nil
			e.stride, ok3 = num(f[3])
			ok3 = ok3 && (e.stride == 0 || checkStride(e.stride) == nil)
		case len(f) == 2 && f[0] == "decimal":
			e.form = FormatDecimal
			e.node, ok1 = num(f[1])
			ok2, ok3 = checkNodeNumber(e.node, 0) == nil, true
		case len(f) == 4 && f[0] == "striped":
			e.form = FormatStriped
			e.stride, ok1 = num(f[1])
			e.node, ok2 = num(f[2])
			if f[3] == "current" {
				e.current, ok3 = true, true
				currents++
			} else {
				e.upto, ok3 = num(f[3])
			}
			ok1 = ok1 && checkStride(e.stride) == nil
			ok2 = ok2 && checkNodeNumber(e.node, e.stride) == nil
		}
		if !ok1 || !ok2 || !ok3 {
			return nil, 0, fmt.Errorf("line %q is not a form this version writes", l)
		}
		h = append(h, e)
	}
	if currents > 1 {
		return nil, 0, errors.New("it records two striped forms in use")
	}
	return h, gen, nil
}

// current returns the striped form in use, if any.
func (h formHistory) current() (formEntry, bool) {
	for _, e := range h {
		if e.current {
			return e, true
		}
	}
	return formEntry{}, false
}

// highestStriped returns the highest id the counter may have issued under
// a striped form other than (stride, node), cur being the counter's value
// now (the bound of the form in use); ok is false if there is none. An id
// past 2^64-1 is reported as 2^64-1.
func (h formHistory) highestStriped(stride, node, cur uint64) (high uint64, ok bool) {
	for _, e := range h {
		if e.form != FormatStriped || e.stride == stride && e.node == node {
			continue
		}
		n := e.upto
		if e.current || e.unknown {
			n = max(n, cur)
		}
		hi, lo := bits.Mul64(n, e.stride)
		v, carry := bits.Add64(lo, e.node, 0)
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

// adoptForm, for a Generator of a numeric form fm, holding the counter's
// lock, records fm in the history and, for a striped form other than the
// one in use, first raises the counter so that fm's first id is above
// every id of the earlier striped forms (see the history's comment). It
// returns the value the counter was raised to (0: not raised).
func adoptForm(c *counterFile, f *formsFiles, fm idForm) (raised uint64, err error) {
	h, repair, err := f.read()
	if err != nil {
		return 0, err
	}
	if h == nil {
		// No history yet: a counter of a version that kept none may have
		// issued striped ids under the stride its number file records.
		if h, err = f.seed(); err != nil {
			return 0, err
		}
		repair = h != nil // written below, whatever the form
	} else {
		added, err := f.fromNumberFile(&h)
		if err != nil {
			return 0, err
		}
		repair = repair || added
	}
	cur, err := c.load()
	if err != nil {
		return 0, err
	}
	cur = max(cur, c.high)
	h.resolve(cur)
	switch fm.form {
	case FormatDecimal:
		for _, e := range h {
			if e.form == FormatDecimal && e.node == fm.node {
				if repair {
					return 0, f.write(h)
				}
				return 0, nil
			}
		}
		return 0, f.write(append(h, formEntry{form: FormatDecimal, node: fm.node}))
	case FormatStriped:
	default:
		return 0, nil
	}
	if high, ok := h.highestStriped(fm.stride, fm.node, cur); ok {
		if need := raiseFor(high, fm.stride, fm.node); need > cur {
			if need >= fm.limit {
				return 0, &FileError{Op: "open", Path: c.path, Err: fmt.Errorf(
					"%w: this counter handed out striped ids up to %d under another stride or node number; the %s form with stride %d and node number %d would start above them at number %d, past its bound (%d); nothing was issued",
					ErrExhausted, high, fm.form, fm.stride, fm.node, need+1, fm.limit)}
			}
			if err := c.store(need); err != nil {
				return 0, err
			}
			if !c.sync {
				if err := c.io.Sync(c.f); err != nil {
					return 0, &FileError{Op: "sync", Path: c.path, Err: err}
				}
			}
			raised = need
		}
	}
	if now, ok := h.current(); ok && now.stride == fm.stride && now.node == fm.node {
		// The form in use: the raise above is needed only for a form
		// the history took back (see read and fromNumberFile).
		if repair {
			return raised, f.write(h)
		}
		return raised, nil
	}
	next := make(formHistory, 0, len(h)+1)
	for _, e := range h {
		switch {
		case e.form == FormatStriped && e.stride == fm.stride && e.node == fm.node:
			continue // current again, below
		case e.current:
			e.current, e.upto = false, cur
		}
		next = append(next, e)
	}
	next = append(next, formEntry{form: FormatStriped, stride: fm.stride, node: fm.node, current: true})
	return raised, f.write(next)
}

// stillCurrent refuses, under the counter's lock at each update of a
// striped Generator, a counter whose history another Generator changed to
// another striped form since this one adopted its own.
func (f *formsFiles) stillCurrent(fm idForm) error {
	if !f.changed() {
		return nil
	}
	prev := f.seen
	h, _, err := f.read()
	if err == nil {
		if cur, ok := h.current(); ok && cur.stride == fm.stride && cur.node == fm.node {
			return nil
		}
	}
	f.seen = prev // refused at every later update too
	if err != nil {
		return err
	}
	return &FileError{Op: "advance", Path: f.paths[0], Err: fmt.Errorf(
		"%w: another process opened this counter with another striped form (stride or node number) than this Generator's (stride %d, node number %d), and striped ids of two forms meet; nothing was issued: close this Generator and open it again with the counter's form",
		ErrFormChanged, fm.stride, fm.node)}
}

// useForm records the numeric form fm of a Generator opening the counter
// file c (at path) in its form history before any id is handed out
// (raising the counter first if the striped form changed), and has every
// later update of a striped Generator check that its form is still the
// counter's.
func useForm(ctx context.Context, c *counterFile, path string, fm idForm, o *options) error {
	if fm.form == FormatName {
		return nil
	}
	f := newFormsFiles(path, o)
	var raised uint64
	err := c.withLockContext(ctx, func() (err error) {
		raised, err = adoptForm(c, f, fm)
		return err
	})
	if err != nil {
		return err
	}
	if raised != 0 {
		o.logger.Warn("snapid: counter raised above the striped ids it handed out under another stride or node number",
			"path", path, "to", raised, "stride", fm.stride, "node", fm.node)
	}
	if fm.form == FormatStriped {
		c.formCheck = func() error { return f.stillCurrent(fm) }
	}
	return nil
}
