package snapid

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/snapid/snapid/internal/statefile"
)

// The number file <counter>.number records, beside the counter of a host
// with a registry, the node number the registry gave the host's name and,
// once a striped Generator needed it, the cluster's stride:
//
//	snapid-number 2
//	name <node name>
//	number <node number>
//	stride <stride, 0 if not known yet>
//	claim <hash of the claim's session and the lines above, 16 hex digits>
//
// The first process of the host writes it (atomically, made durable)
// after its claim when it is missing, names another name (a name released
// on this counter and followed by another) or lacks the stride; a file
// for the name with another number or stride than the registry's is
// refused (ErrNumberMismatch, ErrStrideMismatch) and nothing is issued.
// The host's other processes read it instead of asking the registry, and
// only when its claim line matches the session of the claim they join (the
// session file's) and its own lines: a file copied from another host,
// edited, or left by another claim is refused, so a joining process never issues another host's (or
// another name's) numeric ids. Version 1 files (no session) are read, and
// rewritten by the next claim.
const numberSuffix = ".number"

type numberRecord struct {
	name           string
	number, stride uint64
	check          uint64 // numberCheck of the claim that wrote it (0: a version 1 file)
}

// numberCheck binds a number record to the claim's session.
func numberCheck(session string, f numberRecord) uint64 {
	return sessionHash(fmt.Sprintf("%s\n%s\n%d\n%d", session, f.name, f.number, f.stride))
}

func encodeNumberFile(f numberRecord) []byte {
	return fmt.Appendf(nil, "snapid-number 2\nname %s\nnumber %d\nstride %d\nclaim %016x\n", f.name, f.number, f.stride, f.check)
}

func decodeNumberFile(b []byte) (numberRecord, error) {
	bad := func(why string) (numberRecord, error) {
		return numberRecord{}, fmt.Errorf("%w: %s; stop the host's programs and remove it (the next start writes it again from the registry; the form history beside the counter, <counter>.forms, keeps the forms this counter issued under and the node number a registry gave the name)", ErrCorruptNumber, why)
	}
	lines := strings.Split(string(b), "\n")
	var f numberRecord
	switch {
	case len(lines) == 5 && lines[0] == "snapid-number 1" && lines[4] == "":
	case len(lines) == 6 && lines[0] == "snapid-number 2" && lines[5] == "":
		h, ok := strings.CutPrefix(lines[4], "claim ")
		v, err := strconv.ParseUint(h, 16, 64)
		if !ok || err != nil || len(h) != 16 || fmt.Sprintf("%016x", v) != h {
			return bad("no valid claim line")
		}
		f.check = v
	default:
		return bad("not a number file this version writes")
	}
	var ok bool
	if f.name, ok = strings.CutPrefix(lines[1], "name "); !ok || ValidateName(f.name) != nil {
		return bad("no valid node name")
	}
	num, ok := strings.CutPrefix(lines[2], "number ")
	n, err := strconv.ParseUint(num, 10, 64)
	if !ok || err != nil || n == 0 || n > MaxNodeNumber || strconv.FormatUint(n, 10) != num {
		return bad("no valid node number")
	}
	str, ok := strings.CutPrefix(lines[3], "stride ")
	s, err := strconv.ParseUint(str, 10, 64)
	if !ok || err != nil || (s != 0 && checkStride(s) != nil) || strconv.FormatUint(s, 10) != str {
		return bad("no valid stride")
	}
	f.number, f.stride = n, s
	return f, nil
}

func (h *hostState) numberPath() string {
	return strings.TrimSuffix(h.sessionPath, sessionSuffix) + numberSuffix
}

// readNumber reads the number file; ok is false if there is none.
func (h *hostState) readNumber() (f numberRecord, ok bool, err error) {
	p := h.numberPath()
	b, err := readSmallFile(p, false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return numberRecord{}, false, nil
	case err != nil:
		return numberRecord{}, false, &FileError{Op: "read", Path: p, Err: classifyOpenError(err)}
	}
	if f, err = decodeNumberFile(b); err != nil {
		return numberRecord{}, false, &FileError{Op: "read", Path: p, Err: err}
	}
	return f, true, nil
}

// claimNumber, for the first process of the host after its claim (h),
// has the name's node number given if the registry gives numbers, learns
// the cluster's stride if the striped form needs it (recording the one
// WithStride gave if the cluster has none), checks both against the
// number file and WithNodeNumber, and records them.
func (r *reservation) claimNumber(ctx context.Context, h Holder) error {
	nr := r.o.numbers
	if nr == nil {
		return nil
	}
	n := h.Number
	if n == 0 {
		actx := ctx
		if r.form.form == FormatName {
			// The name form needs no number: it waits for one a bounded
			// share of the claim's time, and starts without it.
			limit := 2 * time.Second
			if d, ok := ctx.Deadline(); ok {
				limit = min(limit, r.o.clock.Until(d)/4)
			}
			var cancel context.CancelFunc
			actx, cancel = r.o.clock.WithTimeout(ctx, limit)
			defer cancel()
		}
		err := r.retry(actx, "assign number", func(ctx context.Context) (err error) {
			n, err = nr.AssignNumber(ctx, r.name, r.host.owner, h.Session)
			return err
		})
		if err != nil {
			if r.form.form == FormatName {
				// The name form needs no number: a registry that cannot
				// give one now (a role that may not create its table, an
				// answer lost) does not keep the host from starting.
				r.log.Warn("snapid: the registry gave the name no node number; the numeric id forms need one", "name", r.name, "err", err)
				return nil
			}
			return err
		}
	}
	stride := uint64(0)
	if r.form.form == FormatStriped {
		var err error
		if stride, err = r.clusterStride(ctx, nr, n); err != nil {
			return err
		}
	}
	f, ok, err := r.host.readNumber()
	if err != nil {
		if r.form.form == FormatName {
			r.log.Warn("snapid: the number file beside the counter cannot be read; the numeric id forms will refuse to start until it is removed", "err", err)
			return nil
		}
		return err
	}
	if ok && f.name == r.name {
		if f.number != n {
			return &FileError{Op: "open", Path: r.host.numberPath(), Err: fmt.Errorf(
				"%w: the registry gives %q node number %d, and this counter recorded %d; was the registry's row or this file replaced? Nothing was issued",
				ErrNumberMismatch, r.name, n, f.number)}
		}
		if stride == 0 {
			stride = f.stride
		} else if f.stride != 0 && f.stride != stride {
			return &FileError{Op: "open", Path: r.host.numberPath(), Err: fmt.Errorf(
				"%w: the cluster's stride is %d, and this counter recorded %d", ErrStrideMismatch, stride, f.stride)}
		}
	}
	if err := r.checkGivenNumber(n, stride); err != nil {
		return err
	}
	want := numberRecord{name: r.name, number: n, stride: stride}
	want.check = numberCheck(h.Session, want)
	if !ok || f != want {
		if err := statefile.ReplaceAtomically(r.host.fs, r.host.numberPath(), encodeNumberFile(want), r.host.mode); err != nil {
			return &FileError{Op: "write", Path: r.host.numberPath(), Err: err}
		}
	}
	r.number, r.stride = n, stride
	return nil
}

// precheckBeforeHostFiles refuses a form this host cannot use (another
// stride or node number than the registry's or the number file's, see
// precheckNumber) before the counter and the files beside it are made, so that
// bad input on a host's very first Open leaves nothing behind. It only
// reads; the claim checks again under the gate, where it counts.
func precheckBeforeHostFiles(ctx context.Context, path, name string, o *options) error {
	if o.reg.numbers == nil {
		return nil
	}
	r := &reservation{name: name, host: &hostState{sessionPath: path + sessionSuffix}, o: o.reg, log: o.logger, form: o.form}
	return r.precheckNumber(ctx)
}

// precheckNumber refuses, before the claim changes anything in the
// registry, a form this host cannot use (bad input changes nothing): a
// WithNodeNumber or WithStride that is not what the number file or the
// registry holds, a striped form with no stride anywhere, a node number
// not below the cluster's stride, or a bound below the first id. Only a
// name's very first number is unknown here: the claim gives it, and a
// number the form cannot use is refused then.
func (r *reservation) precheckNumber(ctx context.Context) error {
	nr := r.o.numbers
	numeric := r.form.form != FormatName
	if nr == nil || !numeric && r.form.node == 0 && r.form.stride == 0 {
		return nil
	}
	f, ok, err := r.host.readNumber()
	if err != nil {
		return err
	}
	n, s := uint64(0), uint64(0)
	if ok && f.name == r.name {
		n, s = f.number, f.stride
	}
	if n == 0 && (r.form.node != 0 || r.form.form == FormatStriped) {
		var h Holder
		err := r.retry(ctx, "get", func(ctx context.Context) (err error) { h, err = nr.Get(ctx, r.name); return err })
		if err != nil && !errors.Is(err, ErrNotRegistered) {
			return err
		}
		if n = h.Number; n == 0 && r.form.node != 0 {
			return fmt.Errorf("snapid: %w: the registry gives node numbers, and %q has none yet: WithNodeNumber can only confirm the one it gives; open without it first", ErrNumberMismatch, r.name)
		}
	}
	if s == 0 && r.form.form == FormatStriped {
		if err = r.retry(ctx, "stride", func(ctx context.Context) (err error) { s, err = nr.Stride(ctx); return err }); err != nil {
			return err
		}
	}
	if n != 0 {
		if err := r.checkGivenNumber(n, s); err != nil {
			return err
		}
	}
	if s != 0 && r.form.stride != 0 && s != r.form.stride {
		return fmt.Errorf("snapid: %w: the cluster's stride is %d, not %d (WithStride)", ErrStrideMismatch, s, r.form.stride)
	}
	if r.form.form == FormatStriped {
		s = max(s, r.form.stride) // the cluster's, or the one this Open would record
		switch {
		case s == 0:
			return fmt.Errorf("snapid: %w: the striped form needs the cluster's stride, and the registry records none: set it once for the cluster (snapctl setup --stride S, NumberRegistry.SetStride) or give WithStride", ErrInvalidOption)
		case r.form.maxID != 0 && r.form.maxID < s+1:
			return fmt.Errorf("snapid: %w: bound %d is below the first striped id of any node (stride %d)", ErrInvalidOption, r.form.maxID, s)
		}
	}
	if numeric && n != 0 {
		if _, err := newIDForm(r.form.form, n, s, r.form.maxID); err != nil {
			return fmt.Errorf("%w (the registry's node number for %q is %d; nothing was claimed)", err, r.name, n)
		}
	}
	return nil
}

// clusterStride returns the cluster's stride: the registry's, or, if it
// records none, the one WithStride gave, recorded there first.
//
// The stride is recorded only once this host's form is known to work with
// it (node number n below it, the bound above the first id): a refused
// Open never fixes a stride for the cluster.
func (r *reservation) clusterStride(ctx context.Context, nr NumberRegistry, n uint64) (uint64, error) {
	var s uint64
	err := r.retry(ctx, "stride", func(ctx context.Context) (err error) { s, err = nr.Stride(ctx); return err })
	if err != nil {
		return 0, err
	}
	if s == 0 && r.form.stride != 0 {
		if _, err := newIDForm(FormatStriped, n, r.form.stride, r.form.maxID); err != nil {
			return 0, fmt.Errorf("%w (the registry's node number for %q is %d; the cluster's stride was not recorded)", err, r.name, n)
		}
		// Set once for the cluster: sent again, it answers the stride
		// that stands.
		if err = r.retry(ctx, "set stride", func(ctx context.Context) (err error) { s, err = nr.SetStride(ctx, r.form.stride); return err }); err != nil {
			return 0, err
		}
	}
	switch {
	case s == 0:
		return 0, fmt.Errorf("snapid: %w: the striped form needs the cluster's stride, and the registry records none: set it once for the cluster (snapctl setup --stride S, NumberRegistry.SetStride) or give WithStride", ErrInvalidOption)
	case r.form.stride != 0 && r.form.stride != s:
		return 0, fmt.Errorf("snapid: %w: the cluster's stride is %d, not %d (WithStride)", ErrStrideMismatch, s, r.form.stride)
	}
	return s, nil
}

// checkGivenNumber refuses a WithNodeNumber that is not the registry's.
func (r *reservation) checkGivenNumber(n, stride uint64) error {
	if r.form.node != 0 && r.form.node != n {
		return fmt.Errorf("snapid: %w: the registry gives %q node number %d, not %d (WithNodeNumber); nothing was issued", ErrNumberMismatch, r.name, n, r.form.node)
	}
	return nil
}

// joinNumber, for a process joining its host's claim, reads the node
// number and stride the first process recorded, when its form needs
// them.
func (r *reservation) joinNumber() error {
	if r.o.numbers == nil || r.form.form == FormatName {
		return nil
	}
	f, ok, err := r.host.readNumber()
	if err != nil {
		return err
	}
	if ok && f.name != r.name {
		return &FileError{Op: "open", Path: r.host.numberPath(), Err: fmt.Errorf(
			"%w: it records the node number of %q, not of %q (the name this host's claim is for): left by another name or copied from another host? Nothing was issued; "+
				"restart the host's processes (the first one asks the registry and writes it again)", ErrNumberMismatch, f.name, r.name)}
	}
	if !ok || r.form.form == FormatStriped && f.stride == 0 {
		return fmt.Errorf("snapid: %w: the %s form needs the node number%s the host's first process records in %s, and it has not: restart the host's processes with this form (the first one asks the registry)",
			ErrInvalidOption, r.form.form, map[bool]string{true: " and stride", false: ""}[r.form.form == FormatStriped], r.host.numberPath())
	}
	if f.check != numberCheck(r.session, f) {
		return &FileError{Op: "open", Path: r.host.numberPath(), Err: fmt.Errorf(
			"%w: it was not written by the claim this process joins (session %s): replaced, edited or copied from another host? Nothing was issued; "+
				"restart the host's processes (the first one asks the registry and writes it again)", ErrNumberMismatch, r.host.sessionPath)}
	}
	if r.form.stride != 0 && r.form.stride != f.stride {
		return fmt.Errorf("snapid: %w: the cluster's stride is %d, not %d (WithStride)", ErrStrideMismatch, f.stride, r.form.stride)
	}
	if err := r.checkGivenNumber(f.number, f.stride); err != nil {
		return err
	}
	r.number, r.stride = f.number, f.stride
	return nil
}

// numberedForm completes the form of a Generator with a registry once
// its reservation knows the node number and stride.
func numberedForm(o *options, r *reservation) (idForm, error) {
	f := o.form
	if f.form == FormatName {
		return newIDForm(FormatName, 0, 0, f.maxID)
	}
	n, s := r.number, r.stride
	if n == 0 {
		// A registry that gives no numbers: the configured one.
		n, s = f.node, f.stride
	}
	if n == 0 {
		return idForm{}, fmt.Errorf("snapid: %w: the %s form needs a node number, and the registry gives none: WithNodeNumber", ErrInvalidOption, f.form)
	}
	if f.form == FormatStriped && s == 0 {
		s = f.stride
	}
	return newIDForm(f.form, n, s, f.maxID)
}

// ReadNodeNumber returns the node name and number (and the cluster's
// stride, 0 if not recorded) this host's first process recorded beside
// the counter at counterPath from the registry (<counter>.number); ok is
// false if there is none.
func ReadNodeNumber(counterPath string) (name string, number, stride uint64, ok bool, err error) {
	h := &hostState{sessionPath: counterPath + sessionSuffix}
	f, ok, err := h.readNumber()
	if err != nil || !ok {
		return "", 0, 0, false, err
	}
	return f.name, f.number, f.stride, true, nil
}

// useRecordedNumber, for an Open whose registry gives no node numbers (or
// that has no registry), checks WithNodeNumber and WithStride against the
// number file a registry that gave numbers left beside the counter, and
// takes the recorded ones when the numeric form is asked for without
// them: the number belongs to the name cluster-wide, and another one on
// this counter would carry ids of another name's number. Without a number
// file (removed, or lost with the host's state), the registry records of
// the counter's form history stand in for it (see formhistory.go): every
// node number a registry gave a name on this counter. A counter with
// neither, or a name form Open with no number given, is left alone. The
// history's record refuses another node number for the name, and another
// name the registry's number, as the number file does; it does not hold
// the stride to its record (the history raises this counter across a
// change of stride, and the stride of the cluster's other counters is the
// operator's part then, as without a registry).
func useRecordedNumber(counterPath, name string, o *options) error {
	f := &o.form
	if f.form == FormatName && f.node == 0 && f.stride == 0 {
		return nil
	}
	h := &hostState{sessionPath: counterPath + sessionSuffix}
	path, where := h.numberPath(), ""
	rec, ok, err := h.readNumber()
	if err != nil {
		return err
	}
	recs := []numberRecord{rec}
	if !ok {
		forms := newFormsFiles(counterPath, o)
		hist, _, err := forms.read()
		if err != nil {
			return err
		}
		if recs = hist.registryNumbers(); len(recs) == 0 {
			return nil
		}
		path, where = forms.paths[0], " in its form history, the number file "+h.numberPath()+" being missing"
		rec, ok = recs[len(recs)-1], false
		for _, r := range recs {
			if r.name == name {
				rec, ok = r, true
			}
		}
	} else {
		ok = rec.name == name
	}
	if !ok {
		for _, r := range recs {
			if r.name != name && f.node == r.number {
				return &FileError{Op: "open", Path: path, Err: fmt.Errorf(
					"%w: node number %d is the registry's for %q (recorded beside this counter%s), not for %q; nothing was issued",
					ErrNumberMismatch, r.number, r.name, where, name)}
			}
		}
		return nil
	}
	switch {
	case f.node != 0 && f.node != rec.number:
		return &FileError{Op: "open", Path: path, Err: fmt.Errorf(
			"%w: the registry gave %q node number %d (recorded beside this counter%s), not %d (WithNodeNumber); nothing was issued",
			ErrNumberMismatch, name, rec.number, where, f.node)}
	case f.stride != 0 && rec.stride != 0 && f.stride != rec.stride && where == "":
		// Only the number file holds the stride to: a stride changed
		// once it is removed is the form history's to make safe on
		// this counter (it raises the counter).
		return &FileError{Op: "open", Path: path, Err: fmt.Errorf(
			"%w: the cluster's stride is %d (recorded beside this counter%s), not %d (WithStride)", ErrStrideMismatch, rec.stride, where, f.stride)}
	}
	if f.form != FormatName && f.node == 0 {
		f.node = rec.number
	}
	if f.form == FormatStriped && f.stride == 0 {
		f.stride = rec.stride
	}
	return nil
}
