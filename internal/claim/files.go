package claim

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/gofrs/flock"
	"github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/internal/counterfile"
	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/internal/statefile"
)

// The files a Generator with a registry keeps beside the counter file
// <counter>. The counter file itself stays exactly as Snap! has it.
//
//	<counter>.owner     the owner token (32 hex digits and a newline),
//	                    created once; an exclusive flock on it is the host's
//	                    gate for start-up and shut-down
//	<counter>.mark      the reserved-up-to mark this host may issue to and
//	                    the counter's floor (Mark), 16 bytes,
//	                    read and written under the counter's lock
//	<counter>.session   the host's claim: the name, the owner token and
//	                    the session (see Holder.Session), written by the
//	                    first process of the host (replacing the file, by
//	                    rename), read by the others, under the gate; see
//	                    below
//	<counter>.presence  empty; every process using the registry holds a
//	                    shared flock on it, so the one that can take it
//	                    exclusively is the first (at start-up) or the last
//	                    (at close)
//	<counter>.heartbeat the host's one heartbeat: the last refresh of
//	                    last-seen, and an exclusive flock held by the
//	                    process that refreshes it (heartbeatfile.go)
//
// The session file's format is Session's. A process joining its
// host's claim (the engine's) refuses to start under another name
// than the file's (ErrNameMismatch), and refuses a file in another format,
// the one-line format of earlier versions included, or for another owner
// token (errs.ErrCorruptSession). The first process of a host never reads it.
//
// Every file here, like the counter, is created atomically and made
// durable (statefile.CreateAtomically) before it is relied on; owner and
// mark are validated before anything is created or written, here or in
// the registry (the engine's checkHostFiles). None of them is removed,
// but by the host's first Open, refused by the registry before anything
// was claimed, which removes those it made (RemoveMade): other processes
// of the host may have opened them before they take the gate, and
// LockGate refuses a gate taken on files removed meanwhile.
const (
	OwnerSuffix     = ".owner"
	HeartbeatSuffix = ".heartbeat"
	MarkSuffix      = ".mark"
	PresenceSuffix  = ".presence"
	SessionSuffix   = ".session"
)

// FileOptions say how the claim's files beside the counter are opened
// and made.
type FileOptions struct {
	Follow bool         // follow a symbolic link at the files' paths
	Mode   fs.FileMode  // the mode of the files made
	FS     statefile.FS // the file-system seam; also the files' I/O if it does file I/O (counterfile.IO)
	Clock  clock.Clock  // nil: the real clock
}

// Files is a Generator's handle on the files beside the counter.
type Files struct {
	owner       string
	gate        *flock.Flock
	presence    *flock.Flock
	mark        *os.File
	hb          *os.File // the heartbeat file (heartbeatfile.go); nil until it exists
	counterPath string
	opts        FileOptions // for creating the heartbeat file later
	markPath    string
	sessionPath string
	mode        fs.FileMode
	fs          statefile.FS
	made        []string // the files OpenFiles made (see RemoveMade)
}

func OpenFiles(counterPath string, o FileOptions) (*Files, error) {
	owner, ownerMade, err := loadOwner(counterPath, true, o)
	if err != nil {
		return nil, err
	}
	var made []string // the files this call made, for RemoveMade
	if ownerMade {
		made = append(made, counterPath+OwnerSuffix)
	}
	// The mark and presence files exist, durably, before anything relies
	// on them: created empty like the counter (an empty mark reads as
	// zero), and only opened afterwards.
	markPath, presencePath := counterPath+MarkSuffix, counterPath+PresenceSuffix
	for _, p := range []string{markPath, presencePath} {
		created, err := counterfile.CreateBesideNew(o.FS, p, nil, o.Mode)
		if err != nil {
			return nil, errs.Beside(counterPath, err)
		}
		if created {
			made = append(made, p)
		}
	}
	if err := counterfile.CheckBeside(presencePath, o.Follow); err != nil {
		return nil, errs.Beside(counterPath, err)
	}
	mark, err := os.OpenFile(markPath, counterfile.OpenFlags(o.Follow), 0)
	if err != nil {
		return nil, &errs.FileError{Op: "open", Path: markPath, Err: errs.OpenError(err), Counter: counterPath}
	}
	st, err := statefile.CheckRegular(int(mark.Fd()))
	if err == nil {
		err = statefile.CheckOwner(markPath, st)
	}
	if err != nil {
		mark.Close()
		return nil, &errs.FileError{Op: "open", Path: markPath, Err: errs.OpenError(err), Counter: counterPath}
	}
	hb, err := openHeartbeat(counterPath, o, false)
	if err != nil {
		mark.Close()
		return nil, err
	}
	return &Files{
		owner:       owner,
		counterPath: counterPath,
		opts:        o,
		hb:          hb,
		gate:        flock.New(counterPath+OwnerSuffix, flock.SetFlag(counterfile.OpenFlags(o.Follow))),
		presence:    flock.New(presencePath, flock.SetFlag(counterfile.OpenFlags(o.Follow))),
		mark:        mark,
		markPath:    markPath,
		sessionPath: counterPath + SessionSuffix,
		mode:        o.Mode,
		fs:          o.FS,
		made:        made,
	}, nil
}

// clock is the Generator's clock (the real one for a Files opened
// without options).
func (h *Files) clock() clock.Clock {
	return clock.OrReal(h.opts.Clock)
}

// LockGate takes the host's start-up/shut-down gate. A gate taken on
// files removed meanwhile is let go and refused (errs.ErrReplaced): the
// host's first Open, refused by the registry, removes the files it made
// (RemoveMade) under the gate, so that another process waiting for the
// gate holds it, and the mark, on files no longer there.
func (h *Files) LockGate(ctx context.Context) error {
	err := errs.Beside(h.counterPath, LockGateFile(ctx, h.gate))
	if fe := (*errs.FileError)(nil); errors.As(err, &fe) {
		fe.Err = fmt.Errorf("waiting for another process of this host to finish starting or closing: %w", fe.Err)
	}
	if err == nil {
		if err = h.checkLinked(); err != nil {
			_ = h.gate.Unlock()
		}
	}
	return err
}

// checkLinked refuses a gate or mark file this process has open that no
// longer has a name.
func (h *Files) checkLinked() error {
	for _, f := range []struct {
		path string
		stat func() (fs.FileInfo, error)
	}{{h.gate.Path(), h.gate.Stat}, {h.markPath, h.mark.Stat}} {
		st, err := f.stat()
		if err != nil {
			return &errs.FileError{Op: "open", Path: f.path, Err: err, Counter: h.counterPath}
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink == 0 {
			return &errs.FileError{Op: "open", Path: f.path, Counter: h.counterPath, Err: fmt.Errorf(
				"%w: the file was removed as this program opened it (the host's first Open, refused by the registry, removes the files it made): open again", errs.ErrReplaced)}
		}
	}
	return nil
}

// RemoveMade removes the files OpenFiles made, the mark and the gate
// among them, and syncs their directory: for the host's first Open,
// refused by the registry before anything was claimed (the registry
// holds no row of an owner token it made). The caller holds the gate and
// the presence lock exclusively: no process of the host uses the files
// (programs without a registry never do), and one that opened them and
// waits for the gate is refused when it gets it (LockGate). A file that
// cannot be removed is logged and left.
func (h *Files) RemoveMade(log interface{ Warn(string, ...any) }) {
	if len(h.made) == 0 {
		return
	}
	for _, p := range h.made {
		if err := h.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Warn("snapid: could not remove a file this Open made beside the counter", "path", p, "err", err)
		}
	}
	dir, _ := statefile.SplitPath(h.counterPath)
	if err := h.fs.SyncDir(dir); err != nil {
		log.Warn("snapid: could not sync the counter's directory after removing the files this Open made", "dir", dir, "err", err)
	}
	h.made = nil
}

// io is how the mark and heartbeat files are read and written: through
// the file-system seam (WithFS) when it also does file I/O (pread,
// pwrite, fsync: the simulator's disk, so that its faults and its
// power-cut model reach them), else with os.File's own methods. Not the
// counter's I/O seam: a fault injected there is meant for the counter
// and lease files.
func (h *Files) io() counterfile.IO {
	if x, ok := h.opts.FS.(counterfile.IO); ok {
		return x
	}
	return fileMethods{}
}

// fileMethods is the real I/O of the mark and heartbeat files: os.File's
// own methods, which a concurrent Close cannot race (Stats reads the
// heartbeat of a Generator that may be closing).
type fileMethods struct{}

func (fileMethods) ReadAt(f *os.File, b []byte, off int64) (int, error)  { return f.ReadAt(b, off) }
func (fileMethods) WriteAt(f *os.File, b []byte, off int64) (int, error) { return f.WriteAt(b, off) }
func (fileMethods) Sync(f *os.File) error                                { return f.Sync() }

// ReadMark reads the mark file; the caller holds the counter lock.
func (h *Files) ReadMark() (Mark, error) {
	var b [MarkSize + 1]byte
	n, err := h.io().ReadAt(h.mark, b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Mark{}, &errs.FileError{Op: "read", Path: h.markPath, Err: err, Counter: h.counterPath}
	}
	size := int64(n)
	if n > MarkSize {
		size = fileSize(h.mark, n)
	}
	m, err := DecodeMark(b[:n], size)
	if err != nil {
		return Mark{}, &errs.FileError{Op: "read", Path: h.markPath, Err: err, Counter: h.counterPath}
	}
	return m, nil
}

// WriteMark writes the mark file in place; the caller holds the counter
// lock. It is not synced: a mark lost in a crash reads lower, which only
// narrows what may be issued until the registry's mark is adopted again.
func (h *Files) WriteMark(m Mark) error {
	var b [MarkSize]byte
	binary.LittleEndian.PutUint64(b[:], m.Mark)
	binary.LittleEndian.PutUint64(b[8:], m.Floor)
	if _, err := h.io().WriteAt(h.mark, b[:], 0); err != nil {
		return &errs.FileError{Op: "write", Path: h.markPath, Err: err, Counter: h.counterPath}
	}
	return nil
}

// WriteSession records the host's claim, replacing the previous one
// (nobody locks this file): a synced temporary file renamed into place,
// then the directory synced. The caller holds the gate. The temporary file
// is created exclusively, so a link planted there is not followed.
func (h *Files) WriteSession(name, session string) error {
	b, err := EncodeSession(Session{Name: name, Owner: h.owner, Session: session})
	if err != nil {
		return err
	}
	if err := statefile.ReplaceAtomically(h.fs, h.sessionPath, b, h.mode); err != nil {
		return &errs.FileError{Op: "write", Path: h.sessionPath, Err: err, Counter: h.counterPath}
	}
	return nil
}

// ReadSession returns the host's claim; the caller holds the gate.
func (h *Files) ReadSession() (Session, error) {
	b, err := readSmallFile(h.sessionPath, false)
	if err != nil {
		return Session{}, &errs.FileError{Op: "read", Path: h.sessionPath, Err: errs.OpenError(err), Counter: h.counterPath}
	}
	s, err := DecodeSession(b)
	if err != nil {
		return Session{}, &errs.FileError{Op: "read", Path: h.sessionPath, Err: err, Counter: h.counterPath}
	}
	return s, nil
}

func (h *Files) Close() error {
	h.presence.Close()
	h.gate.Close()
	if h.hb != nil {
		h.hb.Close() // and with it the heartbeat role, if this process held it
	}
	return h.mark.Close()
}

// LoadOwner returns the owner token stored beside the counter, creating it
// (atomically, like the counter) if create is set and it is missing.
func LoadOwner(counterPath string, create bool, o FileOptions) (string, error) {
	tok, _, err := loadOwner(counterPath, create, o)
	return tok, err
}

// loadOwner is LoadOwner also reporting whether it made the file.
func loadOwner(counterPath string, create bool, o FileOptions) (tok string, made bool, err error) {
	path := counterPath + OwnerSuffix
	b, err := readSmallFile(path, o.Follow)
	if errors.Is(err, fs.ErrNotExist) && create {
		var raw [16]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return "", false, &errs.FileError{Op: "create", Path: path, Err: err, Counter: counterPath}
		}
		cerr := statefile.CreateAtomically(o.FS, path, []byte(hex.EncodeToString(raw[:])+"\n"), o.Mode)
		if cerr != nil && !errors.Is(cerr, fs.ErrExist) { // ErrExist: another process created it first
			return "", false, &errs.FileError{Op: "create", Path: path, Err: cerr, Counter: counterPath}
		}
		made = cerr == nil
		b, err = readSmallFile(path, o.Follow)
	}
	if err != nil {
		return "", made, &errs.FileError{Op: "read", Path: path, Err: errs.OpenError(err), Counter: counterPath}
	}
	tok, ok := strings.CutSuffix(string(b), "\n")
	if !ok || !ValidOwner(tok) {
		return "", made, &errs.FileError{Op: "read", Path: path, Counter: counterPath, Err: fmt.Errorf(
			"%w: it is %d bytes; an owner token file holds 32 lower-case hex digits and a newline", errs.ErrCorruptOwner, len(b))}
	}
	return tok, made, nil
}

// ReadMarkFile reads the mark file beside the counter without the lock;
// ok is false if there is none.
func ReadMarkFile(counterPath string, follow bool) (m Mark, ok bool, err error) {
	path := counterPath + MarkSuffix
	b, size, err := readSmallFileSize(path, follow)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Mark{}, false, nil
	case err != nil:
		return Mark{}, false, &errs.FileError{Op: "read", Path: path, Err: errs.OpenError(err), Counter: counterPath}
	}
	if m, err = DecodeMark(b, size); err != nil {
		return Mark{}, false, &errs.FileError{Op: "read", Path: path, Err: err, Counter: counterPath}
	}
	return m, true, nil
}

// LockGateFile takes the host's gate, waiting no longer than ctx allows (a
// ctx that is never done waits as long as it takes).
func LockGateFile(ctx context.Context, gate *flock.Flock) error {
	// A free gate is taken at once, whatever ctx says: a ctx already
	// ended is then no other process's hold.
	switch ok, err := gate.TryLock(); {
	case err != nil:
		return &errs.FileError{Op: "lock", Path: gate.Path(), Err: err}
	case ok:
		return nil
	}
	if ctx.Done() == nil {
		if err := gate.Lock(); err != nil {
			return &errs.FileError{Op: "lock", Path: gate.Path(), Err: err}
		}
		return nil
	}
	ok, err := gate.TryLockContext(ctx, 5*time.Millisecond)
	if err == nil && !ok {
		err = ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%s): %w", errs.ErrLocked, statefile.HolderOf(gate.Path()), err)
		}
		return &errs.FileError{Op: "lock", Path: gate.Path(), Err: err}
	}
	return nil
}

// readSmallFile reads up to statefile.SmallLimit bytes of path (see
// statefile.ReadSmall: opened without blocking, a regular file only); a
// longer file is cut there.
func readSmallFile(path string, follow bool) ([]byte, error) {
	b, _, err := statefile.ReadSmallOwned(path, follow)
	return b, err
}

// readSmallFileSize is readSmallFile that also returns the file's size.
func readSmallFileSize(path string, follow bool) ([]byte, int64, error) {
	return statefile.ReadSmallOwned(path, follow)
}

// fileSize returns f's size for a message, or n if it cannot be had.
func fileSize(f interface{ Stat() (os.FileInfo, error) }, n int) int64 {
	if st, err := f.Stat(); err == nil {
		return st.Size()
	}
	return int64(n)
}

// Owner returns the host's owner token (the file <counter>.owner).
func (h *Files) Owner() string { return h.owner }

// SessionPath returns the path of the session file.
func (h *Files) SessionPath() string { return h.sessionPath }

// Presence returns the flock on the presence file: every process of the
// host holds it shared, so the one that can take it exclusively is the
// first (at start-up) or the last (at close).
func (h *Files) Presence() *flock.Flock { return h.presence }

// Gate returns the flock of the host's start-up and shut-down gate (on
// the owner file), which LockGate takes.
func (h *Files) Gate() *flock.Flock { return h.gate }

// HeartbeatFile returns the heartbeat file this process has open, nil
// until it does.
func (h *Files) HeartbeatFile() *os.File { return h.hb }

// Options returns the options the files were opened with.
func (h *Files) Options() FileOptions { return h.opts }
