package snapid

import (
	"errors"
	"fmt"
	"io/fs"
	"unsafe"

	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// The form history's two copies beside the counter: read and merged,
// checked against another user's planting, seeded from the number file,
// and written.

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
