package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/snapid/snapid/internal/hoststate"
	"github.com/snapid/snapid/internal/idform"
	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// Files earlier versions kept beside the counter, whose facts the host's
// record of the name holds now. The first Open of the counter that finds
// them reads them once, merges what they say into the record (and into
// the records and claims of the names they name), and removes them once
// the record holds it, synced. Nothing else reads them.
//
//	<counter>.forms, <counter>.forms.copy   the form history, two copies
//	<counter>.number                        the node number a registry gave
//	<counter>.released                      the name this host released
//
// A copy of the history is
//
//	snapid-forms 2
//	generation <one more than the highest of the copies it replaced>
//	registry <node name> <node number> <stride, 0 if not known>
//	striped <stride> <node number> <counter when it was left>
//	striped <stride> <node number> current
//	decimal <node number>
//	crc32c <checksum of the lines above, hex>
//
// (version 1: no generation line, no registry lines). The two copies are
// read together: every form either records is kept, the form in use is
// the one of the copy with the higher generation, and a form one copy
// records as in use and the other does not is taken as left at the
// counter's value now. Both damaged (or one damaged, the other missing)
// is errCorruptForms: the forms they record are not known, and are not
// forgotten either.
//
// The number file is "snapid-number 2", then "name <node name>", "number
// <node number>", "stride <stride, 0 if not known>" and "claim <16 hex
// digits>" (version 1: no claim line), each on a line; damaged, it is
// errCorruptNumber. The striped form of its stride and number is taken
// into the history as left at the counter's value now, when the history
// lacks it.
//
// The released file is "snapid-released 1" and the name, each on a line.
//
// A file that is not a regular file of the user running (another user's
// file in a shared directory, a directory, a FIFO, a link) was not made
// by snapid for this counter: it is neither read nor removed, with a
// warning.
const (
	formsSuffix     = ".forms"
	formsCopySuffix = ".forms.copy"
	numberSuffix    = ".number"
	releasedSuffix  = ".released"
	formsHeader     = "snapid-forms 2"
	formsHeaderV1   = "snapid-forms 1"
	releasedHeader  = "snapid-released 1"
)

// oldFiles is what an earlier version's files beside a counter say.
type oldFiles struct {
	forms   formHistory // the history's copies merged, with the number file's form
	numbers []numberRecord
	// ours are the files read, removed once the record holds what they
	// say; skipped those that are not snapid's (see notOurs).
	ours, skipped []string
}

// notOurs reports whether err, from reading an earlier version's file,
// says the thing there is not a regular file of the user running.
func notOurs(err error) bool {
	return errors.Is(err, statefile.ErrWrongOwner) || errors.Is(err, statefile.ErrLinked) ||
		errors.Is(err, statefile.ErrNotRegular) || errors.Is(err, statefile.ErrSymlink) ||
		errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EISDIR)
}

// readOld reads the file at path: nil when it is not there or not ours
// (then listed in skipped). Root's files are ours too: root ran the
// earlier version with this counter.
func (of *oldFiles) readOld(path string) ([]byte, error) {
	b, _, err := statefile.ReadSmallOwnedOrRoot(path, false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil && notOurs(err):
		of.skipped = append(of.skipped, path)
		return nil, nil
	case err != nil:
		return nil, &FileError{Op: "read", Path: path, Err: classifyOpenError(err)}
	}
	of.ours = append(of.ours, path)
	return b, nil
}

// readOldFiles reads the form history and the number file an earlier
// version kept beside the counter at counterPath, cur being the counter's
// value now.
func readOldFiles(counterPath string, cur uint64) (of oldFiles, err error) {
	if err := of.readForms(counterPath); err != nil {
		return of, err
	}
	if err := of.readNumber(counterPath); err != nil {
		return of, err
	}
	of.forms.resolve(cur)
	for _, e := range of.forms {
		if e.registry != "" {
			of.numbers = append(of.numbers, numberRecord{name: e.registry, number: e.node, stride: e.stride})
		}
	}
	return of, nil
}

// readForms reads the two copies of the form history beside the counter
// at counterPath into of.forms: merged when both are valid, the valid
// one's when one is, and errCorruptForms when neither is and one is
// there.
func (of *oldFiles) readForms(counterPath string) error {
	paths := [2]string{counterPath + formsSuffix, counterPath + formsCopySuffix}
	var got [2]formHistory
	var gen [2]uint64
	var bad [2]error
	var found [2]bool
	for i, p := range paths {
		b, err := of.readOld(p)
		if err != nil {
			return err
		}
		if b != nil {
			found[i] = true
			got[i], gen[i], bad[i] = decodeFormsGen(b)
		}
	}
	good0, good1 := found[0] && bad[0] == nil, found[1] && bad[1] == nil
	switch {
	case good0 && good1:
		of.forms = mergeForms(got[0], gen[0], got[1], gen[1])
	case good0:
		of.forms = got[0]
	case good1:
		of.forms = got[1]
	case found[0] || found[1]:
		return corruptFormsError(paths, found, bad)
	}
	return nil
}

// corruptFormsError is the error of a form history whose copies at paths
// (found: there, bad: why one cannot be used) are damaged or missing, one
// of them at least there.
func corruptFormsError(paths [2]string, found [2]bool, bad [2]error) error {
	i := 0
	if !found[0] {
		i = 1
	}
	other := fmt.Sprintf("and its copy %s cannot be used either (%v)", paths[1-i], bad[1-i])
	if !found[1-i] {
		other = fmt.Sprintf("and the other copy, %s, is missing", paths[1-i])
	}
	return &FileError{Op: "read", Path: paths[i], Err: fmt.Errorf(
		"%w: %w, %s; an earlier version recorded there the striped forms this counter issued under, and the host's record of the name takes them over: "+
			"restore one from a backup, or raise the counter (snapctl init) past every striped id it handed out under another stride or node number than the one it will use, then remove both",
		errCorruptForms, bad[i], other)}
}

// readNumber reads the number file beside the counter at counterPath, if
// there is one, into of.forms: the registry's number for its name and,
// with a stride, the striped form of both, unless the history has them.
func (of *oldFiles) readNumber(counterPath string) error {
	b, err := of.readOld(counterPath + numberSuffix)
	if err != nil || b == nil {
		return err
	}
	n, err := decodeNumberFile(b)
	if err != nil {
		return &FileError{Op: "read", Path: counterPath + numberSuffix, Err: err}
	}
	if i := of.forms.find(formEntry{registry: n.name, node: n.number}); i < 0 {
		of.forms = append(of.forms, formEntry{registry: n.name, node: n.number, stride: n.stride})
	} else {
		of.forms[i].stride = max(of.forms[i].stride, n.stride)
	}
	if st := (formEntry{form: FormatStriped, stride: n.stride, node: n.number, unknown: true}); n.stride != 0 && idform.CheckNodeNumber(n.number, n.stride) == nil && of.forms.find(st) < 0 {
		of.forms = append(of.forms, st)
	}
	return nil
}

// merge takes what the files say into r, the record of name: the forms
// (a striped form the files record as in use stays in use unless the
// record has one; else it is left at cur, the counter's value now), and
// the node number and stride a registry gave name.
func (of *oldFiles) merge(r *hoststate.Record, name string, cur uint64) {
	current := false
	for _, e := range r.Forms {
		current = current || e.Current
	}
	for _, e := range of.forms {
		switch e.form {
		case FormatDecimal:
			if f := (hoststate.Form{Kind: formDecimal, Node: e.node}); !r.HasForm(f) {
				r.Forms = append(r.Forms, f)
			}
		case FormatStriped:
			current = mergeStriped(r, e, cur, current)
		default:
			if e.registry == name && (r.Node == 0 || r.Node == e.node) {
				r.Node, r.Stride = e.node, max(r.Stride, e.stride)
			}
		}
	}
}

// mergeStriped takes the striped form e into r: one the record has in
// use stays as it is, one it has left keeps the higher value, and a new
// one is added, in use if e is and the record has none in use (current
// says whether it has; mergeStriped returns it updated), else left at
// its value (at least cur, the counter's value now, if e was in use).
func mergeStriped(r *hoststate.Record, e formEntry, cur uint64, current bool) bool {
	f := hoststate.Form{Kind: formStriped, Node: e.node, Stride: e.stride, Upto: e.upto}
	if e.current {
		f.Upto = max(f.Upto, cur) // unless it stays in use, below
	}
	i := r.FormIndex(f)
	switch {
	case i >= 0 && r.Forms[i].Current:
	case i >= 0:
		r.Forms[i].Upto = max(r.Forms[i].Upto, f.Upto)
	case e.current && !current:
		f.Current, f.Upto, current = true, 0, true
		r.Forms = append(r.Forms, f)
	default:
		r.Forms = append(r.Forms, f)
	}
	return current
}

// claimOthers claims, for the other names the files record a registry
// number of, their numbers (#node-N), as their Opens do: no name of the
// host takes another's number. A number already claimed is left as it
// is.
func (of *oldFiles) claimOthers(p *hoststate.Place, name string) {
	for _, n := range of.numbers {
		if n.name != name {
			_, _, _, _ = p.Claim("#node-"+strconv.FormatUint(n.number, 10), n.name)
		}
	}
}

// ownNumbers returns the node numbers and the stride the files say name
// issued under (the forms in them were the counter's, and so the name's):
// the node number a registry gave name, each decimal form's, and the
// striped form in use's node number and stride (0: none).
func (of *oldFiles) ownNumbers(name string) (nodes []uint64, stride uint64) {
	for _, e := range of.forms {
		switch {
		case e.registry != "" && e.registry != name:
		case e.registry != "" || e.form == FormatDecimal:
			nodes = append(nodes, e.node)
		case e.form == FormatStriped && e.current:
			nodes, stride = append(nodes, e.node), e.stride
		}
	}
	return nodes, stride
}

// precheckOldFiles reads the files an earlier version kept beside the
// counter at path (at v now) before anything is made for name: a damaged
// one refuses the Open, a striped form f their history refuses (a raise
// past its bound) too, and the node numbers and stride they say name
// issued under are claimed for it, as its own Opens claimed them then
// (another name taking them would repeat its ids). rec is the name's
// record, if it has one.
func precheckOldFiles(p *hoststate.Place, rec hoststate.Record, name, path string, v uint64, f idform.Form, o *options, trust func(uint32) bool) error {
	of, err := readOldFiles(path, v)
	if err != nil || len(of.ours) == 0 {
		return err
	}
	of.merge(&rec, name, v)
	if f.Format == FormatStriped && o.reg.registry == nil {
		if _, err := stripedRaise(rec.Forms, f, v, path); err != nil {
			return err
		}
	}
	nodes, stride := of.ownNumbers(name)
	if stride != 0 && f.Format != FormatStriped {
		// (A striped Open claims its own stride: the history raises the
		// counter past the ids of the one it leaves.)
		if err := claimNumbers(p, name, idform.Form{Format: FormatStriped, Stride: stride}, 0, trust); err != nil {
			return err
		}
	}
	for _, n := range nodes {
		if err := claimNumbers(p, name, idform.Form{}, n, trust); err != nil {
			return err
		}
	}
	return nil
}

// remove removes the files read (the record holds what they said, synced)
// and tells of those left.
func (of *oldFiles) remove(o *options, record string) {
	for _, p := range of.ours {
		if err := o.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			o.logger.Warn("snapid: could not remove a file an earlier version kept beside the counter; the host's record of the name holds what it said", "path", p, "err", err)
		}
	}
	if len(of.ours) > 0 {
		dir, _ := statefile.SplitPath(of.ours[0])
		_ = o.fs.SyncDir(dir)
		o.logger.Info("snapid: files an earlier version kept beside the counter are now the host's record of the name", "files", of.ours, "record", record)
	}
	for _, p := range of.skipped {
		o.logger.Warn("snapid: something at the path of a file an earlier version kept beside the counter is not a regular file of this user: neither read nor removed; find out who made it", "path", p)
	}
}

// migrateReleased makes the release an earlier version recorded beside
// the counter at counterPath (<counter>.released) the release of the
// host's record of that name (see markReleasedIn), and removes the file;
// with WithReclaim a file that cannot be read is removed too.
func migrateReleased(ctx context.Context, p *hoststate.Place, counterPath string, o *options) error {
	path := counterPath + releasedSuffix
	if _, err := os.Lstat(path); err != nil {
		return nil
	}
	of := oldFiles{}
	name, ok, err := of.releasedName(path, counterPath, o)
	if !ok {
		return err
	}
	c, err := openReadOnly(counterPath, o)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no counter to release: for the Open that makes one
	}
	if err != nil {
		return err
	}
	defer c.Close()
	v, err := c.ReadContext(ctx)
	if err != nil {
		return err
	}
	if r, ok, err := p.Read(name); err != nil {
		return recordError(p, name, err)
	} else if !ok || r.Dev == c.Dev() && r.Ino == c.Ino() {
		// Released with this counter (a record naming another counter
		// moved on: its name is not released there).
		if _, err := markReleasedIn(ctx, p, c, name, v); err != nil {
			return err
		}
	}
	of.remove(o, p.RecordPath(name))
	return nil
}

// releasedName reads the released file at path (beside the counter at
// counterPath): the name it says this host released, ok. Without one
// (the file gone, or not ours) the file is left or removed as it is, and
// one that cannot be read is removed with WithReclaim, else the Open is
// refused (ErrReleased): then ok is false, and err says why the Open
// cannot go on, if it cannot.
func (of *oldFiles) releasedName(path, counterPath string, o *options) (name string, ok bool, err error) {
	b, err := of.readOld(path)
	if err != nil || b == nil {
		of.remove(o, "")
		return "", false, err
	}
	header, name, ok := strings.Cut(strings.TrimSuffix(string(b), "\n"), "\n")
	if !ok || header != releasedHeader || ValidateName(name) != nil {
		if !o.reg.reclaim {
			return "", false, &FileError{Op: "open", Path: counterPath, Err: fmt.Errorf(
				"%w: %s says this host released a name with this counter, and it cannot be read; claim a name again on purpose (snapctl register, or Reclaim)",
				ErrReleased, path)}
		}
		of.remove(o, "")
		return "", false, nil
	}
	return name, true, nil
}
