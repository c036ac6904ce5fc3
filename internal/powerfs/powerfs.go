// Package powerfs is a FUSE file system for tests that forgets what was
// not synced when the power is cut. It is a loopback over a backing
// directory: every operation goes through to the backing directory at
// once (as writes go to the page cache), while powerfs records, beside
// it, what a disk would hold after a power loss:
//
//   - for every file, its content (and mode) as of its last fsync or
//     fdatasync, or of its last write through a descriptor opened with
//     O_SYNC or O_DSYNC; a file never synced holds nothing (empty);
//   - for every directory, its entries (names created, linked, renamed or
//     removed) as of its last fsync of that directory; an entry is durable
//     only after its directory is synced, whatever was synced before.
//
// PowerCut freezes that record (later syncs fail with EIO and make
// nothing durable), lets the caller kill every process using the mount,
// unmounts, rebuilds the backing directory from the record and mounts it
// again at the same place. What the rebuilt directory holds is what a
// machine finds after losing power with a disk whose volatile write cache
// is flushed by fsync, and with the page cache lost:
//
//   - a file's content is its last synced content, or, with KeepSome, for
//     each file independently, its content at the cut (the kernel may have
//     written a dirty file back before the power went);
//   - a directory holds the entries of its last fsync, or, with KeepSome,
//     for each directory independently, its entries at the cut (a journal
//     commits a directory's metadata changes together, in order);
//   - a file created and synced whose directory entry was never synced is
//     gone; an entry synced to a file never synced is an empty file (the
//     zero-length files of ext4 without auto_da_alloc's heuristics);
//   - a name removed or renamed without a directory sync comes back,
//     pointing to the file it named, with that file's synced content.
//
// Not modelled: torn writes at a cut. A disk writes a sector (512 bytes or
// more) atomically, and the files this package is made for (an 8-byte
// counter, a 16-byte mark, small files written before they get a name)
// are each written at offset 0 in one write, inside one sector: their
// content after a power loss is all old or all new, and so it is here
// (whole files, never parts). Larger files would be torn at sector or page
// boundaries by a real disk, and are not here. Also not modelled: the
// file systems that persist a size without the data (NULL bytes on XFS),
// the loss of a write after a failed fsync that a later fsync reports as
// done ("fsyncgate": here a later sync makes the current content durable),
// metadata other than mode (times, owners, extended attributes), symbolic
// links, special files, O_TMPFILE and copy_file_range (refused with
// ENOTSUP), and flock state, which lives in the kernel (flock works on the
// mount, between the processes using it, and is gone with them at a cut).
//
// Faults can be injected (Inject): EIO or another error from fsync and
// fdatasync, ENOSPC or another error from a write, and a short write that
// writes only the first bytes and reports how many.
//
// Mounting needs root (or CAP_SYS_ADMIN) and /dev/fuse: the mount(2)
// system call is made directly, so neither fusermount nor libfuse is
// needed.
package powerfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// object is one file or directory of the backing directory, with what a
// power cut leaves of it. Durable directory entries point to objects, not
// to inode numbers: a removed file's inode number can be taken by a new
// file while the old one's name is still durable.
type object struct {
	dir  bool
	mode uint32 // permission bits at creation, or at the last fsync

	synced  bool   // a file: content holds its last synced content
	content []byte // a file's last synced content

	entries map[string]*object // a directory's entries as of its last fsync
}

// Op names the operations faults can be injected into.
type Op string

const (
	OpSync    Op = "sync"    // fsync and fdatasync of a file
	OpWrite   Op = "write"   // a write to a file
	OpSyncDir Op = "syncdir" // fsync of a directory (its entries are then not durable)
)

// Fault makes an operation fail on files whose base name matches Name, a
// pattern of path.Match ("" for every file).
type Fault struct {
	Op   Op
	Name string
	// Err is the error returned (for example syscall.EIO, syscall.ENOSPC).
	// With Short > 0 (writes only) the write instead writes the first
	// Short bytes and reports that it wrote Short bytes.
	Err   syscall.Errno
	Short int
	// Times is how many operations fail (0: every one, until Clear).
	Times int
}

// CutMode says what a power cut keeps of what was not synced.
type CutMode int

const (
	// ForgetAll loses everything not synced.
	ForgetAll CutMode = iota
	// KeepSome keeps, for each file and each directory independently and
	// with probability one half, its state at the cut instead of its
	// synced state.
	KeepSome
)

// FS is a mounted powerfs. Its methods are safe for concurrent use, but
// PowerCut and Unmount must not run concurrently with each other.
type FS struct {
	mnt    string
	parent string // holds the backing directories
	gen    int    // backing directory generation
	server *fuse.Server

	// gate: mutating operations hold it shared; a cut takes it
	// exclusively to set dead, so that nothing becomes durable after the
	// cut and every operation under way when it came has finished.
	gate sync.RWMutex
	dead bool

	mu     sync.Mutex
	byIno  map[uint64]*object // backing inode number -> object
	root   *object
	faults []*Fault
	cuts   int
}

// Mount mounts a powerfs at mnt (an empty directory) over a new backing
// directory under parent (which must not be inside mnt).
func Mount(mnt, parent string) (*FS, error) {
	f := &FS{mnt: mnt, parent: parent}
	if err := os.MkdirAll(f.backing(), 0o755); err != nil {
		return nil, err
	}
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

// Dir returns the mount point.
func (f *FS) Dir() string { return f.mnt }

// Cuts returns how many power cuts have been made.
func (f *FS) Cuts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cuts
}

func (f *FS) backing() string {
	return filepath.Join(f.parent, fmt.Sprintf("backing-%d", f.gen))
}

// mount scans the backing directory (everything in it is durable) and
// mounts it.
func (f *FS) mount() error {
	f.mu.Lock()
	f.byIno = map[uint64]*object{}
	root, err := f.scan(f.backing())
	f.root = root
	f.mu.Unlock()
	if err != nil {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(f.backing(), &st); err != nil {
		return err
	}
	lroot := &gofs.LoopbackRoot{Path: f.backing(), Dev: uint64(st.Dev)}
	// Deprecated for NodeWrapChilder, which wraps nodes once they are
	// made; NewNode makes every node, the root included, a powerfs node
	// from the start.
	//lint:ignore SA1019 see above
	lroot.NewNode = func(r *gofs.LoopbackRoot, parent *gofs.Inode, name string, st *syscall.Stat_t) gofs.InodeEmbedder {
		return &node{LoopbackNode: gofs.LoopbackNode{RootData: r}, pfs: f}
	}
	rootNode := lroot.NewNode(lroot, nil, "", &st) //lint:ignore SA1019 see above
	lroot.RootNode = rootNode
	f.gate.Lock()
	f.dead = false
	f.gate.Unlock()
	zero := time.Duration(0)
	server, err := gofs.Mount(f.mnt, rootNode, &gofs.Options{
		MountOptions: fuse.MountOptions{
			FsName:            "powerfs",
			Name:              "powerfs",
			DirectMountStrict: true,
			DisableXAttrs:     true,
		},
		// Nothing is cached across operations that could change
		// underneath: the kernel asks again.
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
	})
	if err != nil {
		return fmt.Errorf("powerfs: mount %s: %w", f.mnt, err)
	}
	f.server = server
	return nil
}

// scan records the tree under path as durable; the caller holds mu.
func (f *FS) scan(path string) (*object, error) {
	info, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	st := info.Sys().(*syscall.Stat_t)
	if o, ok := f.byIno[st.Ino]; ok {
		return o, nil // a hard link
	}
	o := &object{mode: uint32(info.Mode().Perm())}
	f.byIno[st.Ino] = o
	switch {
	case info.IsDir():
		o.dir = true
		o.entries = map[string]*object{}
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			c, err := f.scan(filepath.Join(path, e.Name()))
			if err != nil {
				return nil, err
			}
			o.entries[e.Name()] = c
		}
	case info.Mode().IsRegular():
		if o.content, err = os.ReadFile(path); err != nil {
			return nil, err
		}
		o.synced = true
	default:
		return nil, fmt.Errorf("powerfs: %s: only files and directories are supported", path)
	}
	return o, nil
}

// Inject adds a fault; Clear removes them all.
func (f *FS) Inject(ft Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := ft
	f.faults = append(f.faults, &c)
}

// Clear removes every injected fault.
func (f *FS) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = nil
}

// fault returns the fault that applies to op on a file named name, and
// counts it.
func (f *FS) fault(op Op, name string) *Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, ft := range f.faults {
		if ok, _ := path.Match(ft.Name, name); ft.Op != op || (ft.Name != "" && !ok) {
			continue
		}
		if ft.Times > 0 {
			ft.Times--
			if ft.Times == 0 {
				f.faults = append(f.faults[:i:i], f.faults[i+1:]...)
			}
		}
		return ft
	}
	return nil
}

// enter starts a mutating operation; it fails with EIO after a cut.
// The caller calls leave when it returns true.
func (f *FS) enter() bool {
	f.gate.RLock()
	if f.dead {
		f.gate.RUnlock()
		return false
	}
	return true
}

func (f *FS) leave() { f.gate.RUnlock() }

// created records a new file or directory (not durable until synced).
func (f *FS) created(ino uint64, dir bool, mode uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := &object{dir: dir, mode: mode & 0o7777}
	if dir {
		o.entries = map[string]*object{}
	}
	f.byIno[ino] = o
}

// object returns the object of a backing inode; the caller holds mu.
func (f *FS) object(ino uint64, dir bool) *object {
	o, ok := f.byIno[ino]
	if !ok {
		// Not seen created: it cannot have been synced.
		o = &object{dir: dir, mode: 0o600}
		if dir {
			o.entries = map[string]*object{}
		}
		f.byIno[ino] = o
	}
	return o
}

// syncFile makes the content of the file open as fd durable. Syncs are
// serialised (under mu, content read included), so that a sync that
// returns has recorded content at least as new as any sync before it.
func (f *FS) syncFile(ino uint64, fd int, withMode bool) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return gofs.ToErrno(err)
	}
	b := make([]byte, st.Size)
	n, err := syscall.Pread(fd, b, 0)
	if errors.Is(err, syscall.EBADF) {
		// Opened write-only: read the same file through a new descriptor
		// (this works for a file without a name too).
		var r *os.File
		if r, err = os.Open(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil {
			n, err = r.ReadAt(b, 0)
			if errors.Is(err, io.EOF) {
				err = nil
			}
			r.Close()
		}
	}
	if err != nil {
		return gofs.ToErrno(err)
	}
	o := f.object(ino, false)
	o.content, o.synced = b[:n], true
	if withMode {
		o.mode = st.Mode & 0o7777
	}
	return 0
}

// syncDir makes the entries of the directory at path durable.
func (f *FS) syncDir(path string) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return gofs.ToErrno(err)
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return gofs.ToErrno(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.object(st.Ino, true)
	m := make(map[string]*object, len(ents))
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			return gofs.ToErrno(err)
		}
		m[e.Name()] = f.object(info.Sys().(*syscall.Stat_t).Ino, info.IsDir())
	}
	o.entries = m
	return 0
}

// PowerCut cuts the power: from now on no operation makes anything
// durable (every mutating operation fails with EIO); kill must then kill
// every process using the mount and wait until they are gone. PowerCut
// unmounts, rebuilds the backing directory as mode says (see CutMode;
// rng chooses what KeepSome keeps) and mounts it again.
func (f *FS) PowerCut(mode CutMode, rng *rand.Rand, kill func()) error {
	f.gate.Lock()
	f.dead = true
	f.gate.Unlock()
	if kill != nil {
		kill()
	}
	if err := f.unmount(); err != nil {
		return err
	}
	old := f.backing()
	f.mu.Lock()
	f.gen++
	f.cuts++
	err := f.rebuild(old, f.backing(), mode, rng)
	f.mu.Unlock()
	if err != nil {
		return fmt.Errorf("powerfs: rebuilding after the cut: %w", err)
	}
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	return f.mount()
}

func (f *FS) unmount() error {
	var err error
	// The kernel refuses while a process it has not finished tearing down
	// still holds a file: try for a while.
	for range 100 {
		if err = f.server.Unmount(); err == nil {
			f.server.Wait()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("powerfs: unmount %s (is a process not killed still using it?): %w", f.mnt, err)
}

// Unmount unmounts the file system, leaving the backing directory as it
// is (everything in it, synced or not). If a process still uses it, the
// connection is aborted (its requests fail with ENOTCONN), the mount
// detached, and the error says so.
func (f *FS) Unmount() error {
	f.gate.Lock()
	f.dead = true
	f.gate.Unlock()
	err := f.unmount()
	if err != nil {
		// Abort the connection first (MNT_FORCE on FUSE): a file this
		// process still holds on the mount would otherwise send its last
		// requests, at exit, to a server that is this very process, and
		// the exit would never end.
		_ = syscall.Unmount(f.mnt, syscall.MNT_FORCE)
		if derr := syscall.Unmount(f.mnt, syscall.MNT_DETACH); derr != nil {
			err = errors.Join(err, derr)
		}
	}
	return err
}

// rebuild writes into dst the state the disk holds after a cut of the
// mounted tree whose current state is at src; the caller holds mu.
func (f *FS) rebuild(src, dst string, mode CutMode, rng *rand.Rand) error {
	made := map[*object]string{}
	keep := func() bool { return mode == KeepSome && rng.IntN(2) == 0 }
	var build func(o *object, cur, path string) error
	build = func(o *object, cur, path string) error {
		if p, ok := made[o]; ok && !o.dir {
			return os.Link(p, path)
		}
		made[o] = path
		if !o.dir {
			content, fmode := o.content, o.mode
			if cur != "" && keep() {
				if b, err := os.ReadFile(cur); err == nil {
					content = b
					if info, err := os.Lstat(cur); err == nil {
						fmode = uint32(info.Mode().Perm())
					}
				}
			}
			if !o.synced && content == nil {
				content = []byte{}
			}
			if err := os.WriteFile(path, content, 0o600); err != nil {
				return err
			}
			return os.Chmod(path, fs.FileMode(fmode))
		}
		if err := os.Mkdir(path, 0o755); err != nil {
			return err
		}
		entries := o.entries
		if cur != "" && keep() {
			// The directory as it is at the cut.
			if ents, err := os.ReadDir(cur); err == nil {
				entries = map[string]*object{}
				for _, e := range ents {
					info, err := e.Info()
					if err != nil {
						return err
					}
					entries[e.Name()] = f.object(info.Sys().(*syscall.Stat_t).Ino, info.IsDir())
				}
			}
		}
		for name, c := range entries {
			// The current file of that name, if it is still the same
			// object (for what KeepSome keeps).
			cpath := ""
			if cur != "" {
				p := filepath.Join(cur, name)
				if info, err := os.Lstat(p); err == nil && f.byIno[info.Sys().(*syscall.Stat_t).Ino] == c {
					cpath = p
				}
			}
			if err := build(c, cpath, filepath.Join(path, name)); err != nil {
				return err
			}
		}
		return os.Chmod(path, fs.FileMode(o.mode))
	}
	return build(f.root, src, dst)
}

// node is a loopback node that records creations and syncs, and fails
// every mutating operation after a cut.
type node struct {
	gofs.LoopbackNode
	pfs *FS
}

// backingPath returns the node's path in the backing directory.
func (n *node) backingPath() string {
	return filepath.Join(n.RootData.Path, n.Path(n.Root()))
}

var errDead = syscall.EIO

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	if flags&unix.O_TMPFILE == unix.O_TMPFILE {
		return nil, nil, 0, syscall.ENOTSUP
	}
	if !n.pfs.enter() {
		return nil, nil, 0, errDead
	}
	defer n.pfs.leave()
	in, fh, ff, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return in, fh, ff, errno
	}
	n.pfs.created(in.StableAttr().Ino, false, mode)
	return in, n.wrap(in, fh, flags), ff, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 {
		if !n.pfs.enter() {
			return nil, 0, errDead
		}
		defer n.pfs.leave()
	}
	fh, ff, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return fh, ff, errno
	}
	return n.wrap(n.EmbeddedInode(), fh, flags), ff, 0
}

func (n *node) wrap(in *gofs.Inode, fh gofs.FileHandle, flags uint32) gofs.FileHandle {
	lf := fh.(*gofs.LoopbackFile)
	return &file{loopFile: lf, lf: lf, pfs: n.pfs, in: in, ino: in.StableAttr().Ino, flags: flags}
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if !n.pfs.enter() {
		return nil, errDead
	}
	defer n.pfs.leave()
	in, errno := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if errno == 0 {
		n.pfs.created(in.StableAttr().Ino, true, mode)
	}
	return in, errno
}

func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if !n.pfs.enter() {
		return nil, errDead
	}
	defer n.pfs.leave()
	return n.LoopbackNode.Link(ctx, target, name, out)
}

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if !n.pfs.enter() {
		return errDead
	}
	defer n.pfs.leave()
	np := newParent
	if p, ok := newParent.(*node); ok {
		np = &p.LoopbackNode
	}
	return n.LoopbackNode.Rename(ctx, name, np, newName, flags)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if !n.pfs.enter() {
		return errDead
	}
	defer n.pfs.leave()
	return n.LoopbackNode.Unlink(ctx, name)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if !n.pfs.enter() {
		return errDead
	}
	defer n.pfs.leave()
	return n.LoopbackNode.Rmdir(ctx, name)
}

func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !n.pfs.enter() {
		return errDead
	}
	defer n.pfs.leave()
	if f, ok := fh.(*file); ok {
		fh = f.lf
	}
	return n.LoopbackNode.Setattr(ctx, fh, in, out)
}

func (n *node) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	if f, ok := fh.(*file); ok {
		return f.Fsync(ctx, flags)
	}
	return syscall.ENOTSUP
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	fh, ff, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return fh, ff, errno
	}
	return &dirHandle{loopDir: fh.(loopDir), n: n}, ff, 0
}

// Not supported (see the package documentation).
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.ENOTSUP
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.ENOTSUP
}

func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.ENOTSUP
}

func (n *node) CopyFileRange(ctx context.Context, fhIn gofs.FileHandle, offIn uint64, out *gofs.Inode, fhOut gofs.FileHandle, offOut, ln, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOTSUP
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return syscall.ENOTSUP
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return syscall.ENOTSUP
}

// loopDir is what the bridge uses of a loopback directory handle, without
// its Fsyncdir (dirHandle has its own).
type loopDir interface {
	gofs.FileHandle
	gofs.FileReleasedirer
	gofs.FileSeekdirer
	gofs.FileReaddirenter
}

type dirHandle struct {
	loopDir
	n *node
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	if !d.n.pfs.enter() {
		return errDead
	}
	defer d.n.pfs.leave()
	name, _ := d.n.Parent()
	if ft := d.n.pfs.fault(OpSyncDir, name); ft != nil {
		return ft.Err
	}
	return d.n.pfs.syncDir(d.n.backingPath())
}

// loopFile is what the bridge uses of a loopback file handle. It leaves
// out FilePassthroughFder on purpose: with passthrough the kernel would
// write to the backing file without asking.
type loopFile interface {
	gofs.FileHandle
	gofs.FileReleaser
	gofs.FileGetattrer
	gofs.FileReader
	gofs.FileFlusher
	gofs.FileLseeker
	gofs.FileGetlker
	gofs.FileSetlker
	gofs.FileSetlkwer
}

// file is an open file: writes and syncs go through its fault checks and
// records.
type file struct {
	loopFile
	lf    *gofs.LoopbackFile
	pfs   *FS
	in    *gofs.Inode
	ino   uint64
	flags uint32
}

func (f *file) name() string {
	name, _ := f.in.Parent()
	return name
}

func (f *file) fd() int {
	fd, _ := f.lf.PassthroughFd()
	return fd
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if !f.pfs.enter() {
		return 0, errDead
	}
	defer f.pfs.leave()
	if ft := f.pfs.fault(OpWrite, f.name()); ft != nil {
		if ft.Short <= 0 || ft.Short >= len(data) {
			return 0, ft.Err
		}
		data = data[:ft.Short]
	}
	n, errno := f.lf.Write(ctx, data, off)
	if errno == 0 && f.flags&(syscall.O_SYNC|syscall.O_DSYNC) != 0 {
		errno = f.pfs.syncFile(f.ino, f.fd(), f.flags&syscall.O_SYNC == syscall.O_SYNC)
	}
	return n, errno
}

func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if !f.pfs.enter() {
		return errDead
	}
	defer f.pfs.leave()
	if ft := f.pfs.fault(OpSync, f.name()); ft != nil {
		return ft.Err
	}
	// flags&1 is fdatasync: the mode is metadata it need not carry.
	return f.pfs.syncFile(f.ino, f.fd(), flags&1 == 0)
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if !f.pfs.enter() {
		return errDead
	}
	defer f.pfs.leave()
	return f.lf.Setattr(ctx, in, out)
}

func (f *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	return syscall.ENOTSUP
}

// ErrNoFUSE is returned by Available when FUSE cannot be mounted here.
var ErrNoFUSE = errors.New("powerfs: FUSE is not available")

// Available reports whether a powerfs can be mounted: /dev/fuse exists
// and the process may mount (root).
func Available() error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("%w: %w", ErrNoFUSE, err)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: mounting without fusermount needs root", ErrNoFUSE)
	}
	return nil
}
