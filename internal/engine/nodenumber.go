package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/snapid/snapid/internal/idform"
	"github.com/snapid/snapid/internal/retry"
	"github.com/snapid/snapid/registry"
	"golang.org/x/sys/unix"
)

// The node number a registry gives a name and, once a striped Generator
// needed it, the cluster's stride are kept in the host's record of the
// name (hoststate.Record.Node and Stride). The first process of the host
// records them after its claim, under the gate and the counter's lock;
// a record of the name with another number or stride than the registry's
// is refused (ErrNumberMismatch, ErrStrideMismatch) and nothing is
// issued. The host's other processes, joining its claim, read them from
// the record instead of asking the registry: only the counter's writers
// write it, and the first process of every claim checks it against the
// registry. An Open without a numbering registry takes them from the
// record too (see useRecordedNumber).
//
// Where a name's node number comes from: a registry that gives numbers
// (NumberRegistry) gives it at the name's first claim, for the claim's
// holder only, and it never changes (kept across restarts, releases and
// take-overs); without one, it is configured (WithNodeNumber, snapctl's
// --node-number). A WithNodeNumber or WithStride that is not the
// registry's, or a form the name's known number cannot use, is refused
// before the claim changes anything (precheckNumber). On every path the
// host claims the number for one name, and the host's stride, in its
// records' place (claimNumbers in recordjudge.go: entries "#node-<n>" and
// "#stride" created without replacing, so of two Opens at once one
// decides and the other is refused with ErrNumberBound or
// ErrStrideMismatch).

// numberClaim is an Open's side of its name's node number and the
// cluster's stride, with a registry: checked before the claim, given or
// learnt after it by the host's first process, read from the host's
// record by the others.
type numberClaim struct {
	o        *registryOptions
	name     string
	form     formOptions
	log      *slog.Logger
	rec      *hostRecord                                                    // the host's record of the name
	withFile func(ctx context.Context, fn func(c *counterFile) error) error // the Generator's file mutex and the counter's lock
	// recorded returns the node number and stride the host's record of
	// the name holds.
	recorded func() (node, stride uint64, err error)
	number   uint64 // the name's node number, 0 if none
	stride   uint64 // the cluster's stride, if the form needs it
}

// retry is retry.Do with the Open's logger and waits.
func (r *numberClaim) retry(ctx context.Context, op string, call func(context.Context) error) error {
	return retry.Do(ctx, r.o.clock, r.log, r.o.retryWait, op, call)
}

// claimNumber, for the first process of the host after its claim (h),
// has the name's node number given if the registry gives numbers, learns
// the cluster's stride if the striped form needs it (recording the one
// WithStride gave if the cluster has none), checks both against the
// host's record of the name and WithNodeNumber, and records them there.
func (r *numberClaim) claimNumber(ctx context.Context, owner string, h registry.Holder) error {
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
			n, err = nr.AssignNumber(ctx, r.name, owner, h.Session)
			return err
		})
		if err != nil {
			if r.form.form == FormatName {
				// The name form needs no number: a registry that cannot
				// give one now (a role that may not create its table, an
				// answer lost, a keyspace just created whose numbers'
				// table is still being made) does not keep the host from
				// starting. Only a host that asked for a number
				// (WithNodeNumber, WithStride) is warned.
				level := slog.LevelDebug
				if r.form.node != 0 || r.form.stride != 0 {
					level = slog.LevelWarn
				}
				r.log.Log(ctx, level, "snapid: the registry gave the name no node number; the numeric id forms need one", "name", r.name, "err", err)
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
	if stride == 0 {
		_, rs, err := r.rec.number()
		if err != nil {
			return err
		}
		stride = rs
	}
	if err := r.checkGivenNumber(n, stride); err != nil {
		return err
	}
	if err := r.rec.setNumber(ctx, r.withFile, n, stride); err != nil {
		return err
	}
	r.number, r.stride = n, stride
	return nil
}

// precheckBeforeHostFiles refuses a form this host cannot use (another
// stride or node number than the registry's or the host's record of the
// name, see precheckNumber) before the counter and the files beside it
// are made, so that bad input on a host's very first Open leaves nothing
// behind. It only reads; the claim checks again under the gate, where it
// counts.
func precheckBeforeHostFiles(ctx context.Context, path, name string, o *options) error {
	if o.reg.numbers == nil {
		return nil
	}
	r := &numberClaim{name: name, o: &o.reg, log: o.logger, form: o.form,
		recorded: func() (node, stride uint64, err error) {
			n, s, _, _ := recordedNumber(ctx, path, name, o)
			return n, s, nil // a record that cannot be read is the Open's to refuse
		}}
	return r.precheckNumber(ctx)
}

// precheckNumber refuses, before the claim changes anything in the
// registry, a form this host cannot use (bad input changes nothing): a
// WithNodeNumber or WithStride that is not what the host's record of the
// name or the registry holds, a striped form with no stride anywhere, a node number
// not below the cluster's stride, or a bound below the first id. Only a
// name's very first number is unknown here: the claim gives it, and a
// number the form cannot use is refused then.
func (r *numberClaim) precheckNumber(ctx context.Context) error {
	nr := r.o.numbers
	if nr == nil || r.form.form == FormatName && r.form.node == 0 && r.form.stride == 0 {
		return nil
	}
	n, s, err := r.recorded()
	if err != nil {
		return err
	}
	if n == 0 && (r.form.node != 0 || r.form.form == FormatStriped) {
		if n, err = r.registryNumber(ctx, nr); err != nil {
			return err
		}
	}
	if s == 0 && r.form.form == FormatStriped {
		if err = r.retry(ctx, "stride", func(ctx context.Context) (err error) { s, err = nr.Stride(ctx); return err }); err != nil {
			return err
		}
	}
	return r.precheckForm(n, s)
}

// registryNumber returns the node number the registry gave the name (0:
// none, or the name is not registered), refusing a WithNodeNumber while
// the name has none: it can only confirm the one the registry gives.
func (r *numberClaim) registryNumber(ctx context.Context, nr registry.NumberRegistry) (uint64, error) {
	var h registry.Holder
	err := r.retry(ctx, "get", func(ctx context.Context) (err error) { h, err = nr.Get(ctx, r.name); return err })
	if err != nil && !errors.Is(err, registry.ErrNotRegistered) {
		return 0, err
	}
	if h.Number == 0 && r.form.node != 0 {
		return 0, fmt.Errorf("snapid: %w: the registry gives node numbers, and %q has none yet: a node number given can only confirm the one it gives; open without one first", ErrNumberMismatch, r.name)
	}
	return h.Number, nil
}

// precheckForm refuses the form for the name's node number n and the
// cluster's stride s as known before the claim (0: not known): a
// WithNodeNumber or WithStride that is not theirs, a striped form with
// no stride anywhere or a bound below the first id, or a node number the
// form cannot use.
func (r *numberClaim) precheckForm(n, s uint64) error {
	if n != 0 {
		if err := r.checkGivenNumber(n, s); err != nil {
			return err
		}
	}
	if s != 0 && r.form.stride != 0 && s != r.form.stride {
		return fmt.Errorf("snapid: %w: the cluster's stride is %d, not %d (the stride given)", ErrStrideMismatch, s, r.form.stride)
	}
	if r.form.form == FormatStriped {
		s = max(s, r.form.stride) // the cluster's, or the one this Open would record
		switch {
		case s == 0:
			return fmt.Errorf("snapid: %w: the striped form needs the cluster's stride, and the registry records none: set it once for the cluster (snapctl setup --stride S, NumberRegistry.SetStride) or give the stride", ErrInvalidOption)
		case r.form.maxID != 0 && r.form.maxID < s+1:
			return fmt.Errorf("snapid: %w: bound %d is below the first striped id of any node (stride %d)", ErrInvalidOption, r.form.maxID, s)
		}
	}
	if r.form.form != FormatName && n != 0 {
		if _, err := idform.New(r.form.form, n, s, r.form.maxID); err != nil {
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
func (r *numberClaim) clusterStride(ctx context.Context, nr registry.NumberRegistry, n uint64) (uint64, error) {
	var s uint64
	err := r.retry(ctx, "stride", func(ctx context.Context) (err error) { s, err = nr.Stride(ctx); return err })
	if err != nil {
		return 0, err
	}
	if s == 0 && r.form.stride != 0 {
		if _, err := idform.New(FormatStriped, n, r.form.stride, r.form.maxID); err != nil {
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
		return 0, fmt.Errorf("snapid: %w: the striped form needs the cluster's stride, and the registry records none: set it once for the cluster (snapctl setup --stride S, NumberRegistry.SetStride) or give the stride", ErrInvalidOption)
	case r.form.stride != 0 && r.form.stride != s:
		return 0, fmt.Errorf("snapid: %w: the cluster's stride is %d, not %d (the stride given)", ErrStrideMismatch, s, r.form.stride)
	}
	return s, nil
}

// checkGivenNumber refuses a WithNodeNumber that is not the registry's.
func (r *numberClaim) checkGivenNumber(n, stride uint64) error {
	if r.form.node != 0 && r.form.node != n {
		return fmt.Errorf("snapid: %w: the registry gives %q node number %d, not %d (the node number given); nothing was issued", ErrNumberMismatch, r.name, n, r.form.node)
	}
	return nil
}

// joinNumber, for a process joining its host's claim, reads the node
// number and stride the first process recorded in the host's record of
// the name, when its form needs them.
func (r *numberClaim) joinNumber() error {
	if r.o.numbers == nil || r.form.form == FormatName {
		return nil
	}
	n, s, err := r.rec.number()
	if err != nil {
		return err
	}
	if n == 0 || r.form.form == FormatStriped && s == 0 {
		return fmt.Errorf("snapid: %w: the %s form needs the node number%s the host's first process records in %s, and it has not: restart the host's processes with this form (the first one asks the registry)",
			ErrInvalidOption, r.form.form, map[bool]string{true: " and stride", false: ""}[r.form.form == FormatStriped], r.rec.h.Path())
	}
	if r.form.stride != 0 && r.form.stride != s {
		return fmt.Errorf("snapid: %w: the cluster's stride is %d, not %d (the stride given)", ErrStrideMismatch, s, r.form.stride)
	}
	if err := r.checkGivenNumber(n, s); err != nil {
		return err
	}
	r.number, r.stride = n, s
	return nil
}

// numberedForm completes the form of a Generator with a registry once
// its reservation knows the node number and stride.
func numberedForm(o *options, r *numberClaim) (idform.Form, error) {
	f := o.form
	if f.form == FormatName {
		return idform.New(FormatName, 0, 0, f.maxID)
	}
	n, s := r.number, r.stride
	if n == 0 {
		// A registry that gives no numbers: the configured one.
		n, s = f.node, f.stride
	}
	if n == 0 {
		return idform.Form{}, fmt.Errorf("snapid: %w: the %s form needs a node number, and the registry gives none: give one", ErrInvalidOption, f.form)
	}
	if f.form == FormatStriped && s == 0 {
		s = f.stride
	}
	return idform.New(f.form, n, s, f.maxID)
}

// ReadNodeNumber returns the node name and number (and the cluster's
// stride, 0 if not recorded) a registry gave a name of the counter at
// counterPath, as the host's record of that name keeps them (WithBindingDir
// names the place of records); ok is false if there is none. Only records
// that speak for the counter count (see trusts); a name still in use is
// preferred to one released with the counter.
func ReadNodeNumber(counterPath string, opts ...Option) (name string, number, stride uint64, ok bool, err error) {
	o, err := buildOptions(opts)
	if err == nil {
		err = o.refuseOwner("ReadNodeNumber")
	}
	if err != nil {
		return "", 0, 0, false, err
	}
	counterPath = absPath(counterPath)
	dev, ino, there, err := counterIdentity(counterPath, o.followSymlinks)
	if err != nil || !there {
		return "", 0, 0, false, err
	}
	p, _, err := recordPlace(context.Background(), counterPath, &o, false)
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, 0, false, nil
	}
	if err != nil {
		return "", 0, 0, false, err
	}
	defer p.Close()
	var st unix.Stat_t
	if err := unix.Stat(counterPath, &st); err != nil {
		return "", 0, 0, false, nil
	}
	recs, _ := p.All(func(n string) bool { return ValidateName(n) == nil })
	for _, released := range []bool{false, true} {
		for _, r := range recs {
			if r.Dev == dev && r.Ino == ino && r.Node != 0 && r.Released == released && speaksFor(r, st) {
				return r.Name, r.Node, r.Stride, true, nil
			}
		}
	}
	return "", 0, 0, false, nil
}

// recordedNumber returns the node number and stride a registry gave name
// as the host's record of the name keeps them (0 if none), and where they
// were read. A name whose record has none, on a counter an earlier
// version kept files beside (not taken into the record yet, see
// migrate.go), has them from those files; others are the numbers they
// say a registry gave other names.
func recordedNumber(ctx context.Context, counterPath, name string, o *options) (node, stride uint64, where string, others []numberRecord) {
	if p, _, err := recordPlace(ctx, counterPath, o, false); err == nil {
		r, ok, err := p.Read(name)
		where = p.RecordPath(name)
		p.Close()
		if err == nil && ok && r.Node != 0 {
			return r.Node, r.Stride, "in the host's record of the name (" + where + ")", nil
		}
	}
	of, err := readOldFiles(counterPath, 0)
	if err != nil {
		return 0, 0, "", nil
	}
	where = "beside the counter by an earlier version (" + counterPath + numberSuffix + ", " + counterPath + formsSuffix + ")"
	for _, n := range of.numbers {
		if n.name == name {
			node, stride = n.number, max(stride, n.stride)
		} else {
			others = append(others, n)
		}
	}
	return node, stride, where, others
}

// useRecordedNumber, for an Open whose registry gives no node numbers (or
// that has no registry), checks WithNodeNumber and WithStride against the
// node number and stride a registry gave the name (see recordedNumber),
// and takes the recorded ones when the numeric form is asked for without
// them: the number belongs to the name cluster-wide, and another one on
// this counter would carry ids of another name's number. A name with
// none, or a name form Open with no number given, is left alone. Another
// name's number is refused by the host's claim of it (#node-N, see
// claimNumbers), or, on a counter not taken into the records yet, by the
// files an earlier version kept.
func useRecordedNumber(ctx context.Context, counterPath, name string, o *options) error {
	f := &o.form
	if f.form == FormatName && f.node == 0 && f.stride == 0 {
		return nil
	}
	node, stride, where, others := recordedNumber(ctx, absPath(counterPath), name, o)
	if node == 0 {
		return refuseOthersNumber(f, others, counterPath, name, where)
	}
	if err := checkRecordedNumber(f, node, stride, counterPath, name, where); err != nil {
		return err
	}
	if f.form != FormatName && f.node == 0 {
		f.node = node
	}
	if f.form == FormatStriped && f.stride == 0 {
		f.stride = stride
	}
	return nil
}

// refuseOthersNumber, for a name with no recorded node number, refuses a
// WithNodeNumber that the records (others, read where) say a registry
// gave another name.
func refuseOthersNumber(f *formOptions, others []numberRecord, counterPath, name, where string) error {
	for _, r := range others {
		if f.node == r.number {
			return &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
				"%w: node number %d is the registry's for %q (recorded %s), not for %q; nothing was issued",
				ErrNumberMismatch, r.number, r.name, where, name)}
		}
	}
	return nil
}

// checkRecordedNumber refuses a WithNodeNumber or WithStride that is not
// the node number or stride recorded (read where) for the name.
func checkRecordedNumber(f *formOptions, node, stride uint64, counterPath, name, where string) error {
	switch {
	case f.node != 0 && f.node != node:
		return &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
			"%w: the registry gave %q node number %d (recorded %s), not %d (the node number given); nothing was issued",
			ErrNumberMismatch, name, node, where, f.node)}
	case f.stride != 0 && stride != 0 && f.stride != stride:
		return &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
			"%w: the cluster's stride is %d (recorded %s), not %d (the stride given)", ErrStrideMismatch, stride, where, f.stride)}
	}
	return nil
}
