package powerfs

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

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
	b := &rebuilder{f: f, made: map[*object]string{}, mode: mode, rng: rng}
	return b.build(f.root, src, dst)
}

// rebuilder is the state of one rebuild: the path each object was written
// at (a file met again under another name becomes a hard link), and what
// the cut keeps of the current state.
type rebuilder struct {
	f    *FS
	made map[*object]string
	mode CutMode
	rng  *rand.Rand
}

// keep reports whether a file or directory is written as it is at the cut
// rather than as it was synced: at random, with KeepSome.
func (b *rebuilder) keep() bool { return b.mode == KeepSome && b.rng.IntN(2) == 0 }

// build writes the object o at path; cur is its current state in the
// mounted tree ("" if there is none).
func (b *rebuilder) build(o *object, cur, path string) error {
	if p, ok := b.made[o]; ok && !o.dir {
		return os.Link(p, path)
	}
	b.made[o] = path
	if !o.dir {
		return b.buildFile(o, cur, path)
	}
	return b.buildDir(o, cur, path)
}

// buildFile writes the file o at path: its synced content and mode, or
// those of its current state cur if the cut keeps it.
func (b *rebuilder) buildFile(o *object, cur, path string) error {
	content, fmode := o.content, o.mode
	if cur != "" && b.keep() {
		if data, err := os.ReadFile(cur); err == nil {
			content = data
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

// buildDir makes the directory o at path and builds its entries: the
// synced ones, or those of its current state cur if the cut keeps it.
func (b *rebuilder) buildDir(o *object, cur, path string) error {
	if err := os.Mkdir(path, 0o755); err != nil {
		return err
	}
	entries := o.entries
	if cur != "" && b.keep() {
		// The directory as it is at the cut.
		ents, ok, err := b.currentEntries(cur)
		if err != nil {
			return err
		}
		if ok {
			entries = ents
		}
	}
	for name, c := range entries {
		if err := b.build(c, b.currentPath(cur, name, c), filepath.Join(path, name)); err != nil {
			return err
		}
	}
	return os.Chmod(path, fs.FileMode(o.mode))
}

// currentEntries returns the entries of the current directory cur, by
// name; ok is false if cur cannot be read.
func (b *rebuilder) currentEntries(cur string) (entries map[string]*object, ok bool, err error) {
	ents, err := os.ReadDir(cur)
	if err != nil {
		return nil, false, nil
	}
	entries = map[string]*object{}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			return nil, true, err
		}
		entries[e.Name()] = b.f.object(info.Sys().(*syscall.Stat_t).Ino, info.IsDir())
	}
	return entries, true, nil
}

// currentPath returns the path of the current file name in the current
// directory cur if it is still the object c (for what KeepSome keeps),
// else "".
func (b *rebuilder) currentPath(cur, name string, c *object) string {
	if cur == "" {
		return ""
	}
	p := filepath.Join(cur, name)
	if info, err := os.Lstat(p); err == nil && b.f.byIno[info.Sys().(*syscall.Stat_t).Ino] == c {
		return p
	}
	return ""
}
