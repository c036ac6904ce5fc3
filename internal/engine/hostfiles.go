package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strings"

	"github.com/gofrs/flock"
	"github.com/snapid/snapid/internal/claim"
	"github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/internal/statefile"
)

// The files a Generator with a registry keeps beside the counter file
// <counter>. The counter file itself stays exactly as Snap! has it.
//
//	<counter>.owner     the owner token (32 hex digits and a newline),
//	                    created once; an exclusive flock on it is the host's
//	                    gate for start-up and shut-down
//	<counter>.mark      the reserved-up-to mark this host may issue to and
//	                    the counter's floor (claim.Mark), 16 bytes,
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
//	                    process that refreshes it (see heartbeat.go)
//
// The session file's format is package claim's (Session). A process
// joining its host's claim refuses to start under another name
// than the file's (ErrNameMismatch), and refuses a file in another format,
// the one-line format of earlier versions included, or for another owner
// token (errCorruptSession). The first process of a host never reads it.
//
// Every file here, like the counter, is created atomically and made
// durable (see createFileAtomically) before it is relied on; owner and
// mark are validated before anything is created or written, here or in
// the registry (see checkHostFiles). None of them is ever removed by this
// package: programs without a registry lock only the counter, and other
// processes of the host may have opened the others before they take the
// gate.
const (
	ownerSuffix    = ".owner"
	markSuffix     = ".mark"
	presenceSuffix = ".presence"
	sessionSuffix  = ".session"
)

// HostInfo identifies the machine in the registry.
type HostInfo struct {
	Hostname  string
	Address   string
	MachineID string
}

// LocalHostInfo returns this machine's host name, a non-loopback address
// (empty if there is none) and machine id (from /etc/machine-id or
// /var/lib/dbus/machine-id, else "host:" followed by the host name).
func LocalHostInfo() HostInfo {
	var h HostInfo
	h.Hostname, _ = os.Hostname()
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
				h.Address = ipn.IP.String()
				break
			}
		}
	}
	for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			h.MachineID = strings.TrimSpace(string(b))
			break
		}
	}
	if h.MachineID == "" && h.Hostname != "" {
		// The registry's conditions compare machine ids: never leave it
		// empty while something tells machines apart.
		h.MachineID = "host:" + h.Hostname
	}
	return h
}

// loadOwner returns the owner token stored beside the counter, creating it
// (atomically, like the counter) if create is set and it is missing.
func loadOwner(counterPath string, create bool, o *options) (string, error) {
	path := counterPath + ownerSuffix
	b, err := readSmallFile(path, o.followSymlinks)
	if errors.Is(err, fs.ErrNotExist) && create {
		var raw [16]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return "", &FileError{Op: "create", Path: path, Err: err}
		}
		cerr := createFileAtomically(o.fs, path, []byte(hex.EncodeToString(raw[:])+"\n"), o.fileMode)
		if cerr != nil && !errors.Is(cerr, fs.ErrExist) { // ErrExist: another process created it first
			return "", &FileError{Op: "create", Path: path, Err: cerr}
		}
		b, err = readSmallFile(path, o.followSymlinks)
	}
	if err != nil {
		return "", &FileError{Op: "read", Path: path, Err: classifyOpenError(err)}
	}
	tok, ok := strings.CutSuffix(string(b), "\n")
	if !ok || !claim.ValidOwner(tok) {
		return "", &FileError{Op: "read", Path: path, Err: fmt.Errorf(
			"%w: it is %d bytes; an owner token file holds 32 lower-case hex digits and a newline", errCorruptOwner, len(b))}
	}
	return tok, nil
}

// checkHostFiles validates the files beside the counter that a Generator
// with a registry reads and that exist (owner and mark; the session is
// read only by processes joining their host's claim, see enter), before
// anything is created or written, on disk or in the registry. It reads
// without locks: a mark file only ever grows from empty to 16 bytes in
// one write.
func checkHostFiles(counterPath string, o *options) error {
	if _, err := loadOwner(counterPath, false, o); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	_, _, err := readMarkFile(counterPath, o.followSymlinks)
	return err
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

// hostState is a Generator's handle on the files beside the counter.
type hostState struct {
	owner       string
	gate        *flock.Flock
	presence    *flock.Flock
	mark        *os.File
	hb          *os.File // the heartbeat file (see heartbeat.go); nil until it exists
	counterPath string
	opts        *options // for creating the heartbeat file later
	markPath    string
	sessionPath string
	mode        fs.FileMode
	fs          fsOps
}

func openHostState(counterPath string, o *options) (*hostState, error) {
	owner, err := loadOwner(counterPath, true, o)
	if err != nil {
		return nil, err
	}
	// The mark and presence files exist, durably, before anything relies
	// on them: created empty like the counter (an empty mark reads as
	// zero), and only opened afterwards.
	markPath, presencePath := counterPath+markSuffix, counterPath+presenceSuffix
	for _, p := range []string{markPath, presencePath} {
		if err := createIfAbsent(p, nil, o); err != nil {
			return nil, err
		}
	}
	if err := checkBeside(presencePath, o); err != nil {
		return nil, err
	}
	mark, err := os.OpenFile(markPath, openFlags(o.followSymlinks), 0)
	if err != nil {
		return nil, &FileError{Op: "open", Path: markPath, Err: classifyOpenError(err)}
	}
	st, err := statefile.CheckRegular(int(mark.Fd()))
	if err == nil {
		err = statefile.CheckOwner(markPath, st)
	}
	if err != nil {
		mark.Close()
		return nil, &FileError{Op: "open", Path: markPath, Err: classifyOpenError(err)}
	}
	hb, err := openHeartbeat(counterPath, o, false)
	if err != nil {
		mark.Close()
		return nil, err
	}
	return &hostState{
		owner:       owner,
		counterPath: counterPath,
		opts:        o,
		hb:          hb,
		gate:        flock.New(counterPath+ownerSuffix, flock.SetFlag(openFlags(o.followSymlinks))),
		presence:    flock.New(presencePath, flock.SetFlag(openFlags(o.followSymlinks))),
		mark:        mark,
		markPath:    markPath,
		sessionPath: counterPath + sessionSuffix,
		mode:        o.fileMode,
		fs:          o.fs,
	}, nil
}

// clock is the Generator's clock (the real one for a hostState opened
// without options).
func (h *hostState) clock() clock.Clock {
	if h.opts == nil {
		return clock.Real{}
	}
	return clock.OrReal(h.opts.clock)
}

// lockGate takes the host's start-up/shut-down gate.
func (h *hostState) lockGate(ctx context.Context) error {
	err := lockGateFile(ctx, h.gate)
	if fe := (*FileError)(nil); errors.As(err, &fe) {
		fe.Err = fmt.Errorf("waiting for another process of this host to finish starting or closing: %w", fe.Err)
	}
	return err
}

// io is how the mark and heartbeat files are read and written: through
// the file-system seam (WithFS) when it also does file I/O (pread,
// pwrite, fsync: the simulator's disk, so that its faults and its
// power-cut model reach them), else with os.File's own methods. Not the
// counter's I/O seam: a fault injected there is meant for the counter
// and lease files.
func (h *hostState) io() fileIO {
	if h.opts != nil {
		if x, ok := h.opts.fs.(fileIO); ok {
			return x
		}
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

// readMark reads the mark file; the caller holds the counter lock.
func (h *hostState) readMark() (claim.Mark, error) {
	var b [claim.MarkSize + 1]byte
	n, err := h.io().ReadAt(h.mark, b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return claim.Mark{}, &FileError{Op: "read", Path: h.markPath, Err: err}
	}
	size := int64(n)
	if n > claim.MarkSize {
		size = fileSize(h.mark, n)
	}
	m, err := claim.DecodeMark(b[:n], size)
	if err != nil {
		return claim.Mark{}, &FileError{Op: "read", Path: h.markPath, Err: err}
	}
	return m, nil
}

// writeMark writes the mark file in place; the caller holds the counter
// lock. It is not synced: a mark lost in a crash reads lower, which only
// narrows what may be issued until the registry's mark is adopted again.
func (h *hostState) writeMark(m claim.Mark) error {
	var b [claim.MarkSize]byte
	binary.LittleEndian.PutUint64(b[:], m.Mark)
	binary.LittleEndian.PutUint64(b[8:], m.Floor)
	if _, err := h.io().WriteAt(h.mark, b[:], 0); err != nil {
		return &FileError{Op: "write", Path: h.markPath, Err: err}
	}
	return nil
}

// writeSession records the host's claim, replacing the previous one
// (nobody locks this file): a synced temporary file renamed into place,
// then the directory synced. The caller holds the gate. The temporary file
// is created exclusively, so a link planted there is not followed.
func (h *hostState) writeSession(name, session string) error {
	b, err := claim.EncodeSession(claim.Session{Name: name, Owner: h.owner, Session: session})
	if err != nil {
		return err
	}
	if err := statefile.ReplaceAtomically(h.fs, h.sessionPath, b, h.mode); err != nil {
		return &FileError{Op: "write", Path: h.sessionPath, Err: err}
	}
	return nil
}

// readSession returns the host's claim; the caller holds the gate.
func (h *hostState) readSession() (claim.Session, error) {
	b, err := readSmallFile(h.sessionPath, false)
	if err != nil {
		return claim.Session{}, &FileError{Op: "read", Path: h.sessionPath, Err: classifyOpenError(err)}
	}
	s, err := claim.DecodeSession(b)
	if err != nil {
		return claim.Session{}, &FileError{Op: "read", Path: h.sessionPath, Err: err}
	}
	return s, nil
}

func (h *hostState) close() error {
	h.presence.Close()
	h.gate.Close()
	if h.hb != nil {
		h.hb.Close() // and with it the heartbeat role, if this process held it
	}
	return h.mark.Close()
}

// fsOps is the file-system seam of the state-file layer (statefile.FS):
// tests replace it (withFS) to record the order of operations and inject
// failures.
type fsOps = statefile.FS

// osFS is the real file system.
type osFS = statefile.OS

// createFileAtomically creates path with content b, never replacing a
// file (see statefile.CreateAtomically).
func createFileAtomically(fsys fsOps, path string, b []byte, mode fs.FileMode) error {
	return statefile.CreateAtomically(fsys, path, b, mode)
}

// createIfAbsent creates the file at path holding b (see
// createFileAtomically) if nothing is there. A file another process
// created first is kept; whatever is at path, usable or not, is left for
// the open that follows to judge. A file that is there already may have
// been linked by a process killed before its directory sync, or whose
// directory sync failed: the directory is synced again, so that its name
// is durable before anything is issued from it.
func createIfAbsent(path string, b []byte, o *options) error {
	if _, err := os.Lstat(path); err == nil {
		dir, _ := splitPath(path)
		if err := o.fs.SyncDir(dir); err != nil {
			return &FileError{Op: "open", Path: path, Err: fmt.Errorf("sync directory: %w", err)}
		}
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	err := createFileAtomically(o.fs, path, b, o.fileMode)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return &FileError{Op: "create", Path: path, Err: err}
	}
	return nil
}

// OwnerToken returns the owner token stored beside the counter file at
// counterPath (in counterPath+".owner"). A counter that never used a
// registry has none: the error then wraps fs.ErrNotExist.
func OwnerToken(counterPath string, opts ...Option) (string, error) {
	o, err := buildOptions(opts)
	if err == nil {
		err = o.refuseOwner("OwnerToken")
	}
	if err != nil {
		return "", err
	}
	return loadOwner(counterPath, false, &o)
}

// ReadMark returns the reserved-up-to mark this host keeps beside the
// counter file at counterPath (the highest number the registry lets it
// issue), and false if the counter has never been used with a registry.
func ReadMark(counterPath string) (mark uint64, ok bool, err error) {
	m, ok, err := readMarkFile(counterPath, false)
	return m.Mark, ok, err
}

// readMarkFile reads the mark file beside the counter without the lock;
// ok is false if there is none.
func readMarkFile(counterPath string, follow bool) (m claim.Mark, ok bool, err error) {
	path := counterPath + markSuffix
	b, size, err := readSmallFileSize(path, follow)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return claim.Mark{}, false, nil
	case err != nil:
		return claim.Mark{}, false, &FileError{Op: "read", Path: path, Err: classifyOpenError(err)}
	}
	if m, err = claim.DecodeMark(b, size); err != nil {
		return claim.Mark{}, false, &FileError{Op: "read", Path: path, Err: err}
	}
	return m, true, nil
}

// checkBeside checks a file beside the counter that is only locked, never
// read (the presence file, a sequence's refill lock): a regular file
// trusted as the counter is (statefile.CheckOwner), checked on a
// descriptor opened without following a link and without blocking. It is
// opened again by name to be locked; no other user can replace it in
// between, since the directory is checked (statefile.CheckDirOwner) and,
// if sticky, lets only the file's owner rename it.
func checkBeside(path string, o *options) error {
	f, err := os.OpenFile(path, openFlags(o.followSymlinks)&^os.O_RDWR|os.O_RDONLY, 0)
	if err != nil {
		return &FileError{Op: "open", Path: path, Err: classifyOpenError(err)}
	}
	defer f.Close()
	st, err := statefile.CheckRegular(int(f.Fd()))
	if err == nil {
		err = statefile.CheckOwner(path, st)
	}
	if err != nil {
		return &FileError{Op: "open", Path: path, Err: classifyOpenError(err)}
	}
	return nil
}
