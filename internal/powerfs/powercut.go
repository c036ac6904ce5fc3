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
