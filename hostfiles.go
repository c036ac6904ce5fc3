package snapid

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
	"time"

	"github.com/gofrs/flock"
)

// The files a Generator with a registry keeps beside the counter file
// <counter>. The counter file itself stays exactly as Snap! has it.
//
//	<counter>.owner     the owner token (32 hex digits and a newline),
//	                    created once; an exclusive flock on it is the host's
//	                    gate for start-up and shut-down
//	<counter>.mark      the reserved-up-to mark this host may issue to and
//	                    the counter's floor (see markState), 16 bytes,
//	                    read and written under the counter's lock
//	<counter>.session   the session of the host's claim (see
//	                    Holder.Session), written by the first process,
//	                    read by the others, under the gate
//	<counter>.presence  empty; every process using the registry holds a
//	                    shared flock on it, so the one that can take it
//	                    exclusively is the first (at start-up) or the last
//	                    (at close)
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
		cerr := createFileAtomically(path, []byte(hex.EncodeToString(raw[:])+"\n"), o.fileMode)
		if cerr != nil && !errors.Is(cerr, fs.ErrExist) { // ErrExist: another process created it first
			return "", &FileError{Op: "create", Path: path, Err: cerr}
		}
		b, err = readSmallFile(path, o.followSymlinks)
	}
	if err != nil {
		return "", &FileError{Op: "read", Path: path, Err: classifyOpenError(err)}
	}
	tok := strings.TrimSuffix(string(b), "\n")
	if len(tok) != 32 || strings.Trim(tok, "0123456789abcdef") != "" {
		return "", &FileError{Op: "read", Path: path, Err: fmt.Errorf(
			"%w: an owner token file holds 32 lower-case hex digits and a newline", ErrCorrupt)}
	}
	return tok, nil
}

func readSmallFile(path string, follow bool) ([]byte, error) {
	f, err := os.OpenFile(path, openFlags(follow)&^os.O_RDWR|os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 4096))
}

// hostState is a Generator's handle on the files beside the counter.
type hostState struct {
	owner       string
	gate        *flock.Flock
	presence    *flock.Flock
	mark        *os.File
	markPath    string
	sessionPath string
	mode        fs.FileMode
}

func openHostState(counterPath string, o *options) (*hostState, error) {
	owner, err := loadOwner(counterPath, true, o)
	if err != nil {
		return nil, err
	}
	markPath := counterPath + markSuffix
	mark, err := os.OpenFile(markPath, openFlags(o.followSymlinks)|os.O_CREATE, o.fileMode)
	if err != nil {
		return nil, &FileError{Op: "open", Path: markPath, Err: classifyOpenError(err)}
	}
	lockFlags := openFlags(o.followSymlinks) | os.O_CREATE
	return &hostState{
		owner:       owner,
		gate:        flock.New(counterPath+ownerSuffix, flock.SetFlag(openFlags(o.followSymlinks))),
		presence:    flock.New(counterPath+presenceSuffix, flock.SetFlag(lockFlags), flock.SetPermissions(o.fileMode)),
		mark:        mark,
		markPath:    markPath,
		sessionPath: counterPath + sessionSuffix,
		mode:        o.fileMode,
	}, nil
}

// lockGate takes the host's start-up/shut-down gate.
func (h *hostState) lockGate(ctx context.Context) error {
	ok, err := h.gate.TryLockContext(ctx, 5*time.Millisecond)
	if err == nil && !ok {
		err = ctx.Err()
	}
	if err != nil {
		return &FileError{Op: "lock", Path: h.gate.Path(), Err: fmt.Errorf(
			"waiting for another process of this host to finish starting or closing: %w", err)}
	}
	return nil
}

// markState is the content of the mark file: 16 bytes, the mark (the
// highest number the host may issue) and the floor (the counter's value
// when the mark was last moved), each unsigned 64-bit little-endian. A
// counter found below the floor was rolled back (a restore, a copy) while
// the host was using it.
type markState struct{ mark, floor uint64 }

const markSize = 16

// decodeMark decodes a mark file; an empty one reads as zero (nothing may
// be issued).
func decodeMark(b []byte) (markState, error) {
	switch len(b) {
	case 0:
		return markState{}, nil
	case markSize:
		return markState{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])}, nil
	}
	return markState{}, fmt.Errorf("%w: a mark file is %d bytes, not %d", ErrCorrupt, markSize, len(b))
}

// readMark reads the mark file; the caller holds the counter lock.
func (h *hostState) readMark() (markState, error) {
	var b [markSize + 1]byte
	n, err := h.mark.ReadAt(b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return markState{}, &FileError{Op: "read", Path: h.markPath, Err: err}
	}
	m, err := decodeMark(b[:n])
	if err != nil {
		return markState{}, &FileError{Op: "read", Path: h.markPath, Err: err}
	}
	return m, nil
}

// writeMark writes the mark file in place; the caller holds the counter
// lock. It is not synced: a mark lost in a crash reads lower, which only
// narrows what may be issued until the registry's mark is adopted again.
func (h *hostState) writeMark(m markState) error {
	var b [markSize]byte
	binary.LittleEndian.PutUint64(b[:], m.mark)
	binary.LittleEndian.PutUint64(b[8:], m.floor)
	if _, err := h.mark.WriteAt(b[:], 0); err != nil {
		return &FileError{Op: "write", Path: h.markPath, Err: err}
	}
	return nil
}

// writeSession records the session of the host's claim, replacing the
// previous one (nobody locks this file); the caller holds the gate. The
// temporary file is created exclusively, so a link planted there is not
// followed.
func (h *hostState) writeSession(session string) error {
	dir, base := splitPath(h.sessionPath)
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return &FileError{Op: "write", Path: h.sessionPath, Err: err}
	}
	defer os.Remove(tmp.Name())
	if err := writeTemp(tmp, []byte(session+"\n"), h.mode); err != nil {
		return &FileError{Op: "write", Path: h.sessionPath, Err: err}
	}
	if err := os.Rename(tmp.Name(), h.sessionPath); err != nil {
		return &FileError{Op: "write", Path: h.sessionPath, Err: err}
	}
	return nil
}

// readSession returns the session of the host's claim; the caller holds
// the gate.
func (h *hostState) readSession() (string, error) {
	b, err := readSmallFile(h.sessionPath, false)
	if err != nil {
		return "", &FileError{Op: "read", Path: h.sessionPath, Err: err}
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

func (h *hostState) close() error {
	h.presence.Close()
	h.gate.Close()
	return h.mark.Close()
}

// createFileAtomically creates path with content b: a synced temporary
// file linked into place, then the directory synced. It fails with
// fs.ErrExist if path exists; an existing file is never replaced.
func createFileAtomically(path string, b []byte, mode fs.FileMode) error {
	dir, base := splitPath(path)
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName)
	if err := writeTemp(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Link(tmpName, path); err != nil {
		return err
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

// OwnerToken returns the owner token stored beside the counter file at
// counterPath (in counterPath+".owner"). A counter that never used a
// registry has none: the error then wraps fs.ErrNotExist.
func OwnerToken(counterPath string, opts ...Option) (string, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return "", err
	}
	return loadOwner(counterPath, false, &o)
}

// missingFiles returns which of the counter and the files beside it do not
// exist yet, so that a failed claim can leave the disk as it found it.
func missingFiles(counterPath string) []string {
	var out []string
	for _, suffix := range []string{"", ownerSuffix, markSuffix, presenceSuffix, sessionSuffix} {
		if _, err := os.Lstat(counterPath + suffix); errors.Is(err, fs.ErrNotExist) {
			out = append(out, counterPath+suffix)
		}
	}
	return out
}

// ReadMark returns the reserved-up-to mark this host keeps beside the
// counter file at counterPath (the highest number the registry lets it
// issue), and false if the counter has never been used with a registry.
func ReadMark(counterPath string) (mark uint64, ok bool, err error) {
	m, ok, err := readMarkFile(counterPath)
	return m.mark, ok, err
}

// readMarkFile reads the mark file beside the counter without the lock;
// ok is false if there is none.
func readMarkFile(counterPath string) (m markState, ok bool, err error) {
	path := counterPath + markSuffix
	b, err := readSmallFile(path, false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return markState{}, false, nil
	case err != nil:
		return markState{}, false, &FileError{Op: "read", Path: path, Err: classifyOpenError(err)}
	}
	if m, err = decodeMark(b); err != nil {
		return markState{}, false, &FileError{Op: "read", Path: path, Err: err}
	}
	return m, true, nil
}
