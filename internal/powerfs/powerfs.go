package powerfs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
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
