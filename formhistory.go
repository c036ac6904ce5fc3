package snapid

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/bits"
	"strconv"
	"strings"
	"unsafe"

	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
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

// formsFiles is the history's two copies beside one counter.
type formsFiles struct {
	paths       [2]string
	counterPath string
	fs          fsOps
	mode        fs.FileMode
	// seen identifies the primary copy as last read or written (see
	// changed); cpath is its path as a C string, so that the check at
	// every update allocates nothing.
	seen  fileID
	cpath *byte
	// gen is the highest generation of the copies last read or written;
	// the next write is gen+1.
	gen uint64
}

// fileID identifies a file's content: a new copy is renamed into place,
// so another inode (or size) is another history.
type fileID struct {
	dev, ino, size uint64
	ok             bool
}

// statID returns the identity of the file at cpath.
func statID(cpath *byte) fileID {
	var stx unix.Statx_t
	dirfd := unix.AT_FDCWD
	_, _, errno := unix.Syscall6(unix.SYS_STATX, uintptr(dirfd), uintptr(unsafe.Pointer(cpath)),
		uintptr(unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC), uintptr(unix.STATX_INO|unix.STATX_SIZE), uintptr(unsafe.Pointer(&stx)), 0)
	if errno != 0 {
		return fileID{}
	}
	return fileID{dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor), ino: stx.Ino, size: stx.Size, ok: true}
}

func newFormsFiles(counterPath string, o *options) *formsFiles {
	fsys := o.fs
	if fsys == nil {
		fsys = osFS{}
	}
	f := &formsFiles{paths: [2]string{counterPath + formsSuffix, counterPath + formsCopySuffix}, counterPath: counterPath, fs: fsys, mode: o.fileMode}
	f.cpath, _ = unix.BytePtrFromString(f.paths[0]) // a path with a NUL fails to open anyway
	return f
}

// read returns the history (nil if neither copy exists): every form
// either valid copy records (see mergeForms), and whether the copies must
// be written again (one missing, damaged, older or otherwise different).
// Both damaged is ErrCorruptForms; something at either path that is not
// a regular file of the counter's user is refused as such (see
// untrustedForms).
func (f *formsFiles) read() (h formHistory, repair bool, err error) {
	var got [2]formHistory
	var gen [2]uint64
	var bad [2]error
	var found [2]bool
	for i, p := range f.paths {
		b, err := readSmallFile(p, false)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			if uerr := untrustedForms(p, err, f.paths[1-i]); uerr != nil {
				return nil, false, uerr
			}
			bad[i] = err
		default:
			got[i], gen[i], bad[i] = decodeFormsGen(b)
		}
		found[i] = true
		if i == 0 && bad[i] == nil {
			f.seen = statID(f.cpath)
		}
	}
	good0, good1 := found[0] && bad[0] == nil, found[1] && bad[1] == nil
	switch {
	case good0 && good1:
		h = mergeForms(got[0], gen[0], got[1], gen[1])
		f.gen = max(gen[0], gen[1])
		same := string(encodeForms(h, 0))
		return h, gen[0] != gen[1] || same != string(encodeForms(got[0], 0)) || same != string(encodeForms(got[1], 0)), nil
	case good0:
		f.gen = gen[0]
		return got[0], true, nil
	case good1:
		f.gen = gen[1]
		return got[1], true, nil
	case !found[0] && !found[1]:
		return nil, false, nil
	}
	i := 0
	if !found[0] {
		i = 1
	}
	other := fmt.Sprintf("and its copy %s cannot be used either", f.paths[1-i])
	if !found[1-i] {
		other = fmt.Sprintf("and the other copy, %s, is missing", f.paths[1-i])
	} else if i == 0 {
		other = fmt.Sprintf("and its copy %s cannot be used either (%v)", f.paths[1], bad[1])
	}
	return nil, false, &FileError{Op: "read", Path: f.paths[i], Err: fmt.Errorf(
		"%w: %w, %s; they record the striped forms this counter issued under, and removing them would forget it: "+
			"restore one from a backup, or, before removing both, raise the counter (snapctl init) past every striped id it handed out under another stride or node number than the one it will use",
		ErrCorruptForms, bad[i], other)}
}

// untrustedForms returns, for the error err of reading one copy of the
// history at path, the refusal of something there that is not a regular
// file of the counter's user (another user's file, a directory, a FIFO,
// a link), naming what it is and its owner; nil for any other error.
// Such a thing is not damage a backup repairs: another user or program
// put it there, and it is never read as the history nor replaced.
func untrustedForms(path string, err error, other string) error {
	if !errors.Is(err, statefile.ErrWrongOwner) && !errors.Is(err, statefile.ErrLinked) &&
		!errors.Is(err, statefile.ErrNotRegular) && !errors.Is(err, statefile.ErrSymlink) &&
		!errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.EISDIR) {
		return nil
	}
	what := "something"
	var st unix.Stat_t
	if unix.Lstat(path, &st) == nil {
		what = fmt.Sprintf("%s owned by %s", statefile.Kind(st.Mode), statefile.UserName(st.Uid))
	}
	return &FileError{Op: "read", Path: path, Err: fmt.Errorf(
		"%w; the form history's copy there is %s, where only a regular file of %s (the user running this) is read: another user or program put it there; it is neither read as the history nor replaced, and nothing was issued: "+
			"find out who made it and why, then remove it (the other copy, %s, restores it if it is there)",
		classifyOpenError(err), what, statefile.UserName(uint32(unix.Geteuid())), other)}
}

// mergeForms returns the history two valid copies record together: a
// history only grows, so a form either records is kept, whichever copy
// is older (a copy restored from a backup forgets nothing the other
// records). The form in use is the one of the copy with the higher
// generation (the primary's if equal); a striped form the other copy
// records as in use is kept as left at the counter's value now (unknown:
// the most it can have issued), and a form both record as left keeps the
// higher of their values.
func mergeForms(a formHistory, genA uint64, b formHistory, genB uint64) formHistory {
	if genB > genA {
		a, b = b, a
	}
	h := append(formHistory(nil), a...)
	for _, e := range b {
		i := h.find(e)
		switch {
		case i < 0 && e.current:
			e.current, e.unknown = false, true
			h = append(h, e)
		case i < 0:
			h = append(h, e)
		case e.registry != "":
			h[i].stride = max(h[i].stride, e.stride)
		case e.form != FormatStriped || h[i].current:
		case e.current:
			h[i].unknown = true
		default:
			h[i].upto = max(h[i].upto, e.upto)
			h[i].unknown = h[i].unknown || e.unknown
		}
	}
	return h
}

// find returns the index of the entry for e's form (or registry record)
// in h, -1 if none.
func (h formHistory) find(e formEntry) int {
	for i, x := range h {
		switch {
		case e.registry != "":
			if x.registry == e.registry && x.node == e.node {
				return i
			}
		case x.registry == "" && x.form == e.form && x.node == e.node && (e.form != FormatStriped || x.stride == e.stride):
			return i
		}
	}
	return -1
}

// resolve gives every form left at an unknown value the counter's value
// now, cur: the most it can have issued under it.
func (h formHistory) resolve(cur uint64) {
	for i := range h {
		if h[i].unknown {
			h[i].upto, h[i].unknown = max(h[i].upto, cur), false
		}
	}
}

// fromNumberFile adds to h what the counter's number file records (the
// registry's node number and stride for a name, and the striped form of
// that stride and number, if a striped Generator used it) and h lacks: a
// history restored from a backup older than that form forgets it, and
// the form is then taken as left at the counter's value now. It reports
// whether h changed.
func (f *formsFiles) fromNumberFile(h *formHistory) (bool, error) {
	name, n, s, ok, err := ReadNodeNumber(f.counterPath)
	if err != nil || !ok {
		return false, err
	}
	changed := false
	reg := formEntry{registry: name, node: n, stride: s}
	switch i := h.find(reg); {
	case i < 0:
		*h, changed = append(*h, reg), true
	case s != 0 && (*h)[i].stride == 0:
		(*h)[i].stride, changed = s, true
	}
	if st := (formEntry{form: FormatStriped, stride: s, node: n}); s != 0 && checkNodeNumber(n, s) == nil && h.find(st) < 0 {
		st.unknown = true
		*h, changed = append(*h, st), true
	}
	return changed, nil
}

// seed returns the history a counter without one starts from: the
// striped form its number file records (a registry's node number and
// stride), if any, as the form in use, and the registry's record.
func (f *formsFiles) seed() (formHistory, error) {
	name, n, s, ok, err := ReadNodeNumber(f.counterPath)
	if err != nil || !ok {
		return nil, err
	}
	h := formHistory{{registry: name, node: n, stride: s}}
	if s != 0 && checkNodeNumber(n, s) == nil {
		h = append(h, formEntry{form: FormatStriped, stride: s, node: n, current: true})
	}
	return h, nil
}

// registryNumbers returns the registry records of the history (see
// useRecordedNumber), nil if there is none.
func (h formHistory) registryNumbers() []numberRecord {
	var recs []numberRecord
	for _, e := range h {
		if e.registry != "" {
			recs = append(recs, numberRecord{name: e.registry, number: e.node, stride: e.stride})
		}
	}
	return recs
}

// write writes both copies, each durably, the primary first, with a
// generation above both copies read.
func (f *formsFiles) write(h formHistory) error {
	b := encodeForms(h, f.gen+1)
	for i, p := range f.paths {
		if err := statefile.ReplaceAtomically(f.fs, p, b, f.mode); err != nil {
			return &FileError{Op: "write", Path: p, Err: err}
		}
		if i == 0 {
			f.seen = statID(f.cpath)
		}
	}
	f.gen++
	return nil
}

// changed reports whether the primary copy is not the one last read or
// written (a rename replaced it, or it is gone).
func (f *formsFiles) changed() bool {
	if f.cpath == nil {
		return true
	}
	id := statID(f.cpath)
	return !id.ok || id != f.seen
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
