package powerfs

import (
	"context"
	"path/filepath"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

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
